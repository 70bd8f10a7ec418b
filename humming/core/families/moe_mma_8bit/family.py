"""The MoE mma.sync 8-bit family: the indexed, grouped and masked expert GEMMs of W8A8 (int8 / e4m3, per-channel or
per-tensor weight scales) and W4A8 (int4 / e2m1 widened in registers, group scales) experts on the 8-bit tile kernel,
with per-token activation scales, on every profile with 8-bit mma.sync forms, from moe.mma_8bit_min_rows rows per
expert on average: the MoE tile kernel runs these schemes on 16-bit activation codes otherwise."""
from __future__ import annotations

from humming.core.families.moe_mma_8bit.generator import moe_mma_8bit_source
from humming.core.families.moe_mma_8bit.layout import prepare_8bit_experts
from humming.core.families.moe_mma_8bit.planner import PATH, plan_moe_mma_8bit, refusal
from humming.core.families.moe_wna16.routed_forms import routed_family

FAMILY = routed_family(
    "moe_mma_8bit", "mma.sync MoE W8A8 / W4A8: indexed / grouped / masked expert GEMMs on 8-bit activation codes "
    "(every profile with 8-bit mma.sync forms)", PATH, plan_moe_mma_8bit, refusal, moe_mma_8bit_source,
    lambda qw, dtype, layout, caps: prepare_8bit_experts(qw, dtype, layout))
