"""The MoE wgmma 8-bit family: the indexed, grouped and masked expert GEMMs of W8A8 experts (int8 / e4m3 weights and
activations: per-channel or per-tensor weight scales with per-token activation scales, or DeepSeek-V3's 128x128
weight blocks with activations per 1x128 group) on the wgmma W8A8 kernel, and of MXFP4 x FP8 experts on the wgmma
W4A8 kernel (sm_90a prefill), off until measured (the knob moe.wgmma_8bit_min_rows); the MoE tile and register-A
kernels run these schemes on 16-bit activation codes otherwise."""
from __future__ import annotations

from humming.core.families.moe_wgmma_8bit.generator import moe_wgmma_8bit_source
from humming.core.families.moe_wgmma_8bit.layout import prepare_w4a8_experts, prepare_w8a8_experts
from humming.core.families.moe_wgmma_8bit.planner import PATH, plan_moe_wgmma_8bit, refusal
from humming.core.families.moe_wna16.routed_forms import problem_planner, routed_family
from humming.core.families.wgmma_8bit.layout import WgmmaW4A8Layout
from humming.core.families.wgmma_8bit.tiles import Wgmma8Tiles


def pack(qw, dtype, layout, caps):
    return prepare_w4a8_experts(qw, dtype) if isinstance(layout, WgmmaW4A8Layout) else prepare_w8a8_experts(qw, dtype)


FAMILY = routed_family(
    "moe_wgmma_8bit", "wgmma MoE W8A8 / MXFP4 W4A8: indexed / grouped / masked expert GEMMs of int8 / e4m3 / e2m1 "
    "experts on 8-bit activation codes (prefill)", PATH, problem_planner(plan_moe_wgmma_8bit), refusal,
    moe_wgmma_8bit_source, pack, tiles=Wgmma8Tiles)
