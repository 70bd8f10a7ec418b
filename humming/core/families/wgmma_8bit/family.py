"""The wgmma 8-bit family: W8A8 (int8 / e4m3 as stored, per-channel, per-tensor or 128x128-block scales) and W4A8
with the 4-bit weights widened in shared memory, from M 64 on profiles that declare the wgmma k32 forms."""
from __future__ import annotations

from dataclasses import replace

from humming.core.common.quantized import runs_on_w8a8
from humming.core.families.runnable import fallback, ideal
from humming.core.families.wgmma_8bit.generator import wgmma_w8a8_kernel_source
from humming.core.families.wgmma_8bit.layout import (
    WgmmaW4A8Layout,
    WgmmaW8A8Layout,
    prepare_w4a8_wgmma,
    prepare_w8a8_wgmma,
    wgmma_w4a8_group,
)
from humming.core.families.wgmma_8bit.planner import plan_w4a8_wgmma, plan_w8a8_wgmma, wgmma_form
from humming.core.families.wgmma_8bit.tiles import Wgmma8Tiles
from humming.core.family import Family
from humming.core.tuning import knobs
from humming.devices.current import runs_here
from humming.errors import UnsupportedOnDevice

MIN_M = 64
FOUR_BIT = ("int4", "e2m1")


def wgmma_8bit_refusal(problem, caps, choice) -> str | None:
    """Why the wgmma 8-bit kernels do not run this path (the knob wgmma_8bit.enabled, M >= 64, N and K multiples of
    128, a declared wgmma k32 form of the operand type; W4A8 groups of 32, 64 or a multiple of 128), or None."""
    if not knobs.value("wgmma_8bit.enabled", caps):
        return "the wgmma 8-bit kernels are off (wgmma_8bit.enabled)"
    m, n, k, sch = problem.m, problem.n, problem.k, problem.scheme
    if m < MIN_M or n % 128 or k % 128:
        return f"M >= {MIN_M} and N, K multiples of 128, not {m}x{n}x{k}"
    if choice.a_type != choice.b_type or wgmma_form(caps, choice.a_type) is None:
        return f"{caps.name} declares no wgmma m64nNk32 {choice.a_type}"
    if sch.weight in FOUR_BIT:
        try:
            wgmma_w4a8_group(sch, k)
        except UnsupportedOnDevice as exc:
            return str(exc)
        return None if choice.path in ("dequant-to-activation", "legacy") else f"path {choice.path}"
    return None if choice.path in ("native", "legacy") else f"path {choice.path}"


def refusal(problem, caps, ask) -> str | None:
    if not problem.quantized_activations:
        return "the scheme has 16-bit activations"
    choice = fallback(problem, caps)
    if not runs_on_w8a8(choice, problem.scheme):
        return f"an 8-bit kernel does not execute {choice.describe()}"
    why = wgmma_8bit_refusal(problem, caps, choice)
    if why:
        return why
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target"
    return None


def plan(problem, caps):
    sch, choice, opts = problem.scheme, fallback(problem, caps), problem.options
    n, k = problem.n, problem.k
    if sch.weight in FOUR_BIT:
        layout = WgmmaW4A8Layout(choice.a_type, n, k, wgmma_w4a8_group(sch, k), weight_format=sch.weight)
        p = plan_w4a8_wgmma(caps, layout, problem.m, problem.act, scheme=sch.name)
    else:
        gran = sch.weight_scale.granularity
        layout = WgmmaW8A8Layout(choice.a_type, n, k, gran,
                                 fast_accum=opts.fast_accum and choice.a_type == "e4m3" and gran != "block")
        p = plan_w8a8_wgmma(caps, layout, problem.m, problem.act, scheme=sch.name)
    return replace(p, reasons=ideal(problem, caps).reasons + p.reasons)


def owns(plan) -> bool:
    return plan.family == "wgmma" and plan.is_8bit and plan.path in ("native", "dequant-to-activation")


def pack(qw, dtype, layout, caps):
    if isinstance(layout, WgmmaW4A8Layout):
        return prepare_w4a8_wgmma(qw, dtype, layout.a_type)
    return prepare_w8a8_wgmma(qw, dtype, layout.a_type, fast_accum=layout.fast_accum)


FAMILY = Family("wgmma_8bit", "wgmma W8A8 / W4A8 (4-bit weights widened in shared memory)", refusal, plan, "codes8",
                owns, wgmma_w8a8_kernel_source, pack, tiles=Wgmma8Tiles)
