"""The mma.sync WnA16 family: the stream kernel (M <= 16, weights as the MMA's A operand) and the tile kernel,
planned by a tuned entry or the rules (``tuning.entries.choose_plan``), which may also pick the register-A small form
on the same prepared weights. From M 128, where the wgmma WnA16 kernels run, it hands prefill plans that are not
register-A on to them."""
from __future__ import annotations

from humming.core.families.mma_wna16.generator import tile_kernel_source
from humming.core.families.mma_wna16.layout import layout_for, prepare
from humming.core.families.mma_wna16.stream import stream_kernel_source
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.core.families.mma_wna16.tuned import choose_plan
from humming.core.family import Family
from humming.core.tuning import knobs
from humming.errors import HummingError

WGMMA_MIN_M = 128  # one full 128-row wgmma tile: from here the wgmma WnA16 kernels take prefill


def wna16_layout(problem, caps):
    """The mma.sync WnA16 layout of the problem's weights (shared by the stream, tile and register-A kernels)."""
    return problem.memo("mma_layout", lambda: layout_for(problem.scheme, problem.n, problem.k, problem.act, caps=caps))


def rules_plan(problem, caps):
    """The plan of a tuned entry or of the rules (stream, tile or the register-A small form)."""
    return problem.memo("rules_plan", lambda: choose_plan(caps, wna16_layout(problem, caps), problem.m, problem.act,
                                                          scheme=problem.scheme.name))


def refusal(problem, caps, ask) -> str | None:
    if problem.quantized_activations:
        return "the scheme quantizes activations"
    if problem.m < WGMMA_MIN_M or problem.padded or not knobs.value("wgmma_wna16.enabled", caps):
        return None
    try:
        if rules_plan(problem, caps).path == "wgmma-rs":
            return None
    except HummingError:
        return None  # (plan() raises it, naming what is wrong)
    for other in ("wgmma_dequant", "tcgen05_wna16"):
        if ask(other):
            return f"M={problem.m} >= {WGMMA_MIN_M}: the {other} kernel takes prefill plans that are not register-A"
    return None


def plan(problem, caps):
    if problem.padded:  # the tile kernel reads the real K and stores the real N (humming.core.quant.padding)
        from humming.core.families.mma_wna16.planner import plan_wna16

        return plan_wna16(caps, wna16_layout(problem, caps), problem.m, problem.act, scheme=problem.scheme.name,
                          path="tile")
    return rules_plan(problem, caps)


def owns(plan) -> bool:
    return plan.family == "mma_sync" and not plan.is_8bit and not getattr(plan.instruction, "scale_format", None)


def source(plan, backend, caps) -> str:
    return (stream_kernel_source if plan.path == "stream" else tile_kernel_source)(plan, backend, caps)


def pack(qw, dtype, layout, caps):
    return prepare(qw, dtype, caps)


FAMILY = Family("mma_wna16", "mma.sync WnA16: stream (decode) and tile kernels", refusal, plan, "x", owns, source, pack,
                row_scale=True, tiles=MmaWnA16Tiles, tails=True)
