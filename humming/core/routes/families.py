"""Routes: quantized-activation schemes run on the WnA16 kernels by an exact change of the activations.

* widened: 8-bit activation codes (int8, e4m3, e5m2) are exact in f16 / bf16; quantized as the reference does, the
  codes are widened to 16 bits and multiplied on the WnA16 kernels of the same weights, the per-token (or per-tensor)
  scales applied per output row in the fp32 epilogue (``Plan.row_scale``). Taken in the M ranges measured faster
  (humming.core.routes.widened_ranges), or always where the profile has no native path (fp8 without fp8 tensor cores).
* upconvert: NVFP4 / MX activations and weights times their block scales are exact in bf16 (or f16): activations
  quantized as the reference does and dequantized without their global scale, multiplied on the WnA16 kernels (the
  mma.sync ones; the register-A forms where they take the weights), the global activation scale in the fp32
  epilogue.

A route plans with another family's planner: the plan it returns belongs to that family's kernel."""
from __future__ import annotations

from dataclasses import replace

import torch

from humming.core.common.layout import act_name
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.mma_wna16.tuned import choose_plan, register_a_prefill_plan, runs_register_a_prefill
from humming.core.families.runnable import fallback
from humming.core.family import Family
from humming.core.routes import widened_ranges as act_widen

_DTYPE = {"f16": torch.float16, "bf16": torch.bfloat16}
# the families and routes that run quantized activations as such (asked before the widened route takes a problem
# outside its measured ranges)
NATIVE = ("tcgen05_blockscaled", "tcgen05_w4a8", "tcgen05_w8a8", "mma_blockscaled", "upconvert", "register_a8",
          "wgmma_8bit", "mma_8bit")


def _widened_refusal(problem, caps, ask) -> str | None:
    if not problem.quantized_activations:
        return "the scheme has 16-bit activations"
    sch = problem.scheme
    if problem.padded and problem.options.act_widen is not False and not act_widen.refusal(sch, problem.n, problem.k):
        return None  # a padded weight: the WnA16 tile kernel reads the real K and stores the real N; the 8-bit ones do not
    if not act_widen.applies(caps, sch, problem.m, problem.n, problem.k, problem.options.act_widen):
        why_not = act_widen.refusal(sch, problem.n, problem.k)
        if not why_not and problem.options.act_widen is not False and not any(ask(f) for f in NATIVE):
            return None  # no kernel of the scheme's own takes this N / K (e.g. K not a multiple of 128)
        return f"widened activations: not at M={problem.m} ({why_not or 'ranges'})"
    return None


def widened_act(caps, act: str) -> str:
    """The 16-bit type the widened codes take for activations of type ``act``."""
    return act_name(act_widen.act_dtype(caps, _DTYPE[act]))


def _widened_plan(problem, caps, registry):
    sch = problem.scheme
    inner = problem.with_(scheme=sch.with_(act=None), act=widened_act(caps, problem.act))
    p = registry.select(inner, caps, row_scale=True).plan
    why = act_widen.reason(caps, sch, problem.m, problem.n, problem.k, problem.options.act_widen)
    if not act_widen.applies(caps, sch, problem.m, problem.n, problem.k, problem.options.act_widen):
        why = (f"widened activations: no kernel of {sch.name}'s own takes N={problem.n} K={problem.k}; exact: "
               f"{sch.act} codes in 16 bits on the weight-only kernels")
    if problem.padded:
        why = f"widened activations: the padded weight runs on the WnA16 tile kernel (exact: {sch.act} codes in 16 bits)"
    return replace(p, scheme=sch.name, row_scale=sch.act_scale.mode == "dynamic_token", reasons=(why,) + p.reasons)


def _upconvert_refusal(problem, caps, ask) -> str | None:
    if not problem.quantized_activations:
        return "the scheme has 16-bit activations"
    choice = fallback(problem, caps)
    return None if choice.path == "upconvert" else f"the path is {choice.path}, not upconvert"


def _upconvert_plan(problem, caps, registry):
    sch, choice = problem.scheme, fallback(problem, caps)
    layout = layout_for(sch.with_(act=None), problem.n, problem.k, choice.a_type, caps=caps)
    if problem.padded:  # (the tile kernel reads the real K and stores the real N)
        p = plan_wna16(caps, layout, problem.m, choice.a_type, scheme=sch.name, path="tile")
    elif runs_register_a_prefill(caps, layout, problem.m):  # the two-warpgroup register-A form where it runs
        p = register_a_prefill_plan(caps, layout, problem.m, choice.a_type, scheme=sch.name)
    else:
        p = choose_plan(caps, layout, problem.m, choice.a_type, scheme=sch.name)
    return replace(p, reasons=choice.reasons + p.reasons)


WIDENED = Family("widened", "8-bit activation codes widened exactly onto the WnA16 kernels", _widened_refusal,
                 _widened_plan, "codes16")
UPCONVERT = Family("upconvert", "NVFP4 / MX activations dequantized exactly onto the WnA16 kernels",
                   _upconvert_refusal, _upconvert_plan, "upconvert")
