"""Plans of the MoE register-A W4A8 kernel (sm_90a prefill): the narrow register-A wgmma W4A8 kernel (128 tokens x
128 channels, cp.async stages, int4 weights widened in registers to the activations' s8 / e4m3) over routed rows,
for W4A8 experts with per-token activation scales where the experts get enough rows on average that a 128-row token
tile is mostly full (the tuning knob moe.w4a8_min_rows; null, the default, keeps it off until it is measured: the
MoE kernels then run W4A8 on 16-bit activation codes)."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.moe_register_a.planner import rows_per_expert
from humming.core.families.moe_wna16.routed_forms import RoutedPlan, padded_to_tiles, threshold_words
from humming.core.families.register_a8.layout import WgmmaRs8Layout, rs8_group, rs8_refusal
from humming.core.families.register_a8.planner import BT, plan_w4a8_wgmma_rs
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "moe-wgmma-rs8"
MIN_ROWS_KNOB = "moe.w4a8_min_rows"


def a_type_of(scheme) -> str:
    """The 8-bit type the activations are quantized to (s8 / e4m3)."""
    return {"int8": "s8", "e4m3": "e4m3"}.get(scheme.act, "")


def refusal(problem, caps, measured: bool = False) -> str:
    """Why this kernel does not take the MoE GEMM ("" when it does); ``measured``: a measured entry chose it (the
    knob's threshold does not apply)."""
    scheme, tokens, n, k, experts, top_k = (problem.scheme, problem.m, problem.n, problem.k, problem.experts,
                                            problem.top_k)
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    if lowest is None and not measured:
        return f"the MoE register-A W4A8 form is off ({MIN_ROWS_KNOB} null until measured)"
    a_type = a_type_of(scheme)
    if not a_type or scheme.act_scale.mode != "dynamic_token":
        return "it takes int8 / e4m3 activations with per-token scales"
    rows = rows_per_expert(tokens, top_k, experts)
    if not measured and rows < lowest:
        return f"{rows:.1f} rows per expert on average, the MoE register-A W4A8 form takes >= {lowest:g} ({MIN_ROWS_KNOB})"
    try:
        n_pad, k_pad = padded_to_tiles(n, k)
    except ShapeError as exc:
        return str(exc)
    why = rs8_refusal(scheme.with_(act=None), n_pad, k_pad, a_type)
    return f"the register-A W4A8 kernel cannot run these weights: {why}" if why else ""



def plan_moe_register_a8(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int) -> RoutedPlan:
    """The plan of an indexed MoE GEMM on the register-A W4A8 kernel, or UnsupportedOnDevice / ShapeError."""
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    a_type = a_type_of(scheme)
    if not a_type:
        raise UnsupportedOnDevice(f"{scheme.name}: the MoE register-A W4A8 kernel takes int8 / e4m3 activations")
    n_pad, k_pad = padded_to_tiles(n, k)
    layout = WgmmaRs8Layout(a_type, n_pad, k_pad, rs8_group(scheme, k_pad))
    dense = plan_w4a8_wgmma_rs(caps, layout, max(tokens, 1), act, scheme=scheme.name, producer=False, tokens=BT,
                               streamk=0)
    t = dense.tiles
    tiles = replace(t, bulk=0, raster=0, cluster=0, stsm=0, wide=0, widened=0, l2next=0, direct=0, streamk=0)
    rows = rows_per_expert(tokens, top_k, experts)
    keep = [r for r in dense.reasons if not r.startswith(("epilogue", "blocks rasterized", "programmatic", "stmatrix"))]
    reasons = tuple(keep) + (
        f"MoE register-A W4A8 ({threshold_words(caps, MIN_ROWS_KNOB)}): {a_type} activation codes quantized once per token before the gather, rows gathered "
        f"through the routing's sorted slots by cp.async, the block's expert from the routing; weights padded to "
        f"{n_pad}x{k_pad} once when prepared (their own copy, in the register-A W4A8 layout)",
        f"token tile {BT}: {tokens} token(s) x top-{top_k} over {experts} experts = {rows:.1f} rows per expert on "
        f"average",
        "epilogue: per-token scale and router weight per row, bias per channel, the tile transposed through shared "
        "memory, 16-byte stores of whole rows to their slots; no split-K",
    )
    fields = {f: getattr(dense, f) for f in dense.__dataclass_fields__}
    fields.update(m=tokens, n=n, k=k, path=PATH, tiles=tiles, reasons=reasons, pdl=False)
    return RoutedPlan(**fields)
