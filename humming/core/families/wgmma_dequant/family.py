"""The wgmma WnA16 family with the weights dequantized into shared memory: signed int4 weights, from M 128 where the
register-A forms do not take the problem."""
from __future__ import annotations

from humming.core.families.wgmma_dequant.generator import wgmma_wna16_kernel_source
from humming.core.families.wgmma_dequant.layout import prepare_wgmma_wna16, supports, wgmma_wna16_layout
from humming.core.families.wgmma_dequant.planner import PATH, plan_wna16_wgmma, wgmma_k16_form
from humming.core.family import Family
from humming.core.tuning import knobs
from humming.devices.current import runs_here

MIN_M = 128  # one full 128-row wgmma tile


def wna16_wgmma_refusal(problem, caps, min_m: int = MIN_M) -> str | None:
    """Why the wgmma WnA16 shapes do not take the problem (scheme, shape, declared copies), or None."""
    if problem.m < min_m:
        return f"M={problem.m} < {min_m}: one full 128-row tile"
    why = supports(problem.scheme)
    if why:
        return why
    if problem.n % 128 or problem.k % 64:
        return f"N={problem.n} must be a multiple of 128 and K={problem.k} of 64"
    if not caps.memory.cp_async:
        return f"{caps.name} does not declare cp.async"
    return None


def refusal(problem, caps, ask) -> str | None:
    if not knobs.value("wgmma_wna16.enabled", caps):
        return "the wgmma WnA16 kernels are off (wgmma_wna16.enabled)"
    why = wna16_wgmma_refusal(problem, caps)
    if why:
        return why
    if wgmma_k16_form(caps, problem.act) is None:
        return f"{caps.name} declares no wgmma m64nNk16 {problem.act}"
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target (wgmma kernels run only there)"
    return None


def layout_of(problem):
    return problem.memo("wgmma_wna16_layout", lambda: wgmma_wna16_layout(problem.scheme, problem.n, problem.k,
                                                                         problem.act))


def plan(problem, caps):
    return plan_wna16_wgmma(caps, layout_of(problem), problem.m, problem.act, scheme=problem.scheme.name)


def owns(plan) -> bool:
    return plan.family == "wgmma" and plan.path == PATH


def pack(qw, dtype, layout, caps):
    return prepare_wgmma_wna16(qw, dtype)


FAMILY = Family("wgmma_dequant", "wgmma WnA16, int4 weights dequantized into shared memory", refusal, plan, "x", owns,
                wgmma_wna16_kernel_source, pack)
