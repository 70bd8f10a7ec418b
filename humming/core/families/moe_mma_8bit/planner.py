"""Plans of the MoE mma.sync 8-bit kernel (every profile with 8-bit mma.sync forms: Turing to Ada, sm_120, the PPU
profiles; prefill): the 8-bit tile kernel (humming.core.families.mma_8bit: int8 / e4m3 operands as stored, W4A8 int4 /
e2m1 widened in registers) over routed rows, for W8A8 experts with per-channel or per-tensor weight scales and W4A8
experts with group scales, both with per-token activation scales, where the experts get enough rows on average (the
tuning knob moe.mma_8bit_min_rows; below it, or with it null, the MoE tile kernel runs these schemes on 16-bit
activation codes)."""
from __future__ import annotations

import math

from humming.core.common.quantized import runs_on_w8a8, w4a8_widening
from humming.core.families.mma_8bit.layout import W4A8Layout, W8A8Layout
from humming.core.families.mma_8bit.planner import plan_w8a8
from humming.core.families.moe_register_a.planner import rows_per_expert
from humming.core.families.moe_wna16.routed_forms import RoutedPlan, padded_to_tiles, threshold_words
from humming.core.families.runnable import fallback
from humming.core.plan import Tiles
from humming.core.tuning import knobs
from humming.errors import HummingError, ShapeError, UnsupportedOnDevice

PATH = "moe-mma-8bit"
MIN_ROWS_KNOB = "moe.mma_8bit_min_rows"
FOUR_BIT = ("int4", "e2m1")


def expert_layout(problem, caps):
    """The layout the experts are prepared in (padded to multiples of 128), or UnsupportedOnDevice."""
    sch, choice = problem.scheme, fallback(problem, caps)
    if not runs_on_w8a8(choice, sch) or choice.family != "mma_sync":
        raise UnsupportedOnDevice(f"{sch.name}: the runnable path is {choice.describe()}, not an 8-bit mma.sync one")
    n_pad, k_pad = padded_to_tiles(problem.n, problem.k)
    if sch.weight in FOUR_BIT:
        group = sch.weight_scale.group_size or k_pad
        return choice, W4A8Layout(choice.a_type, n_pad, k_pad, group, weight_format=sch.weight,
                                  widen=w4a8_widening(problem.options, choice, sch.weight))
    return choice, W8A8Layout(choice.a_type, n_pad, k_pad, sch.weight_scale.granularity)


def refusal(problem, caps, measured: bool = False) -> str:
    """Why this kernel does not take the MoE GEMM ("" when it does); ``measured``: a measured entry chose it."""
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    if lowest is None and not measured:
        return f"the MoE mma.sync 8-bit form is off ({MIN_ROWS_KNOB} null)"
    sch = problem.scheme
    if not problem.quantized_activations or sch.act not in ("int8", "e4m3"):
        return "it takes int8 / e4m3 activations"
    if sch.act_scale.mode != "dynamic_token" or sch.zero_point or sch.weight_scale.granularity == "block":
        return "it takes per-token activation scales and weights without zero points or 128x128 blocks"
    rows = rows_per_expert(problem.m, problem.top_k, problem.experts)
    if not measured and rows < lowest:
        return f"{rows:.1f} rows per expert on average, the MoE mma.sync 8-bit form takes >= {lowest:g} ({MIN_ROWS_KNOB})"
    try:
        plan_moe_mma_8bit(problem, caps)
    except HummingError as exc:
        return f"the 8-bit tile kernel cannot run these experts: {exc}"
    return ""


def plan_moe_mma_8bit(problem, caps) -> RoutedPlan:
    """The plan of an indexed MoE GEMM on the 8-bit tile kernel (token tile from the rows an expert gets on average,
    no split-K), or UnsupportedOnDevice / ShapeError naming what is missing."""
    tokens, experts, top_k = problem.m, problem.experts, problem.top_k
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    choice, layout = expert_layout(problem, caps)
    rows = rows_per_expert(tokens, top_k, experts)
    dense = plan_w8a8(caps, layout, max(1, math.ceil(rows)), problem.act, choice, scheme=problem.scheme.name,
                      tiles=_token_tile(caps, layout), splits=1)
    kind = "W4A8, 4-bit codes widened in registers" if isinstance(layout, W4A8Layout) else "W8A8, codes as stored"
    reasons = dense.reasons + (
        f"MoE mma.sync 8-bit ({threshold_words(caps, MIN_ROWS_KNOB)}): {kind}; {choice.a_type} activation codes quantized once per token "
        f"before the gather, rows gathered through the routing's sorted slots, the block's expert from the routing; "
        f"weights padded to {layout.n}x{layout.k} once when prepared (their own copy, k32 atoms)",
        f"token tile {dense.tiles.bm}: {tokens} token(s) x top-{top_k} over {experts} experts = {rows:.1f} rows per "
        f"expert on average",
        "epilogue: per-token scale and router weight per row, scales and bias per channel, each row to its slot; "
        "no split-K",
    )
    return RoutedPlan(**{**{f: getattr(dense, f) for f in dense.__dataclass_fields__},
                         "m": tokens, "n": problem.n, "k": problem.k, "path": PATH, "reasons": reasons})


def _token_tile(caps, layout) -> Tiles:
    """64 tokens x 128 channels (the dense kernel's 128-row tile spills with the routed rows' registers, and its
    small-M tiles are for fewer rows than this prefill form takes), with the most stages (of 4, 3, 2) that fit beside
    the routed rows' slots."""
    b_bytes = 128 * 128 // (2 if isinstance(layout, W4A8Layout) else 1)
    limit = caps.limits.smem_per_block_kb * 1024 - 64 * 4  # (slot_of_row: static shared memory)
    stages = next((st for st in (4, 3, 2) if st * (64 * 128 + b_bytes) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no 8-bit MoE tile 64x128x128 fits {caps.name}'s shared memory")
    return Tiles(64, 128, 128, stages, 2, 2, 1)

