"""The MoE register-A W4A8 family: the indexed, grouped and masked expert GEMMs of W4A8 experts (int4 weights,
int8 / e4m3 activations per token) on the register-A wgmma W4A8 kernel (sm_90a prefill), off until measured (the
knob moe.w4a8_min_rows); the MoE tile and register-A kernels run W4A8 on 16-bit activation codes otherwise."""
from __future__ import annotations

from humming.core.families.moe_register_a8.generator import moe_register_a8_source
from humming.core.families.moe_register_a8.layout import prepare_rs8_experts
from humming.core.families.moe_register_a8.planner import PATH, plan_moe_register_a8, refusal
from humming.core.families.moe_wna16.routed_forms import problem_planner, routed_family
from humming.core.families.register_a8.tiles import RegisterA8Tiles

FAMILY = routed_family(
    "moe_register_a8", "wgmma MoE W4A8: indexed / grouped / masked expert GEMMs of int4 experts on 8-bit activation "
    "codes (register-A, prefill)", PATH, problem_planner(plan_moe_register_a8), refusal, moe_register_a8_source,
    lambda qw, dtype, layout, caps: prepare_rs8_experts(qw, dtype, layout.a_type), tiles=RegisterA8Tiles)
