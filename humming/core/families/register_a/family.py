"""The register-A wgmma WnA16 family's two-warpgroup (prefill) form: int4 weights of the mma.sync layout decoded in
registers as wgmma's A operand, from the M of the tuning knob register_a.min_m (wide layers from
register_a.wave_min_m: register_a.prefill.fills_a_wave). Its small form (M 9-512) is planned by the mma.sync family's
rules on the same weights."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.mma_wna16.family import wna16_layout
from humming.core.families.mma_wna16.layout import prepare
from humming.core.families.mma_wna16.tuned import register_a_prefill_plan, runs_register_a_prefill
from humming.core.families.register_a.generator import wgmma_rs_kernel_source
from humming.core.families.register_a.planner import PATH, min_m
from humming.core.families.register_a.prefill import STREAMK_BT, WAVE_MIN_M_KNOB, fills_a_wave
from humming.core.families.register_a.tiles import RegisterATiles
from humming.core.family import Family
from humming.core.tuning import knobs
from humming.errors import HummingError


def refusal(problem, caps, ask) -> str | None:
    if problem.quantized_activations:
        return "the scheme quantizes activations"
    lowest = min_m(caps)
    if lowest is None:
        return "the two-warpgroup register-A form is off (register_a.min_m)"
    try:
        layout = wna16_layout(problem, caps)
    except HummingError as exc:
        return str(exc)
    if problem.m < lowest and not fills_a_wave(caps, layout, problem.m):
        return (f"the two-warpgroup register-A form takes M >= {lowest} (register_a.min_m), below that only layers "
                f"whose tiles fill a wave of SMs (register_a.wave_min_m)")
    if not runs_register_a_prefill(caps, layout, problem.m):
        return "the two-warpgroup register-A form does not run this layout here (runs_register_a_prefill)"
    return None


def plan(problem, caps):
    layout = wna16_layout(problem, caps)
    p = register_a_prefill_plan(caps, layout, problem.m, problem.act, problem.scheme.name)
    if problem.m < (min_m(caps) or 0):  # taken by the wave rule (register_a.prefill.fills_a_wave)
        tiles = -(-problem.m // STREAMK_BT) * (layout.n // 128)
        p = replace(p, reasons=p.reasons + (
            f"below register_a.min_m ({min_m(caps)}) for a wide layer: {tiles} tiles of {STREAMK_BT} tokens for "
            f"{caps.limits.sms} SMs, at least one each (register_a.wave_min_m {knobs.value(WAVE_MIN_M_KNOB, caps)})",))
    return p


def owns(plan) -> bool:
    return plan.path == PATH


def pack(qw, dtype, layout, caps):
    return prepare(qw, dtype, caps)


FAMILY = Family("register_a", "wgmma W4A16, int4 weights as register A (two-warpgroup prefill form)", refusal, plan, "x",
                owns, wgmma_rs_kernel_source, pack, row_scale=True, tiles=RegisterATiles)
