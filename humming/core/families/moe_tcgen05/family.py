"""The MoE tcgen05 families: the indexed, grouped and masked expert GEMMs on the tcgen05 WnA16 kernel (int4 experts)
and on the tcgen05 W8A8 kernel (int8 / e4m3 experts on 8-bit activation codes), Blackwell datacenter prefill.
Compiled for their targets, never run on hardware: they take problems only with HUMMING_UNVERIFIED_KERNELS=1; the
MoE tile kernel runs the rest."""
from __future__ import annotations

from humming.core.families.moe_tcgen05.generator import moe_tcgen05_source, moe_tcgen05_w8a8_source
from humming.core.families.moe_tcgen05.layout import prepare_tcgen05_experts
from humming.core.families.moe_tcgen05.planner import (
    PATH,
    W8A8_PATH,
    plan_moe_tcgen05,
    plan_moe_tcgen05_w8a8,
    unverified_note,
    w8a8_refusal,
    w8a8_unverified_note,
)
from humming.core.families.moe_tcgen05.planner import refusal as plan_refusal
from humming.core.families.moe_wgmma_8bit.layout import prepare_w8a8_experts
from humming.core.families.moe_wna16.family import with_act_order
from humming.core.families.moe_wna16.routed_forms import problem_planner, routed_family
from humming.core.families.moe_wna16.tuned import other_kernel_chosen
from humming.core.family import Family
from humming.devices.current import runs_here


def refusal(problem, caps, ask) -> str | None:
    why, _ = other_kernel_chosen(problem, caps, PATH)
    if why:
        return why
    why = plan_refusal(caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts,
                       problem.top_k)
    if why:
        return why
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target"
    return None


def plan(problem, caps):
    return with_act_order(problem, plan_moe_tcgen05(caps, problem.scheme, problem.m, problem.n, problem.k,
                                                    problem.act, problem.experts, problem.top_k))


def owns(plan) -> bool:
    return plan.path == PATH


def pack(qw, dtype, layout, caps):
    return prepare_tcgen05_experts(qw, dtype)


FAMILY = Family("moe_tcgen05", "tcgen05 MoE W4A16: indexed / grouped / masked expert GEMMs, int4 experts dequantized "
                "into shared memory (prefill on profiles declaring tcgen05)", refusal, plan, "x", owns, moe_tcgen05_source, pack,
                unverified=unverified_note, announce=True)


W8A8 = routed_family(
    "moe_tcgen05_w8a8", "tcgen05 MoE W8A8: indexed / grouped / masked expert GEMMs of int8 / e4m3 experts on 8-bit "
    "activation codes (prefill on profiles declaring tcgen05)", W8A8_PATH, problem_planner(plan_moe_tcgen05_w8a8),
    w8a8_refusal, moe_tcgen05_w8a8_source, lambda qw, dtype, layout, caps: prepare_w8a8_experts(qw, dtype),
    unverified=w8a8_unverified_note, announce=True)
