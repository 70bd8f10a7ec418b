"""The register-A wgmma W4A8 family: signed int4 weights (groups of 128 or per channel) widened in registers as
wgmma's A operand, 8-bit activation codes as B, from M 128 (the tuning knob register_a8.min_m)."""
from __future__ import annotations

from dataclasses import replace

from humming.core.common.quantized import runs_on_w8a8, w4a8_widening
from humming.core.families.register_a8.generator import wgmma_rs8_kernel_source
from humming.core.families.register_a8.layout import WgmmaRs8Layout, prepare_w4a8_rs, rs8_group, rs8_refusal
from humming.core.families.register_a8.planner import BT, PATH, min_m, plan_w4a8_wgmma_rs
from humming.core.families.register_a8.tiles import RegisterA8Tiles
from humming.core.families.runnable import fallback, ideal
from humming.core.families.wgmma_8bit.family import wgmma_8bit_refusal
from humming.core.families.wgmma_8bit.planner import wgmma_form
from humming.core.family import Family
from humming.devices.current import runs_here


def refusal(problem, caps, ask) -> str | None:
    if not problem.quantized_activations:
        return "the scheme has 16-bit activations"
    sch = problem.scheme
    choice = fallback(problem, caps)
    if not runs_on_w8a8(choice, sch):
        return f"an 8-bit kernel does not execute {choice.describe()}"
    lowest = min_m(caps)
    if lowest is None or problem.m < lowest:
        return f"M={problem.m}: the register-A W4A8 kernel takes M >= {lowest} (register_a8.min_m)"
    if sch.weight != "int4":
        return f"{sch.weight} weights (it takes signed int4)"
    if problem.act_order:
        return "act-order weights (a K permutation) are not taken"
    why = wgmma_8bit_refusal(problem, caps, choice)
    if why:
        return why
    form = wgmma_form(caps, choice.a_type)
    if form is None or BT not in form.n_values:
        return f"{caps.name} declares no wgmma m64n{BT}k32 {choice.a_type}"
    why = rs8_refusal(sch, problem.n, problem.k, choice.a_type)
    if why:
        return why
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target"
    return None


def plan(problem, caps):
    sch, choice, opts = problem.scheme, fallback(problem, caps), problem.options
    layout = WgmmaRs8Layout(choice.a_type, problem.n, problem.k, rs8_group(sch, problem.k),
                            fast_accum=opts.fast_accum and choice.a_type == "e4m3", widen=w4a8_widening(opts, choice))
    p = plan_w4a8_wgmma_rs(caps, layout, problem.m, problem.act, scheme=sch.name)
    return replace(p, reasons=ideal(problem, caps).reasons + p.reasons)


def owns(plan) -> bool:
    return plan.path == PATH


def pack(qw, dtype, layout, caps):
    return prepare_w4a8_rs(qw, dtype, layout.a_type, fast_accum=layout.fast_accum, widen=layout.widen)


FAMILY = Family("register_a8", "wgmma W4A8, int4 weights widened in registers as A", refusal, plan, "codes8", owns,
                wgmma_rs8_kernel_source, pack, tiles=RegisterA8Tiles)
