"""Plans of the MoE register-A kernel (sm_90a prefill): the two-warpgroup register-A wgmma form over routed rows, for
int4 weights (the magic-number decode) where the experts get enough rows on average that a 64- or 128-row token tile
is mostly full (the tuning knob moe.wgmma_min_rows; below it the MoE tile kernel, whose small tiles and split-K suit
decode). The weights are the MoE tile kernel's (humming.core.families.moe_wna16.layout)."""
from __future__ import annotations

from dataclasses import replace

from humming.core.common.wgmma import require_wgmma, wgmma_k16_form
from humming.core.families.moe_wna16.activations import activation_step
from humming.core.families.moe_wna16.layout import moe_layout
from humming.core.families.moe_wna16.routed_forms import threshold_words
from humming.core.families.register_a.layout import BC, BK, SMALL_BC, layout_refusal, untested_refusal
from humming.core.families.register_a.planner import MAX_STAGES, MIN_STAGES, RING_2WG, forced, smem_bytes, with_stsm
from humming.core.families.register_a.tiles import RegisterATiles
from humming.core.plan import Plan
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "moe-wgmma-rs"
MIN_ROWS_KNOB = "moe.wgmma_min_rows"  # rows per expert on average from which this kernel takes a MoE GEMM (null: never).
# 16: measured on the H100 (bench/bench_moe.py --ab moe.wgmma_min_rows=2, us, tile kernel -> register-A): at 16 rows
# Qwen3-30B-A3B gate+up 225.8 -> 185.9, DeepSeek-V3 gate+up 3316 -> 3026, Mixtral gate+up 444.8 -> 394.5; at 8 rows
# the tile kernel is faster (Qwen3 gate+up 150.6 -> 184.3, DeepSeek-V3 2256.6 -> 2968.7, Mixtral 314.9 -> 390.7)
MAX_TILE_KNOB = "moe.wgmma_max_token_tile"  # 256: measured on the H100 against 128 (us): Mixtral-8x7B gate+up at 512
# rows per expert 2645 -> 2132, at 2048 rows 9183 -> 7315; Qwen3-30B-A3B gate+up at 512 rows 1069 -> 843, DeepSeek-V3
# at 256 rows 10611 -> 9298
TOKEN_TILES = (64, 128, 256)
WIDE_RING = 4  # weight atoms in flight per lane at 256 tokens (the accumulators take 128 registers)  # multiples of 32 (the cp.async rows of 256 threads), wgmma m64nBTk16


def token_tiles(caps, act: str) -> list[int]:
    """The token tiles a tuner may time on this profile (the wgmma N values it declares for ``act``)."""
    form = wgmma_k16_form(caps, act)
    return [b for b in TOKEN_TILES if form is not None and b in form.n_values]


def rows_per_expert(tokens: int, top_k: int, experts: int) -> float:
    return tokens * top_k / max(experts, 1)


def refusal(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int,
            measured: bool = False) -> str:
    """Why this kernel does not take the MoE GEMM ("" when it does); ``measured``: a measured entry chose it (the
    rows-per-expert threshold does not apply)."""
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    if lowest is None and not measured:
        return f"the MoE register-A form is off ({MIN_ROWS_KNOB})"
    rows = rows_per_expert(tokens, top_k, experts)
    if not measured and rows < lowest:
        return f"{rows:.1f} rows per expert on average, the MoE register-A form takes >= {lowest:g} ({MIN_ROWS_KNOB})"
    if wgmma_k16_form(caps, act) is None:
        return f"{caps.name} declares no wgmma m64nNk16 {act}"
    if not caps.memory.cp_async:
        return f"{caps.name} does not declare cp.async"
    try:
        step, _ = activation_step(scheme, n, k)
        layout = moe_layout(scheme.with_(act=None) if step != "x" else scheme, n, k, act)
    except (ShapeError, UnsupportedOnDevice) as exc:
        return str(exc)
    # (what has not run on a GPU yet is taken with the knob, or where a measured entry chose it: the tuner checks
    # every candidate against the reference)
    untested = "" if forced(caps) or measured else untested_refusal(layout) or ragged_refusal(layout)
    why = layout_refusal(layout, SMALL_BC) or untested
    return f"the register-A kernel cannot run these weights: {why}" if why else ""


