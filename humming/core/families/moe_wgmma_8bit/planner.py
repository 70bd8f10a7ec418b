"""Plans of the MoE wgmma 8-bit kernels (sm_90a prefill): the lock-step wgmma W8A8 kernel (int8 / e4m3 weights and
activations, 128 tokens x BN channels x 128 bytes of K, cp.async stages) over routed rows, for W8A8 experts with
per-token activation scales (per-channel or per-tensor weight scales) or DeepSeek-V3's 128x128 weight blocks with
activations per 1x128 group; and the lock-step wgmma W4A8 kernel (4-bit weights widened exactly to e4m3 in shared
memory, group scales on fp32 sums) for MXFP4 x FP8 experts (gpt-oss's weights with FP8 activations; int4 W4A8
experts go to the register-A W4A8 form, humming.core.families.moe_register_a8). Both where the experts get enough rows
on average that a 128-row token tile is mostly full (the tuning knob moe.wgmma_8bit_min_rows; null, the default, keeps
them off until measured: the MoE kernels then run these schemes on 16-bit activation codes)."""
from __future__ import annotations

from humming.core.families.moe_register_a.planner import rows_per_expert
from humming.core.families.moe_wna16.routed_forms import RoutedPlan, padded_to_tiles, threshold_words
from humming.core.families.wgmma_8bit.layout import WgmmaW4A8Layout, WgmmaW8A8Layout, wgmma_w4a8_group
from humming.core.families.wgmma_8bit.planner import BM, plan_w4a8_wgmma, plan_w8a8_wgmma
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "moe-wgmma-8bit"
MIN_ROWS_KNOB = "moe.wgmma_8bit_min_rows"
_A_TYPES = {"int8": "s8", "e4m3": "e4m3"}
# (weight scale granularity, activation scale mode) the kernel applies
_SCALES = {("channel", "dynamic_token"), ("tensor", "dynamic_token"), ("block", "dynamic_group")}


def a_type_of(scheme) -> str:
    """The 8-bit operand type of weights and activations (s8 / e4m3), or "" where the scheme is neither W8A8 of one
    nor e2m1 weights with e4m3 activations (widened exactly)."""
    if scheme.weight == "e2m1" and scheme.act == "e4m3":
        return "e4m3"
    a_type = _A_TYPES.get(scheme.weight, "")
    return a_type if scheme.act == scheme.weight else ""


def is_w4a8(scheme) -> bool:
    return scheme.weight == "e2m1"


def scales_refusal(scheme, n: int, k: int) -> str:
    """Why the kernel cannot apply the scheme's scales ("" when it can)."""
    granularity, mode = scheme.weight_scale.granularity, scheme.act_scale.mode
    if is_w4a8(scheme):
        if mode != "dynamic_token" or scheme.zero_point or scheme.act_scale.global_scale:
            return "its W4A8 form takes per-token activation scales and weights without zero points"
        try:
            wgmma_w4a8_group(scheme, padded_to_tiles(n, k)[1])
        except (ShapeError, UnsupportedOnDevice) as exc:
            return str(exc)
        return ""
    if (granularity, mode) not in _SCALES:
        return (f"it takes per-channel or per-tensor weight scales with per-token activation scales, or 128x128 weight "
                f"blocks with activations per 1x128 group (not {granularity} weights, {mode} activations)")
    if granularity == "block":
        if scheme.weight_scale.block != (128, 128) or scheme.act_scale.group_size != 128:
            return "its block scales are 128x128 weight blocks with activations per 1x128 group"
        if n % 128 or k % 128:
            return f"128x128 weight blocks need N and K that are multiples of 128 (not padded), got N={n} K={k}"
    return ""


