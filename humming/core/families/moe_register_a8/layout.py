"""The MoE register-A W4A8 kernel's weights: every expert in the register-A W4A8 layout
(humming.core.families.register_a8.layout: signed int4 codes in the lanes' fragment order, fp32 scales
[K/group, N]), padded to multiples of 128 once, when prepared, and stacked expert after expert at fixed strides."""
from __future__ import annotations

import torch

from humming.core.families.moe_register_a8.planner import padded_shape
from humming.core.families.moe_wna16.layout import ExpertWeights
from humming.core.families.register_a8.layout import prepare_w4a8_rs
from humming.core.quant.padding import padded_weight
from humming.errors import ShapeError


def prepare_rs8_experts(qw, act_dtype: torch.dtype, a_type: str) -> ExpertWeights:
    """Repack a stacked W4A8 QuantizedWeight (signed int4, group-128 or per-channel scales) for the kernel."""
    if not getattr(qw, "num_experts", None):
        raise ShapeError("a MoE GEMM needs expert-stacked weights: humming.quantize(w [E, N, K], scheme)")
    n, k = qw.shape
    n_pad, k_pad = padded_shape(n, k)
    weight = qw.with_scheme(qw.scheme.with_(act=None))
    packed = [prepare_w4a8_rs(padded_weight(weight.expert(e), n_pad, k_pad), act_dtype, a_type)
              for e in range(qw.num_experts)]
    first = packed[0]
    return ExpertWeights(
        layout=first.layout, n=n, k=k, qweight=torch.stack([p.qweight for p in packed]).contiguous(),
        scales=torch.stack([p.scales for p in packed]).contiguous(), zeros=None, channel_scale=None,
        bias=None if first.bias is None else torch.stack([p.bias for p in packed]).contiguous(),
        expert_scale=torch.tensor([float(p.out_scale) for p in packed], dtype=torch.float32,
                                  device=first.qweight.device))
