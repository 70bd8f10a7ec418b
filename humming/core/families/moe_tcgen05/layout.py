"""The MoE tcgen05 kernel's weights: every expert in the wgmma WnA16 layout (humming.core.families.wgmma_dequant.layout:
signed int4 in 64x64 blocks of 2 KB, group scales [K/group, N] in the activation type), padded as the MoE tile
kernel's (humming.core.families.moe_wna16.layout.padded_shape) once, when prepared, act-order experts sorted by group
first, and stacked expert after expert at fixed strides."""
from __future__ import annotations

import torch

from humming.core.families.moe_wna16.layout import ExpertWeights, padded_shape, sorted_by_group
from humming.core.families.wgmma_dequant.layout import prepare_wgmma_wna16
from humming.core.quant.padding import padded_weight
from humming.errors import ShapeError


def _stack(parts: list) -> torch.Tensor | None:
    return None if parts[0] is None else torch.stack(parts).contiguous()


def prepare_tcgen05_experts(qw, act_dtype: torch.dtype) -> ExpertWeights:
    """Repack a stacked QuantizedWeight (``num_experts`` set; signed int4, no zero points) for the MoE tcgen05
    kernel."""
    if not getattr(qw, "num_experts", None):
        raise ShapeError("a MoE GEMM needs expert-stacked weights: humming.quantize(w [E, N, K], scheme)")
    qw, perm = sorted_by_group(qw)
    n, k = qw.shape
    n_pad, k_pad = padded_shape(n, k)
    packed = [prepare_wgmma_wna16(padded_weight(qw.expert(e), n_pad, k_pad), act_dtype)
              for e in range(qw.num_experts)]
    first = packed[0]
    return ExpertWeights(
        layout=first.layout, n=n, k=k, qweight=torch.stack([p.qweight.reshape(-1) for p in packed]).contiguous(),
        scales=_stack([p.scales for p in packed]), zeros=None,
        channel_scale=_stack([p.channel_scale for p in packed]), bias=_stack([p.bias for p in packed]),
        expert_scale=torch.tensor([float(p.out_scale) for p in packed], dtype=torch.float32,
                                  device=first.qweight.device),
        perm=perm)
