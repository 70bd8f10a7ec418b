"""The MoE WnA16 family: one mma.sync tile kernel for the indexed, grouped and masked expert GEMMs (each a routing
of rows to experts, humming.core.moe.routing), on every profile with mma.sync for the activation type."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.moe_wna16.activations import activation_step
from humming.core.families.moe_wna16.generator import moe_kernel_source
from humming.core.families.moe_wna16.layout import ACT_ORDER_REASON, prepare_experts
from humming.core.families.moe_wna16.planner import FAMILY as PLAN_FAMILY
from humming.core.families.moe_wna16.planner import PATH, plan_moe
from humming.core.families.moe_wna16.tuned import entry_reason, entry_tiles, ignored, moe_entry
from humming.core.family import Family
from humming.errors import HummingError


def refusal(problem, caps, ask) -> str | None:
    if not problem.is_moe:
        return "dense GEMMs run on the dense families"
    if problem.quantized_activations:
        try:
            activation_step(problem.scheme, problem.n, problem.k)
        except HummingError as exc:
            return str(exc)
    return None


def plan(problem, caps):
    return with_act_order(problem, _plan(problem, caps))


def _plan(problem, caps):
    args = (caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts, problem.top_k)
    entry = moe_entry(problem, caps)
    if entry is not None and entry.get("path") == PATH:
        try:
            tuned = plan_moe(*args, forced=entry_tiles(entry))
            return replace(tuned, reasons=tuned.reasons + (entry_reason(entry, problem.m),))
        except (HummingError, KeyError, TypeError, ValueError) as exc:
            ignored(entry, problem.m, exc)
    return plan_moe(*args)


def with_act_order(problem, p):
    """The plan with the act-order reason where the experts are act-order (both MoE families run them alike)."""
    return replace(p, reasons=p.reasons + (ACT_ORDER_REASON,)) if problem.act_order else p


def owns(plan) -> bool:
    return plan.family == PLAN_FAMILY


def source(plan, backend, caps) -> str:
    return moe_kernel_source(plan, backend, caps)


def pack(qw, dtype, layout, caps):
    return prepare_experts(qw.with_scheme(qw.scheme.with_(act=None)) if qw.scheme.act else qw, dtype)


FAMILY = Family("moe_wna16", "mma.sync MoE WnA16: indexed / grouped / masked expert GEMMs on the tile kernel", refusal,
                plan, "x", owns, source, pack)
