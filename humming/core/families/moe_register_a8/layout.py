"""The MoE register-A W4A8 kernel's weights: every expert in the register-A W4A8 layout
(humming.core.families.register_a8.layout: signed int4 codes in the lanes' fragment order, fp32 scales
[K/group, N]), padded to multiples of 128 once, when prepared, and stacked expert after expert at fixed strides."""
from __future__ import annotations

import torch

from humming.core.families.moe_wna16.layout import ExpertWeights, stacked_experts
from humming.core.families.moe_wna16.routed_forms import padded_to_tiles
from humming.core.families.register_a8.layout import prepare_w4a8_rs


def prepare_rs8_experts(qw, act_dtype: torch.dtype, a_type: str) -> ExpertWeights:
    """Repack a stacked W4A8 QuantizedWeight (signed int4, group-128 or per-channel scales) for the kernel."""
    weight = qw.with_scheme(qw.scheme.with_(act=None)) if getattr(qw, "num_experts", None) else qw
    return stacked_experts(weight, padded_to_tiles, lambda w: prepare_w4a8_rs(w, act_dtype, a_type))
