"""The MoE mma.sync 8-bit kernel's weights: every expert in the 8-bit tile kernel's k32 atom layout
(humming.core.families.mma_8bit.layout: W8A8 codes as stored with fp32 per-channel scales or a per-tensor factor;
W4A8 packed 4-bit codes with fp32 group scales), padded to multiples of 128 once, when prepared, and stacked expert
after expert at fixed strides."""
from __future__ import annotations

import torch

from humming.core.families.mma_8bit.layout import W4A8Layout, prepare_w4a8, prepare_w8a8
from humming.core.families.moe_wna16.layout import ExpertWeights, stacked_experts
from humming.core.families.moe_wna16.routed_forms import padded_to_tiles


def prepare_8bit_experts(qw, act_dtype: torch.dtype, layout) -> ExpertWeights:
    """Repack a stacked W8A8 / W4A8 QuantizedWeight for the kernel, in ``layout``'s operand type."""
    if isinstance(layout, W4A8Layout):
        return stacked_experts(qw, padded_to_tiles, lambda w: prepare_w4a8(w, act_dtype, layout.a_type,
                                                                           widen=layout.widen))
    return stacked_experts(qw, padded_to_tiles, lambda w: prepare_w8a8(w, act_dtype, layout.a_type))
