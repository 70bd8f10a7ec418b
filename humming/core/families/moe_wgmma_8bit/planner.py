"""Plans of the MoE wgmma W8A8 kernel (sm_90a prefill): the lock-step wgmma W8A8 kernel (int8 / e4m3 weights and
activations, 128 tokens x BN channels x 128 bytes of K, cp.async stages) over routed rows, for W8A8 experts with
per-token activation scales (per-channel or per-tensor weight scales) or DeepSeek-V3's 128x128 weight blocks with
activations per 1x128 group, where the experts get enough rows on average that a 128-row token tile is mostly full
(the tuning knob moe.w8a8_min_rows; null, the default, keeps it off until it is measured: the MoE kernels then run
W8A8 on 16-bit activation codes)."""
from __future__ import annotations

from humming.core.families.moe_register_a.planner import rows_per_expert
from humming.core.families.moe_wna16.routed_forms import RoutedPlan, padded_to_tiles
from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout
from humming.core.families.wgmma_8bit.planner import BM, plan_w8a8_wgmma
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "moe-wgmma-8bit"
MIN_ROWS_KNOB = "moe.w8a8_min_rows"
_A_TYPES = {"int8": "s8", "e4m3": "e4m3"}
# (weight scale granularity, activation scale mode) the kernel applies
_SCALES = {("channel", "dynamic_token"), ("tensor", "dynamic_token"), ("block", "dynamic_group")}


def a_type_of(scheme) -> str:
    """The 8-bit operand type of weights and activations (s8 / e4m3), or "" where the scheme is not W8A8 of one."""
    a_type = _A_TYPES.get(scheme.weight, "")
    return a_type if scheme.act == scheme.weight else ""


def scales_refusal(scheme, n: int, k: int) -> str:
    """Why the kernel cannot apply the scheme's scales ("" when it can)."""
    granularity, mode = scheme.weight_scale.granularity, scheme.act_scale.mode
    if (granularity, mode) not in _SCALES:
        return (f"it takes per-channel or per-tensor weight scales with per-token activation scales, or 128x128 weight "
                f"blocks with activations per 1x128 group (not {granularity} weights, {mode} activations)")
    if granularity == "block":
        if scheme.weight_scale.block != (128, 128) or scheme.act_scale.group_size != 128:
            return "its block scales are 128x128 weight blocks with activations per 1x128 group"
        if n % 128 or k % 128:
            return f"128x128 weight blocks need N and K that are multiples of 128 (not padded), got N={n} K={k}"
    return ""


def refusal(caps, scheme, tokens: int, n: int, k: int, experts: int, top_k: int, measured: bool = False) -> str:
    """Why this kernel does not take the MoE GEMM ("" when it does); ``measured``: a measured entry chose it (the
    knob's threshold does not apply)."""
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    if lowest is None and not measured:
        return f"the MoE wgmma W8A8 form is off ({MIN_ROWS_KNOB} null until measured)"
    if not a_type_of(scheme):
        return "it takes int8 x int8 or e4m3 x e4m3 experts"
    why = scales_refusal(scheme, n, k)
    if why:
        return why
    rows = rows_per_expert(tokens, top_k, experts)
    if not measured and rows < lowest:
        return f"{rows:.1f} rows per expert on average, the MoE wgmma W8A8 form takes >= {lowest:g} ({MIN_ROWS_KNOB})"
    try:
        plan_moe_wgmma_8bit(caps, scheme, tokens, n, k, "bf16", experts, top_k)
    except (ShapeError, UnsupportedOnDevice) as exc:
        return f"the wgmma W8A8 kernel cannot run these experts: {exc}"
    return ""


def _threshold(caps) -> str:
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    return (f"off by rule, {MIN_ROWS_KNOB}; chosen by a measured entry or a tuner" if lowest is None else
            f"from {lowest:g} rows per expert on average, {MIN_ROWS_KNOB}")


def expert_layout(scheme, n: int, k: int) -> WgmmaW8A8Layout:
    """The layout the experts are prepared in (padded to multiples of 128)."""
    n_pad, k_pad = padded_to_tiles(n, k)
    return WgmmaW8A8Layout(a_type_of(scheme), n_pad, k_pad, scheme.weight_scale.granularity)


def plan_moe_wgmma_8bit(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int) -> RoutedPlan:
    """The plan of an indexed MoE GEMM on the wgmma W8A8 kernel, or UnsupportedOnDevice / ShapeError."""
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    a_type = a_type_of(scheme)
    if not a_type:
        raise UnsupportedOnDevice(f"{scheme.name}: the MoE wgmma W8A8 kernel takes int8 x int8 or e4m3 x e4m3 experts")
    why = scales_refusal(scheme, n, k)
    if why:
        raise UnsupportedOnDevice(f"{scheme.name}: {why}")
    layout = expert_layout(scheme, n, k)
    rows = rows_per_expert(tokens, top_k, experts)
    # (the tile width from the rows the GEMM has in all: the token tiles of every expert share the GPU)
    dense = plan_w8a8_wgmma(caps, layout, max(tokens * top_k, 1), act, scheme=scheme.name, tma=False)
    keep = [r for r in dense.reasons if not r.startswith("no split-K")]
    reasons = tuple(keep) + (
        f"MoE wgmma W8A8 ({_threshold(caps)}): {a_type} activation codes quantized once per token before the gather, "
        f"rows gathered through the routing's sorted slots by cp.async, the block's expert from the routing; weights "
        f"padded to {layout.n}x{layout.k} once when prepared (their own copy, K-major bytes as stored)",
        f"token tile {BM}: {tokens} token(s) x top-{top_k} over {experts} experts = {rows:.1f} rows per expert on "
        f"average",
        "epilogue: per-token (or per-block) scales and router weight per row, scales and bias per channel, stored from "
        "registers to each row's slot; no split-K",
    )
    return RoutedPlan(**{**{f: getattr(dense, f) for f in dense.__dataclass_fields__},
                            "m": tokens, "n": n, "k": k, "path": PATH, "reasons": reasons, "pdl": False})

