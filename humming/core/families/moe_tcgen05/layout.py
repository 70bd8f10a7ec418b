"""The MoE tcgen05 kernel's weights: every expert in the wgmma WnA16 layout (humming.core.families.wgmma_dequant.layout:
signed int4 in 64x64 blocks of 2 KB, group scales [K/group, N] in the activation type), padded as the MoE tile
kernel's (humming.core.families.moe_wna16.layout.padded_shape) once, when prepared, act-order experts sorted by group
first, and stacked expert after expert at fixed strides."""
from __future__ import annotations

import torch

from humming.core.families.moe_wna16.layout import ExpertWeights, padded_shape, stacked_experts
from humming.core.families.wgmma_dequant.layout import prepare_wgmma_wna16


def prepare_tcgen05_experts(qw, act_dtype: torch.dtype) -> ExpertWeights:
    """Repack a stacked QuantizedWeight (``num_experts`` set; signed int4, no zero points) for the MoE tcgen05
    kernel."""
    return stacked_experts(qw, padded_shape, lambda w: prepare_wgmma_wna16(w, act_dtype))
