"""The MoE register-A family: the indexed, grouped and masked expert GEMMs on the register-A wgmma kernel (sm_90a),
for int4 weights where the experts get enough rows (prefill); the MoE tile kernel (humming.core.families.moe_wna16)
takes the rest and runs on the same prepared weights."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.moe_register_a.generator import moe_register_a_source
from humming.core.families.moe_register_a.planner import PATH, plan_moe_register_a
from humming.core.families.moe_register_a.planner import refusal as plan_refusal
from humming.core.families.moe_wna16.family import pack, with_act_order
from humming.core.families.moe_wna16.tuned import entry_reason, entry_tiles, ignored, moe_entry, other_kernel_chosen
from humming.core.families.register_a.tiles import RegisterATiles
from humming.core.family import Family
from humming.errors import HummingError


def refusal(problem, caps, ask) -> str | None:
    why, entry = other_kernel_chosen(problem, caps, PATH)
    if why:
        return why
    return plan_refusal(caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts,
                        problem.top_k, measured=entry is not None) or None


def plan(problem, caps):
    return with_act_order(problem, _plan(problem, caps))


def _plan(problem, caps):
    args = (caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts, problem.top_k)
    entry = moe_entry(problem, caps)
    if entry is not None:
        try:
            tuned = plan_moe_register_a(*args, token_tile=entry_tiles(entry)[0].bm)
            return replace(tuned, reasons=tuned.reasons + (entry_reason(entry, problem.m),))
        except (HummingError, KeyError, TypeError, ValueError) as exc:
            ignored(entry, problem.m, exc)
    return plan_moe_register_a(*args)


def owns(plan) -> bool:
    return plan.path == PATH


FAMILY = Family("moe_register_a", "wgmma MoE W4A16: indexed / grouped / masked expert GEMMs on the register-A kernel "
                "(prefill)", refusal, plan, "x", owns, moe_register_a_source, pack,
                tiles=RegisterATiles)