def ragged_refusal(layout) -> str:
    """Why an N of an odd number of 64-channel slabs (the last 128-channel block half past it) is not taken by
    default ("" when N is whole blocks): not yet run on a GPU."""
    if layout.n % BC == 0:
        return ""
    return (f"N={layout.n} is an odd number of 64-channel slabs (the last block half empty): not yet run on a GPU; "
            "the tuning knob register_a.any_group takes it")


def plan_moe_register_a(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int,
                        token_tile: int | None = None) -> Plan:
    """The plan of an indexed MoE GEMM on the register-A kernel (``tokens`` rows of x, each to ``top_k`` of
    ``experts`` weights [N, K]), or UnsupportedOnDevice / ShapeError naming what is missing. ``token_tile``: a
    measured entry's or a tuning candidate's instead of the rule's."""
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    form = wgmma_k16_form(caps, act)
    require_wgmma(caps, max(tokens, 1), form, f"m64nNk16 {act} x {act} -> f32", "the MoE tile kernel runs there",
                  "MoE register-A wgmma pipeline")
    step, step_why = activation_step(scheme, n, k)
    layout = moe_layout(scheme.with_(act=None) if step != "x" else scheme, n, k, act)
    why = layout_refusal(layout, SMALL_BC)  # (N in whole 64-channel slabs: the last block may hold one)
    if why:
        raise UnsupportedOnDevice(f"the MoE register-A kernel does not apply: {why}; the MoE tile kernel runs it")
    rows = rows_per_expert(tokens, top_k, experts)
    largest = int(knobs.value(MAX_TILE_KNOB, caps))
    cands = [b for b in TOKEN_TILES if b <= largest and b in form.n_values] or [TOKEN_TILES[0]]
    bt = next((b for b in cands if rows <= b), cands[-1])
    if token_tile is not None:
        if token_tile not in TOKEN_TILES or token_tile not in form.n_values:
            raise ShapeError(f"the MoE register-A kernel has no {token_tile}-token tile (it has {TOKEN_TILES})")
        bt, largest = token_tile, f"measured {token_tile}"
    limit = caps.limits.smem_per_block_kb * 1024 - bt * 8  # (slot_of_row and a_row: static shared memory)
    stages = next((s for s in range(MAX_STAGES, MIN_STAGES - 1, -1) if smem_bytes(bt, s) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no MoE register-A tile of {bt} tokens with {MIN_STAGES} stages fits "
                                  f"{caps.name}'s shared memory")
    smem = smem_bytes(bt, stages)
    ring = RING_2WG if bt <= 128 else WIDE_RING  # (the routed rows' registers: the ring of 5 spills at 256 tokens)
    reasons = [
        f"wgmma m64nNk16 {act} declared ({caps.target.arch}): A (int4 weights) decoded from registers, B (activations) "
        "K-major in 128-byte-swizzled shared memory",
        f"MoE register-A ({threshold_words(caps, MIN_ROWS_KNOB)}): "
        f"rows of x gathered through the routing's sorted slots by cp.async, the block's expert from the routing, "
        f"weights padded to {layout.n}x{layout.k} once when prepared (the MoE tile kernel's copy)",
    ]
    if step != "x":
        reasons.append(step_why)
    reasons += [
        f"token tile {bt} ({MAX_TILE_KNOB} {largest}): {tokens} token(s) x top-{top_k} over {experts} experts = "
        f"{rows:.1f} rows per expert on average",
        f"tile {BC} channels x {bt} tokens x {BK} k: 2 warpgroups x m64n{bt}k16; {stages} cp.async activation slots "
        f"({stages - 2} in flight), {smem // 1024} KiB of {caps.limits.smem_per_block_kb} KiB shared memory; "
        f"{ring} weight atoms in flight per lane",
        "epilogue: scales and bias per channel, router weight per row, the tile transposed through shared memory, "
        "16-byte stores of whole rows to their slots; no split-K",
    ]
    tiles = RegisterATiles(bt, BC, BK, stages, 1, 8, 1, prefetch=ring)
    plan = Plan(scheme=scheme.name, profile=caps.name, m=tokens, n=n, k=k, act=act, out=act, family="wgmma",
                instruction=replace(form, shape=(64, bt, 16)), path=PATH, layout=layout, tiles=tiles, splits=1,
                async_copy=True, smem_bytes=smem, reasons=tuple(reasons),
                row_scale=step == "codes16" and scheme.act_scale.mode == "dynamic_token")
    return with_stsm(caps, plan)
