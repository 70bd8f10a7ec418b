"""The mma.sync 8-bit family: W8A8 (int8 / e4m3 operands as stored, per-channel or per-tensor weight scales, or
128x128 weight blocks) and W4A8 (int4 / e2m1 weights widened exactly to s8 / e4m3 in registers, group scales) on
every profile with 8-bit mma.sync forms; the legacy path where newer tensor cores dropped a type (B300 INT8)."""
from __future__ import annotations

from humming.core.common.quantized import runs_on_w8a8, w4a8_widening
from humming.core.families.mma_8bit.generator import w8a8_kernel_source
from humming.core.families.mma_8bit.layout import W4A8Layout, W8A8Layout, prepare_w4a8, prepare_w8a8
from humming.core.families.mma_8bit.planner import plan_w8a8
from humming.core.families.runnable import fallback
from humming.core.family import Family

FOUR_BIT = ("int4", "e2m1")
K_TILE = 128  # every 8-bit tile's BK (planner.plan_w8a8)


def refusal(problem, caps, ask) -> str | None:
    if not problem.quantized_activations:
        return "the scheme has 16-bit activations"
    choice = fallback(problem, caps)
    if not runs_on_w8a8(choice, problem.scheme):
        return f"an 8-bit kernel does not execute {choice.describe()}"
    if problem.k % K_TILE:
        return f"K={problem.k} is not a multiple of the 8-bit kernel's {K_TILE}-wide k tile"
    return None


def plan(problem, caps):
    sch, choice = problem.scheme, fallback(problem, caps)
    n, k = problem.n, problem.k
    if sch.weight in FOUR_BIT:
        layout = W4A8Layout(choice.a_type, n, k, sch.weight_scale.group_size or k, weight_format=sch.weight,
                            widen=w4a8_widening(problem.options, choice, sch.weight))
    else:
        layout = W8A8Layout(choice.a_type, n, k, sch.weight_scale.granularity)
    return plan_w8a8(caps, layout, problem.m, problem.act, choice, scheme=sch.name)


def owns(plan) -> bool:  # (not the MoE form's plans, humming.core.families.moe_mma_8bit: paths "moe-...")
    return plan.family == "mma_sync" and plan.is_8bit and not plan.path.startswith("moe-")


def pack(qw, dtype, layout, caps):
    if isinstance(layout, W4A8Layout):
        return prepare_w4a8(qw, dtype, layout.a_type, widen=layout.widen)
    return prepare_w8a8(qw, dtype, layout.a_type)


FAMILY = Family("mma_8bit", "mma.sync W8A8 / W4A8 (the legacy 8-bit path too)", refusal, plan, "codes8", owns,
                w8a8_kernel_source, pack)
