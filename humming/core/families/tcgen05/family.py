"""The tcgen05 families (Blackwell datacenter, Tensor Memory): W8A8, W4A4 NVFP4/MXFP4 with the block scales in the
MMA, W4A8 MXFP4 x FP8, and WnA16 with int4 dequantized into shared memory. Compiled for their targets, never run
on hardware: they take problems only with HUMMING_UNVERIFIED_KERNELS=1."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.mma_blockscaled.layout import (
    Tcgen05BlockScaledLayout,
    prepare_blockscaled_tcgen05,
    recipe_of,
)
from humming.core.families.runnable import ideal, runnable
from humming.core.families.tcgen05.generator import tcgen05_kernel_source
from humming.core.families.tcgen05.planner import (
    WNA16_PATH,
    plan_blockscaled_tcgen05,
    plan_w8a8_tcgen05,
    plan_wna16_tcgen05,
    tcgen05_f16_form,
    tcgen05_kernel,
    unverified_note,
    wna16_unverified_note,
)
from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout, prepare_w8a8_wgmma
from humming.core.families.wgmma_dequant.family import layout_of as wna16_layout_of
from humming.core.families.wgmma_dequant.family import wna16_wgmma_refusal
from humming.core.families.wgmma_dequant.layout import prepare_wgmma_wna16
from humming.core.family import Family
from humming.devices.current import runs_here


def _quantized_refusal(problem, caps, kernel: str, k_multiple: int) -> str | None:
    """Why the tcgen05 ``kernel`` ("w8a8", "blockscaled", "w4a8") does not take a quantized-activation problem."""
    if not problem.quantized_activations:
        return "the scheme has 16-bit activations"
    choice = runnable(problem, caps)
    if choice.family != "tcgen05" or tcgen05_kernel(choice, problem.scheme, caps) != kernel:
        return f"the runnable path is {choice.describe()}"
    if problem.n % 128 or problem.k % k_multiple:
        return f"N={problem.n} must be a multiple of 128 and K={problem.k} of {k_multiple}"
    if problem.act_order:
        return "act-order weights (a K permutation) are not taken"
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target"
    return None


def _owns_w8a8(plan) -> bool:
    return plan.family == "tcgen05" and isinstance(plan.layout, WgmmaW8A8Layout) and plan.path == "native"


def _owns_blockscaled(plan) -> bool:  # W4A4: e2m1 activations
    return plan.family == "tcgen05" and isinstance(plan.layout, Tcgen05BlockScaledLayout) and plan.layout.a_type == "e2m1"


def _owns_w4a8(plan) -> bool:  # MXFP4 x FP8: the same layout with e4m3 activations
    return plan.family == "tcgen05" and isinstance(plan.layout, Tcgen05BlockScaledLayout) and plan.layout.a_type != "e2m1"


def _owns_wna16(plan) -> bool:
    return plan.family == "tcgen05" and plan.path == WNA16_PATH


def _w8a8_plan(problem, caps):
    sch, choice = problem.scheme, ideal(problem, caps)
    layout = WgmmaW8A8Layout(choice.a_type, problem.n, problem.k, sch.weight_scale.granularity)
    p = plan_w8a8_tcgen05(caps, layout, problem.m, problem.act, scheme=sch.name)
    return replace(p, reasons=choice.reasons + p.reasons)


def _blockscaled_plan(problem, caps):
    layout = Tcgen05BlockScaledLayout(recipe_of(problem.scheme), problem.n, problem.k)
    return plan_blockscaled_tcgen05(caps, layout, problem.m, problem.act, ideal(problem, caps),
                                    scheme=problem.scheme.name)


def _w4a8_plan(problem, caps):  # MXFP4 x FP8: kind::mxf8f6f4 e4m3 x e2m1, the weights' ue8m0 scales in the MMA
    layout = Tcgen05BlockScaledLayout("mxfp4", problem.n, problem.k, a_type="e4m3")
    return plan_blockscaled_tcgen05(caps, layout, problem.m, problem.act, ideal(problem, caps),
                                    scheme=problem.scheme.name)


def _wna16_refusal(problem, caps, ask) -> str | None:
    if problem.quantized_activations:
        return "the scheme quantizes activations"
    why = wna16_wgmma_refusal(problem, caps)
    if why:
        return why
    if not caps.memory.tmem_kb:
        return f"{caps.name} declares no Tensor Memory"
    if tcgen05_f16_form(caps, problem.act) is None:
        return f"{caps.name} declares no tcgen05 kind::f16 {problem.act}"
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target"
    return None


def _wna16_plan(problem, caps):
    return plan_wna16_tcgen05(caps, wna16_layout_of(problem), problem.m, problem.act, scheme=problem.scheme.name)


W8A8 = Family("tcgen05_w8a8", "tcgen05 W8A8 (kind::f8f6f4 / i8)",
              lambda p, c, ask: _quantized_refusal(p, c, "w8a8", 128), _w8a8_plan, "codes8", _owns_w8a8,
              tcgen05_kernel_source, lambda qw, dtype, layout, caps: prepare_w8a8_wgmma(qw, dtype, layout.a_type),
              unverified=unverified_note)
BLOCKSCALED = Family("tcgen05_blockscaled", "tcgen05 W4A4 NVFP4 / MXFP4, block scales in the MMA",
                     lambda p, c, ask: _quantized_refusal(p, c, "blockscaled", 256), _blockscaled_plan, "e2m1",
                     _owns_blockscaled, tcgen05_kernel_source, lambda qw, dtype, layout, caps: prepare_blockscaled_tcgen05(qw, dtype),
                     unverified=unverified_note)
W4A8 = Family("tcgen05_w4a8", "tcgen05 W4A8 MXFP4 x FP8 (kind::mxf8f6f4)",
              lambda p, c, ask: _quantized_refusal(p, c, "w4a8", 128), _w4a8_plan, "codes8", _owns_w4a8,
              tcgen05_kernel_source, lambda qw, dtype, layout, caps: prepare_blockscaled_tcgen05(qw, dtype),
              unverified=unverified_note)
WNA16 = Family("tcgen05_wna16", "tcgen05 WnA16, int4 dequantized into shared memory", _wna16_refusal, _wna16_plan, "x",
               _owns_wna16, tcgen05_kernel_source, lambda qw, dtype, layout, caps: prepare_wgmma_wna16(qw, dtype),
               unverified=wna16_unverified_note, announce=True)
