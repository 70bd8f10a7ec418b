"""Mixture-of-experts pieces shared by the MoE kernels: device-side routing (:mod:`.routing`; on CUDA one launch of
the kernels of :mod:`.route_kernel`) and the oracle the kernels are checked against (:mod:`.reference`)."""
from __future__ import annotations

from humming.core.moe.reference import (
    reference_activation,
    reference_grouped_gemm,
    reference_masked_gemm,
    reference_moe_gemm,
    reference_moe_layer,
)
from humming.core.moe.route_kernel import route_cuda, routing_from_counts_cuda, routing_from_offsets_cuda
from humming.core.moe.routing import (
    Routing,
    capacity,
    check_expert_map,
    check_ids,
    route,
    routing_from_counts,
    routing_from_offsets,
)

__all__ = [
    "Routing",
    "capacity",
    "route",
    "routing_from_offsets",
    "routing_from_counts",
    "route_cuda",
    "routing_from_offsets_cuda",
    "routing_from_counts_cuda",
    "check_ids",
    "check_expert_map",
    "reference_moe_gemm",
    "reference_grouped_gemm",
    "reference_masked_gemm",
    "reference_moe_layer",
    "reference_activation",
]
