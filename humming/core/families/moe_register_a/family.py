"""The MoE register-A family: the indexed, grouped and masked expert GEMMs on the register-A wgmma kernel (sm_90a),
for int4 weights where the experts get enough rows (prefill); the MoE tile kernel (humming.core.families.moe_wna16)
takes the rest and runs on the same prepared weights."""
from __future__ import annotations

from humming.core.families.moe_register_a.generator import moe_register_a_source
from humming.core.families.moe_register_a.planner import PATH, plan_moe_register_a
from humming.core.families.moe_register_a.planner import refusal as plan_refusal
from humming.core.families.moe_wna16.family import pack
from humming.core.families.register_a.tiles import RegisterATiles
from humming.core.family import Family


def refusal(problem, caps, ask) -> str | None:
    if not problem.is_moe:
        return "dense GEMMs run on the dense families"
    if problem.act_order:
        return "act-order (g_idx) expert weights are not supported by the MoE kernels"
    return plan_refusal(caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts,
                        problem.top_k) or None


def plan(problem, caps):
    return plan_moe_register_a(caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts,
                               problem.top_k)


def owns(plan) -> bool:
    return plan.path == PATH


FAMILY = Family("moe_register_a", "wgmma MoE W4A16: indexed / grouped / masked expert GEMMs on the register-A kernel "
                "(prefill)", refusal, plan, "x", owns, moe_register_a_source, pack,
                tiles=RegisterATiles)
