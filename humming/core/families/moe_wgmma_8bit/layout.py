"""The MoE wgmma 8-bit kernels' weights: every expert as the dense wgmma kernel reads it
(humming.core.families.wgmma_8bit.layout: int8 / e4m3 codes as stored, K-major [N, K] bytes; fp32 per-channel scales,
a per-tensor factor, or the [N/128, K/128] table of 128x128 weight blocks; W4A8: packed e2m1 codes [N, K/2] bytes and
fp32 group scales [K/group, N]), padded to multiples of 128 once, when
prepared, and stacked expert after expert at fixed strides (the codes as bytes: the kernel steps its byte pointer)."""
from __future__ import annotations

import torch

from humming.core.families.moe_wgmma_8bit.planner import a_type_of
from humming.core.families.moe_wna16.layout import ExpertWeights, stacked_experts
from humming.core.families.moe_wna16.routed_forms import padded_to_tiles
from humming.core.families.wgmma_8bit.layout import prepare_w4a8_wgmma, prepare_w8a8_wgmma


def prepare_w8a8_experts(qw, act_dtype: torch.dtype) -> ExpertWeights:
    """Repack a stacked W8A8 QuantizedWeight (int8 / e4m3 experts) for the kernel."""
    a_type = a_type_of(qw.scheme)
    return stacked_experts(qw, padded_to_tiles, lambda w: prepare_w8a8_wgmma(w, act_dtype, a_type))


def prepare_w4a8_experts(qw, act_dtype: torch.dtype) -> ExpertWeights:
    """Repack a stacked MXFP4 x FP8 QuantizedWeight (e2m1 experts) for the W4A8 kernel: packed 4-bit K-major codes
    [N, K/2] bytes and fp32 group scales [K/group, N] in the kernel's column order, per expert."""
    return stacked_experts(qw, padded_to_tiles, lambda w: prepare_w4a8_wgmma(w, act_dtype, "e4m3"))