def refusal(problem, caps, measured: bool = False) -> str:
    """Why this kernel does not take the MoE GEMM ("" when it does); ``measured``: a measured entry chose it (the
    knob's threshold does not apply)."""
    scheme, tokens, n, k, experts, top_k = (problem.scheme, problem.m, problem.n, problem.k, problem.experts,
                                            problem.top_k)
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    if lowest is None and not measured:
        return f"the MoE wgmma 8-bit forms are off ({MIN_ROWS_KNOB} null until measured)"
    if not a_type_of(scheme):
        return "it takes int8 x int8, e4m3 x e4m3 or e2m1 x e4m3 experts"
    why = scales_refusal(scheme, n, k)
    if why:
        return why
    rows = rows_per_expert(tokens, top_k, experts)
    if not measured and rows < lowest:
        return f"{rows:.1f} rows per expert on average, the MoE wgmma 8-bit forms take >= {lowest:g} ({MIN_ROWS_KNOB})"
    try:
        plan_moe_wgmma_8bit(caps, scheme, tokens, n, k, "bf16", experts, top_k)
    except (ShapeError, UnsupportedOnDevice) as exc:
        return f"the wgmma 8-bit kernels cannot run these experts: {exc}"
    return ""



def expert_layout(scheme, n: int, k: int) -> WgmmaW8A8Layout | WgmmaW4A8Layout:
    """The layout the experts are prepared in (padded to multiples of 128)."""
    n_pad, k_pad = padded_to_tiles(n, k)
    if is_w4a8(scheme):
        return WgmmaW4A8Layout("e4m3", n_pad, k_pad, wgmma_w4a8_group(scheme, k_pad), weight_format="e2m1")
    return WgmmaW8A8Layout(a_type_of(scheme), n_pad, k_pad, scheme.weight_scale.granularity)


def plan_moe_wgmma_8bit(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int) -> RoutedPlan:
    """The plan of an indexed MoE GEMM on the wgmma W8A8 kernel, or UnsupportedOnDevice / ShapeError."""
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    a_type = a_type_of(scheme)
    if not a_type:
        raise UnsupportedOnDevice(f"{scheme.name}: the MoE wgmma 8-bit kernels take int8 x int8, e4m3 x e4m3 or e2m1 x e4m3 "
                                  f"experts")
    why = scales_refusal(scheme, n, k)
    if why:
        raise UnsupportedOnDevice(f"{scheme.name}: {why}")
    layout = expert_layout(scheme, n, k)
    rows = rows_per_expert(tokens, top_k, experts)
    # (the tile width from the rows the GEMM has in all: the token tiles of every expert share the GPU)
    if is_w4a8(scheme):  # (the lock-step kernel: its loads are the ones a routing can gather)
        dense = plan_w4a8_wgmma(caps, layout, max(tokens * top_k, 1), act, scheme=scheme.name, ws=False)
    else:
        dense = plan_w8a8_wgmma(caps, layout, max(tokens * top_k, 1), act, scheme=scheme.name, tma=False)
    keep = [r for r in dense.reasons if not r.startswith("no split-K")]
    reasons = tuple(keep) + (
        f"MoE wgmma {'W4A8' if is_w4a8(scheme) else 'W8A8'} ({threshold_words(caps, MIN_ROWS_KNOB)}): {a_type} activation codes quantized once per token before the gather, "
        f"rows gathered through the routing's sorted slots by cp.async, the block's expert from the routing; weights "
        f"padded to {layout.n}x{layout.k} once when prepared (their own copy, K-major {'packed 4-bit codes' if is_w4a8(scheme) else 'bytes as stored'})",
        f"token tile {BM}: {tokens} token(s) x top-{top_k} over {experts} experts = {rows:.1f} rows per expert on "
        f"average",
        "epilogue: per-token (or per-block) scales and router weight per row, scales and bias per channel, stored from "
        "registers to each row's slot; no split-K",
    )
    return RoutedPlan(**{**{f: getattr(dense, f) for f in dense.__dataclass_fields__},
                            "m": tokens, "n": n, "k": k, "path": PATH, "reasons": reasons, "pdl": False})

