"""Planning the register-A wgmma WnA16 kernel (``humming.core.families.register_a.generator``): int4 weights of the
mma.sync layout (``humming.core.families.mma_wna16.layout.prepare``, the stream kernel's prepared weights) dequantized
in registers as the A operand of wgmma m64nNk16, activations the B operand in shared memory. The default from M 513
where a profile declares the wgmma k16 form of the activation type and cp.async; the tuning knob register_a.min_m
moves the threshold (null: never).

Tile naming: ``RegisterATiles.bm`` is the token tile (the wgmma N, 128 or 256), ``bn`` the 128 output channels of the
two warpgroups, ``bk`` the 64 k of one stage; so ``Plan.grid`` = (token tiles, channel tiles, 1), or with the tail
option (1, tiles + 3 x tail, 1): every tile in launch order, the last ``tail`` of them as four K quarters each; with
stream-K (1, streamk, 1): persistent blocks."""
from __future__ import annotations

import math
from dataclasses import replace

from humming.core.common.wgmma import STAGGER_KNOB, declared_option, require_wgmma, stagger_wanted, wgmma_k16_form
from humming.core.families.register_a.layout import (
    BC,
    BK,
    SMALL_BC,
    e2m1_codes,
    layout_refusal,
    scale_rows_per_atom,
    untested_refusal,
)
from humming.core.families.register_a.tiles import RegisterATiles
from humming.core.plan import _DEFAULT_SMS, TAIL_SPLITS, Plan
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "wgmma-rs"
MIN_M_KNOB = "register_a.min_m"  # null: never (the dequant-smem kernel); the default 513
MIN_M = 128  # the smallest M the two-warpgroup form plans (one 128-token tile)
# By default the kernel takes M >= 513 (register_a.min_m): measured on the H200 at M 1024/4096 it ran in
# 0.76-0.87x cuBLAS fp16 on 8192x8192, 28672x8192 and 4096x14336, against 0.59-0.67x for the dequant-smem wgmma
# kernel; at M=128 it was slower (too few blocks, no split-K). At M=768 (scripts/ab_knobs.py in rotated
# rounds, us) it beat what ran there before (a tiled entry routed to the dequant-smem kernel, or the small form):
# 28672x8192 925 -> 583 (504 with stream-K), 8192x8192 254 -> 196 (155), 4096x14336 187 -> 153 (139). From M 257
# the tuner's winners were already this form (the 257-512 entries shipped for the three shapes).
DEFAULT_MIN_M = 513
MIN_STAGES, MAX_STAGES = 4, 6
# the two-warpgroup form's token tiles: 128 or 256 by the rules and the tuned entries, then fitted to M
# (fitted_token_tile) in whole groups of WIDE_BT_UNIT rows, never below WIDE_MIN_BT
WIDE_BT_UNIT, WIDE_MIN_BT = 16, 64
TMA_KNOB = "register_a.tma"  # activation stages by TMA tensor copy where the profile declares tma (false: cp.async).
# Measured on the H200 (same tiles, bench_wna16): 3-10% faster
# at M 16-4096 (8192x8192 M128 46.5 -> 43.6 us, 28672x8192 M128 153.0 -> 138.5, M4096 3366 -> 3232); the per-thread
# cp.async address and predicate arithmetic was a quarter of the small form's instructions per stage
WS_KNOB = "register_a.producer"  # the two-warpgroup form with a producer warpgroup issuing the tensor copies where
# the profile declares setmaxnreg (and the copies are TMA). Measured on the H200
# (bench_wna16): 8192x8192 M1024 196.6 -> 188.1 us, 4096x14336 M1024 171.0 -> 163.0, M4096 804.8 -> 686.5,
# 28672x8192 M4096 3237.7 -> 3142.2
OUT_PAD = 8  # 16-bit values of padding per staging row (272-byte pitch: conflict-free epilogue stores)


def min_m(caps=None) -> int | None:
    """The smallest M the two-warpgroup form takes by default (the tuning knob register_a.min_m; None: never)."""
    return knobs.value(MIN_M_KNOB, caps)


def enabled(caps=None) -> bool:
    return min_m(caps) is not None


def forced(caps=None) -> bool:
    """The tuning knob register_a.any_group: every layout the kernel runs, not only DEFAULT_GROUPS."""
    return bool(knobs.value("register_a.any_group", caps))


def tma_wanted(caps, tma: bool | None) -> bool:
    """Whether the activation stages come by TMA tensor copy: ``tma`` if given (UnsupportedOnDevice where the profile
    does not declare tma and mbarrier), else the tuning knob register_a.tma where the profile declares them."""
    return declared_option(bool(caps.memory.tma and caps.memory.mbarrier), tma, TMA_KNOB, caps,
                           f"{caps.name} does not declare tma and mbarrier: the activations go by cp.async")


def _copy_words(tma: bool) -> str:
    return "TMA tensor-copy" if tma else "cp.async"


def _load_words(layout) -> str:
    """How a lane reads its weight words of an atom, by the layout's pair order (humming.core.common.layout)."""
    if getattr(layout, "tile_major", False):
        return "tile-major pair order: one 16-byte load per lane and atom"
    return "step-major pair order: four 4-byte loads per lane and atom"


CLUSTER_SIZES = (2, 4)  # blocks per cluster of the small form's multicast variant (portable sizes, at most 8)


def over_cluster_limit(caps, blocks: int) -> bool:
    """Whether clusters of ``blocks`` blocks exceed the profile's declared max_cluster_size."""
    return caps.limits.max_cluster_size is not None and blocks > caps.limits.max_cluster_size


def cluster_refusal(caps, n: int, stages: int, tma: bool, cluster: int) -> str:
    """Why the small form cannot use thread-block clusters of ``cluster`` blocks here ('' if it can, or for 0); the
    profile's capability is not asked when ``caps`` is None (the generator's check of a given plan)."""
    if not cluster:
        return ""
    if cluster not in CLUSTER_SIZES:
        return f"cluster takes {' or '.join(map(str, CLUSTER_SIZES))} blocks, not {cluster}"
    if caps is not None and not caps.memory.cluster_multicast:
        return f"{caps.name} does not declare cluster_multicast (thread-block clusters with multicast tensor copies)"
    if caps is not None and over_cluster_limit(caps, cluster):
        return f"cluster {cluster}: {caps.name} declares max_cluster_size {caps.limits.max_cluster_size}"
    if not tma:
        return "cluster multicasts tensor copies: it needs the TMA activation stages (tma=True)"
    if (n // SMALL_BC) % cluster:
        return f"cluster {cluster}: the {n // SMALL_BC} slabs of 64 channels (N={n}) must be a multiple of {cluster}"
    if stages % cluster:
        return f"cluster {cluster}: the {stages} activation stages must be a multiple of {cluster} (one copying block per slot)"
    return ""


PAIR_CLUSTER_KNOB = "register_a.cluster"  # 2: the two-warpgroup form in clusters of two blocks that share each
# activation stage by multicast (humming.core.families.register_a.pair_cluster); 0: never; null: pairs by default for
# plans of 256-token tiles (plain or stream-K, not tail) from M PAIR_CLUSTER_MIN_M, where the profile declares cluster_multicast. Measured on
# the H200 (scripts/ab_knobs.py, 8 rotated rounds, W4A16 g128, median us, off -> on, two runs): 8192x8192
# M1024 206.3 -> 203.2 and 205.9 -> 203.1; 4096x14336 M1024 177.2 -> 173.5 and 177.5 -> 173.8, M2048 365.7 -> 359.1;
# 8192x8192 M1536 310.5 -> 314.6 (its all-capped last rounds ~1% faster). The medians of rows where both settings ran
# the same (stream-K) kernel moved by up to 1.3% in those runs. Not by default on the fitted 192-token tiles (M768:
# 8192x8192 146.7 -> 156.0, 4096x14336 134.4 -> 135.5), nor at 128 tokens (28672x8192 M128 without stream-K: 114.7 ->
# 115.9). Stream-K in pairs (the same day, 8-10 rounds, two runs): 28672x8192 M1024 761.1 -> 710.7 and 718.1 -> 703.4,
# M2048 1460.0 -> 1440.2, M4096 2984.7 -> 2872.8 and 2978.8 -> 2864.6; 8192x8192 M2048 414.7 -> 410.6, M4096 814.7 ->
# 816.3 and 826.8 -> 821.3; 4096x14336 M4096 715.9 -> 707.8 and 722.1 -> 716.1; slower at M768 (28672x8192 532.2 ->
# 543.5, 8192x8192 154.8 -> 156.7), below the default's M.
PAIR_CLUSTER_MIN_M = 1024
PAIR_CLUSTER_BT = 256


EARLY_KNOB = "register_a.early_ring"  # stream-K plans load the next segment's first weight atoms before the
# epilogue (RegisterATiles.early). Off: no consistent gain on the H200 (us, off -> on: 28672x8192 M128 106.2 ->
# 107.8, M1024 761.1 -> 748.3, M4096 2984.7 -> 2949.6; with pairs 2872.8 -> 2810.0, then 2864.6 -> 2884.4)


def early_ring_wanted(streamk: int, caps=None) -> tuple[int, str]:
    """(RegisterATiles.early, why) of a two-warpgroup plan with ``streamk`` blocks."""
    if not streamk or not knobs.value(EARLY_KNOB, caps):
        return 0, ""
    return 1, (f"early ring ({EARLY_KNOB}): right after a segment's last wgmmas the consumers load the next segment's "
               "first weight atoms, which arrive during the epilogue; the next segment skips its prologue")


def pair_cluster_blocks(caps, n: int, producer_warp: bool, streamk: int, tail: int, cluster: int, m: int = 0,
                        bt: int = 0) -> tuple[int, str]:
    """(blocks per cluster, why) of the two-warpgroup form: ``cluster`` if given (2, or ShapeError where it cannot
    apply), else the tuning knob register_a.cluster, else pairs where the default rule (``m``, token tile ``bt``)
    takes them (0 with the reason where an asked-for cluster cannot apply)."""
    value = knobs.value(PAIR_CLUSTER_KNOB, caps)
    forced = "" if value is None else str(value)
    default = not cluster and not forced and m >= PAIR_CLUSTER_MIN_M and bt == PAIR_CLUSTER_BT
    want = cluster or (int(forced) if forced else 2 if default else 0)
    if not want:
        return 0, ""
    why = ("" if want == 2 else f"the two-warpgroup form's clusters take 2 blocks, not {want}") or (
        f"{caps.name} does not declare cluster_multicast" if not caps.memory.cluster_multicast else
        f"{caps.name} declares max_cluster_size {caps.limits.max_cluster_size}" if over_cluster_limit(caps, want) else
        "clusters need the producer warpgroup (TMA copies)" if not producer_warp else
        "clusters exclude tail" if tail else
        f"stream-K pairs need an even block count, not {streamk}" if streamk % 2 else
        f"the {n // BC} channel tiles do not pair up" if (n // BC) % 2 else "")
    if why:
        if cluster:
            raise (UnsupportedOnDevice if "declare" in why else ShapeError)(f"cluster {cluster}: {why}")
        return 0, "" if default else f"no cluster ({PAIR_CLUSTER_KNOB}): {why}"
    how = (f"from M {PAIR_CLUSTER_MIN_M} with {PAIR_CLUSTER_BT}-token tiles by default, {PAIR_CLUSTER_KNOB} 0: off; "
           f"measured {'1-4' if streamk else '1.5-2'}% faster at M 1024-4096" if default else
           PAIR_CLUSTER_KNOB if forced else "cluster=2")
    if streamk:
        return 2, (f"stream-K in clusters of 2 blocks ({how}): the schedule's units are the "
                   f"{streamk // 2} pairs, its tiles pairs of adjacent channel tiles of one token tile, each block its "
                   "half; the block of rank it % 2 copies stage it's activations into both blocks' slots by one "
                   "multicast tensor copy; each block's split-tile halves handed over as without pairs")
    return 2, (f"clusters of 2 blocks ({how}): adjacent channel tiles of one token tile; block kt % 2 copies stage "
               "kt's activations by one multicast tensor copy into both blocks' slots (one L2 read), each slot "
               "refilled once every consumer warp of both blocks released it")


def smem_bytes(bt: int, stages: int, staging: bool = False) -> int:
    """STAGES activation tiles (bt rows x 128 B) and 1 KiB to align them to 1024 bytes; the epilogue's staging
    tile (bt rows x (128 + OUT_PAD) 16-bit values) reuses them, or with ``staging`` (the stream-K option, whose
    producer keeps loading the next segment's stages) comes after them."""
    return stages * bt * BK * 2 + 1024 + (bt * (BC + OUT_PAD) * 2 if staging else 0)


# weight atoms in flight per lane in every two-warpgroup plan: 5 makes the plain form's trip (2 (5 + 1) = 12 stages)
# whole rounds of its 6 activation slots, so every slot index and phase is a constant of the unrolled stage (1022 -> 954
# SASS instructions per 10 stages at M 1024). Measured on the H200 (scripts/ab_knobs.py W4A16 g128, 8
# rounds, median us, before: 6 below M 1024, PF = 4 from there -> 5): 8192x8192 M1024 201.3 -> 191.8, 4096x14336 M1024
# 173.0 -> 165.3, 28672x8192 M1024 680.0 -> 672.7, M128 107.0 -> 104.5 (uncapped rounds 94.5 -> 93.1), M4096
# 2874 -> 2803; 8192x8192 / 4096x14336 M128 and M4096 within 0.3%. (Before: 6 against 4 below M 1024,
# scripts/ablate.py pf6_2wg: 28672x8192 M128 117.2 -> 111.5, 8192x8192 M256 57.9 -> 56.4; 4 against 2,
# bench_wna16: 4096x14336 M4096 817 -> 731, 28672x8192 M1024 875 -> 808, 8192x8192 M4096 937 -> 913.)
RING_2WG = 5
# the tuning knob register_a.prefetch overrides it (1..12) for an A/B
RING_KNOB = "register_a.prefetch"


def table_ring(pf: int, layout) -> int:
    """The ring depth for ``layout``: one atom fewer than ``pf`` where four table rows travel with each atom (scale
    groups of 16, NVFP4), whose registers they take (ptxas, bf16: the small form at 32 tokens spilled 16 bytes with
    7 atoms, none with 6; the two-warpgroup stream-K form 8 bytes with 5, none with 4)."""
    return max(2, pf - 1) if scale_rows_per_atom(layout) == 4 else pf


def ring_env(caps=None) -> int:
    """The tuning knob register_a.prefetch as a ring depth (0: not set, the form's rule)."""
    return knobs.value(RING_KNOB, caps) or 0


DEEP_RING_PF = 10  # weight atoms in flight per lane where shared memory holds only 2 blocks per SM (see small_ring)
# weight atoms in flight per lane of the small form's token tiles of 80 / 96 with 6 stages (3 blocks per SM; 4 atoms
# before): H200, W4A16 g128, scripts/ab_knobs.py, us, 4 / 6 / 10 atoms: 8192x8192 M=80 34.2 / 32.2 / 31.6,
# M=96 35.5 / 33.6 / 33.4; 4096x14336 M=80 31.7 / 29.6 / 29.5, M=96 33.8 / 31.8 / 31.8 (6: fewer registers, 140 at 96)
WIDE_TILE_PF = 6


# the occupancy option of the small-M form (RegisterATiles.occupancy): 7 blocks per SM (72 registers a thread) with 3 atoms
# in flight and each stage waiting for its own wgmmas; 28672x8192 M=16 with 2 splits in a cluster (896 blocks, all
# resident on 132 SMs): 44.9 us against 50.3 for the 4-block form (H200, scripts/ablate.py
# w0+pf3+lb7 (docs/performance.md)). One warpgroup's m64nBTk16 wgmmas run one after another at a
# latency far above their issue cost, so more warpgroups per SM, not a deeper ring, is what speeds the small form.
OCCUPANCY_PF = 3
OCCUPANCY_RANGE = (5, 8)  # blocks per SM the option takes (at 8: 64 registers a thread, the least ptxas allows)


def occupancy_refusal(bt: int, occupancy: int, prefetch: int, cluster: int) -> str:
    """Why the small form cannot take ``occupancy`` / ``prefetch`` ("" when it can)."""
    lo, hi = OCCUPANCY_RANGE
    if occupancy and not lo <= occupancy <= hi:
        return f"occupancy (blocks per SM of the small form) is {lo}..{hi} or 0 (the form's rule), not {occupancy}"
    if occupancy and cluster:
        return "occupancy excludes the multicast cluster option (its producer warp needs the registers)"
    if occupancy and bt > 64:
        return f"occupancy applies to token tiles up to 64 (the accumulators of {bt} tokens need more registers)"
    if prefetch and not 1 <= prefetch <= 12:
        return f"prefetch (weight atoms in flight per lane) is 1..12, not {prefetch}"
    return ""


def small_ring(caps, bt: int, stages: int, cluster: int = 0, occupancy: int = 0, prefetch: int = 0) -> tuple[int, int]:
    """(weight atoms in flight per lane, blocks per SM its registers are budgeted for) of the small-M form. Up to 64
    tokens the ring has a slot per activation stage (STAGES - 1 in flight) and 4 blocks share an SM, above it
    STAGES - 2 (at least WIDE_TILE_PF with 6 stages) and 3 (one block fewer with a cluster's producer warp). Where
    the activation stages leave room for only 2 blocks in the profile's shared memory (128 tokens x 6 stages: 97 KiB), the registers of a third block
    go to a deeper ring of DEEP_RING_PF atoms: 8192x8192 M=128 41.8 us with 4 atoms, 40.0 with 6, 38.8 with 8, 38.1
    with 10 (twice), 39.3 with 12; 4096x14336 M=256 60.1 -> 58.6 from 8 to 10 (H200, scripts/ablate.py
    pf6_rs / pf8_rs / pf10_deep (docs/performance.md)). ``occupancy`` (a plan option) sets the blocks
    and a ring of ``prefetch`` (else OCCUPANCY_PF) atoms; ``prefetch`` alone deepens or shortens the ring."""
    if occupancy:
        return prefetch or OCCUPANCY_PF, occupancy
    blocks = (4 if bt <= 64 else 3) - (1 if cluster else 0)
    pf = stages - 1 if bt <= 64 else stages - 2
    if bt > 64 and blocks == 3 and stages >= 6:
        pf = max(pf, WIDE_TILE_PF)
    limit = caps.limits.smem_per_block_kb if caps is not None else None
    if bt > 64 and not cluster and limit and (limit + 1) * 1024 // smem_bytes(bt, stages) <= 2:  # (with the
        # producer warp's 32 threads the deeper ring spills)
        blocks, pf = 2, max(pf, DEEP_RING_PF)
    return prefetch or pf, blocks


def _token_tile(m: int, n: int, sms: int, cands: list[int], reasons: list[str]) -> int:
    bt = cands[0]
    if len(cands) > 1:
        def fill(b: int) -> float:  # fraction of the launched SM slots that hold a tile
            tiles = math.ceil(m / b) * (n // BC)
            return tiles / (math.ceil(tiles / sms) * sms)

        wide = math.ceil(m / 256) * (n // BC)
        if fill(128) > 1.25 * fill(256):
            bt = 128
            reasons.append(f"128 tokens per tile: {wide} tiles of 256 tokens would leave most of {sms} SMs idle")
        else:
            reasons.append(f"256 tokens per tile (m64n256k16, the widest step); {wide} tiles on {sms} SMs")
    return bt


RASTER_KNOB = "register_a.raster"  # two-warpgroup form: token tiles per rasterization group; 0: launch order
# 4: measured on the H200 (scripts/ab_knobs.py, W4A16, us, 0 / 4 / 8): M4096 8192x8192 884.1 / 868.7 / 876.4,
# 28672x8192 3178.2 / 3092.7 / 3090.9, 4096x14336 776.0 / 757.0 / 767.2; at M1024 (4 token tiles: the same block
# order) 192.6 / 190.0 / 190.0, 683.5 / 706.4 / 704.6, 170.1 / 171.4 / 172.2, i.e. this machine's spread
# the staggered start from this M: measured on the H200 (bench_wna16, us, off -> on): 8192x8192 M4096
# 909.6 -> 846.9, 28672x8192 M1024 746.2 -> 659.1, M512 404.1 -> 377.5; but 8192x8192 M256 58.3 -> 63.0 and 4096x14336
# M512 96.0 -> 105.0 (few blocks per SM there), the rest within noise
STAGGER_MIN_M = 1024


def tail_tiles(tiles: int, sms: int) -> int:
    """The tail option's tile count for a two-warpgroup launch of ``tiles`` blocks at one block per SM: the tiles
    left for the last round, where their K quarters need fewer quarter rounds than one whole round (224 tiles on
    132 SMs: 92, whose 368 quarters take 3 quarter rounds: 1.75 rounds of work instead of 2), else 0."""
    left = tiles % sms if sms else 0
    if not left or math.ceil(left * TAIL_SPLITS / sms) >= TAIL_SPLITS:
        return 0
    return left


def tail_refusal(m: int, n: int, k: int, bt: int, tail: int, producer_warp: bool) -> str:
    """Why the two-warpgroup form cannot take the tail option ("" when it can)."""
    if not tail:
        return ""
    if not producer_warp:
        return "tail is written for the two-warpgroup form with the producer warpgroup (TMA copies, setmaxnreg)"
    tiles = math.ceil(m / bt) * (n // BC)
    if not 0 < tail <= tiles:
        return f"tail {tail}: between 1 and the {tiles} tiles of M={m} x N={n}"
    if (k // BK) % TAIL_SPLITS:
        return f"tail splits K in {TAIL_SPLITS}: the {k // BK} k atoms of K={k} must be a multiple of {TAIL_SPLITS}"
    return ""


def streamk_refusal(tail: int, producer_warp: bool) -> str:
    """Why the two-warpgroup form cannot take the stream-K option ("" when it can)."""
    if not producer_warp:
        return "stream-K is written for the two-warpgroup form with the producer warpgroup (TMA copies, setmaxnreg)"
    if tail:
        return "stream-K and tail both split tiles of the last round: one or the other"
    return ""


# the epilogue's staging by stmatrix .trans (16 instructions a thread at 256 tokens instead of 128 16-bit shared stores)
# in the register-A W4A16 forms and the W4A8 narrow / wide forms, where the profile declares stmatrix;
# the tuning knob register_a.stmatrix false turns it off. Measured on the H200 (scripts/ab_knobs.py, median us, with the ring
# of 5, off -> on): W4A16 28672x8192 M2048 1387 -> 1355, M4096 2873 -> 2783, 4096x14336 M1024 165.3 -> 164.4, other
# rows M 128-4096 within 0.5%; W4A8-FP8 28672x8192 M1024 479.5 -> 469.3, M4096 1963 -> 1935, other rows within 0.8%
STSM_KNOB = "register_a.stmatrix"


def with_stsm(caps, plan: Plan) -> Plan:
    """The plan with the stmatrix staging (RegisterATiles.stsm) where the profile declares stmatrix, unless the tuning
    knob register_a.stmatrix is off."""
    if not knobs.value(STSM_KNOB, caps) or plan.tiles.stsm or not caps.memory.stmatrix:
        return plan
    return replace(plan, tiles=replace(plan.tiles, stsm=1), reasons=plan.reasons + (
        f"epilogue staging by stmatrix .trans (stmatrix declared): one instruction per two 8-token blocks of both "
        f"channel halves ({STSM_KNOB} false: two 16-bit stores per value pair)",))


def plan_wna16_wgmma_rs(caps, layout, m: int, act: str, scheme: str = "", bt: int | None = None,
                        splits: int | None = None, stages: int | None = None, fold: int = 0,
                        small: bool | None = None, tma: bool | None = None, cluster: int = 0,
                        occupancy: int = 0, prefetch: int = 0, tail: int = 0, streamk: int = 0) -> Plan:
    """The register-A wgmma WnA16 plan (see _plan_register_a); the stmatrix staging where the profile declares it."""
    return with_stsm(caps, _plan_register_a(caps, layout, m, act, scheme, bt, splits, stages, fold, small, tma, cluster,
                                            occupancy, prefetch, tail, streamk))


def _plan_register_a(caps, layout, m: int, act: str, scheme: str = "", bt: int | None = None,
                     splits: int | None = None, stages: int | None = None, fold: int = 0,
                     small: bool | None = None, tma: bool | None = None, cluster: int = 0,
                     occupancy: int = 0, prefetch: int = 0, tail: int = 0, streamk: int = 0) -> Plan:
    """Plan the register-A wgmma WnA16 kernel for a ``WeightLayout`` (humming.core.common.layout), or UnsupportedOnDevice /
    ShapeError naming what is missing. ``bt`` forces the token tile (128 or 256; 16-64 for the small-M form, which
    M <= SMALL_MAX_M takes by default); ``splits``, ``stages`` and ``fold`` (raw codes into the wgmma, zero point and
    scale per group in fp32) are options of the small-M form, which ``small=True`` forces at any M (token tiles of
    up to SMALL_MAX_BT). ``tma`` brings the activation stages in by TMA tensor copy (one thread per stage, an mbarrier
    per slot) instead of every thread's cp.async; None: the tuning knob register_a.tma. ``cluster`` (2 or 4,
    small-M form with TMA; 2 in the two-warpgroup form, see pair_cluster_blocks): blocks of that many adjacent slabs
    (channel tiles) form a thread-block cluster and read each activation stage from L2 once, multicast into all of
    their slots. ``occupancy`` (blocks per SM, OCCUPANCY_RANGE) and
    ``prefetch`` (weight atoms in flight per lane) are options of the small-M form (see small_ring). ``tail`` (the
    two-warpgroup form, see tail_tiles): the last ``tail`` tiles in launch order run as TAIL_SPLITS blocks each, one
    per quarter of K. ``streamk`` (the two-warpgroup form): that many persistent blocks (one per SM) take the tiles
    in whole waves, then split the k atoms of the tiles left over evenly (humming.core.families.register_a.streamk)."""
    form = wgmma_k16_form(caps, act)
    require_wgmma(caps, m, form, f"m64nNk16 {act} x {act} -> f32", "the mma.sync kernels run WnA16 there",
                  "register-A wgmma WnA16 pipeline")
    if small is None:
        small = (bt is None and m <= SMALL_MAX_M) or (bt is not None and bt < 128)
    if small and (tail or streamk):
        raise ShapeError(f"{'tail' if tail else 'stream-K'} is an option of the two-warpgroup form (the small form "
                         "splits K with splits)")
    if small:
        return _plan_small(caps, layout, m, act, scheme, form, bt, splits, stages, fold, tma_wanted(caps, tma), cluster,
                           occupancy, prefetch)
    if occupancy or prefetch:
        raise ShapeError("occupancy and prefetch are options of the small-M form (the two-warpgroup form sets its ring "
                         "from M)")
    if fold:
        raise ShapeError("fold is an option of the small-M form (token tiles of 16 or 32)")
    why = layout_refusal(layout)
    if why:
        err = ShapeError if why.startswith(("N=", "K=")) else UnsupportedOnDevice
        raise err(f"the register-A wgmma WnA16 kernel does not apply: {why}; the dequant-smem wgmma or mma.sync "
                  "kernels run it")
    n, k = layout.n, layout.k
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms or _DEFAULT_SMS
    d = layout.decode
    scale = (f"group scales per {layout.scale_group}" if layout.scale_group
             else "per-channel scales in the fp32 epilogue" if layout.channel_scale else "a per-tensor scale")
    if e2m1_codes(d):
        codes, decode = "e2m1", f"e2m1: sign and bits under the {act} mantissa, exact, {scale}"
    else:
        zero = ("zero points per " + ("channel" if layout.zero_group < 0 else f"group of {layout.zero_group}")
                if layout.zero_group else f"constant offset {layout.zero_const:g} (magic number and zero, exact)")
        codes, decode = "int4", f"{d.kind}{d.bits}: magic number | code, {zero}, {scale}"
    reasons = [
        f"wgmma m64nNk16 {act} declared ({caps.target.arch}): A (weights) from registers, B (activations) K-major in "
        "128-byte-swizzled shared memory",
        f"path {PATH} (from M {min_m(caps) or DEFAULT_MIN_M}, {MIN_M_KNOB}): C^T = W x^T per tile; each warp loads its 16 channels x 64 k of {codes} codes "
        f"(the mma.sync atom layout, the stream kernel's prepared weights; {_load_words(layout)}) from global memory "
        "atoms ahead in a register ring, "
        f"decodes them in registers ({decode}) into the m16n8k16 A "
        "fragment that each warp of a warpgroup supplies; no shared-memory traffic for the weights",
    ]
    if bt is not None and (bt % WIDE_BT_UNIT or not WIDE_MIN_BT <= bt <= 256):
        raise ShapeError(f"the two-warpgroup register-A form takes token tiles of {WIDE_MIN_BT}..256 (a multiple of "
                         f"{WIDE_BT_UNIT}), not {bt}")
    cands = [b for b in ((bt,) if bt else (256, 128)) if b in form.n_values]
    if not cands:
        raise UnsupportedOnDevice(f"{caps.name} declares no wgmma m64n{bt or 256}k16 {act}")
    bt = _token_tile(m, n, sms, cands, reasons)
    use_tma = tma_wanted(caps, tma)
    fitted = fitted_token_tile(m, bt, WIDE_BT_UNIT if use_tma else 32, caps)  # cp.async: 32 rows per pass of 256 threads
    if fitted != bt and fitted >= WIDE_MIN_BT and fitted in form.n_values:
        reasons.append(f"token tile {fitted} instead of {bt}: M={m} in {math.ceil(m / fitted)} tile(s) of whole "
                       f"{WIDE_BT_UNIT if use_tma else 32}-row groups ({FIT_KNOB} false: {bt}; rows past M cost as much as "
                       "tokens, and more where the tensor copy zero-fills them)")
        bt = fitted
    stages = next((s for s in range(MAX_STAGES, MIN_STAGES - 1, -1) if smem_bytes(bt, s, bool(streamk)) <= limit),
                  None)
    if stages is None:
        raise UnsupportedOnDevice(
            f"no register-A wgmma tile of {bt} tokens with {MIN_STAGES} stages fits {caps.name}'s {limit} B of "
            "shared memory")
    smem = smem_bytes(bt, stages, bool(streamk))
    producer_warp = use_tma and declared_option(bool(caps.memory.setmaxnreg), None, WS_KNOB, caps, "")
    reasons.append(
        f"tile {BC} channels x {bt} tokens x {BK} k: 2 warpgroups x m64n{bt}k16, 4 k16 steps per stage; {stages} "
        f"{_copy_words(use_tma)} activation slots ({stages if producer_warp else stages - 2} in flight; rows past M "
        f"zero-filled); {smem // 1024} KiB of "
        f"{limit // 1024} KiB shared memory")
    why = tail_refusal(m, n, k, bt, tail, producer_warp) or (streamk_refusal(tail, producer_warp) if streamk else "")
    if why:
        raise ShapeError(why)
    if streamk and not 0 < streamk <= 65535:
        raise ShapeError(f"stream-K takes 1..65535 persistent blocks, not {streamk}")
    tiles = math.ceil(m / bt) * (n // BC)
    reasons.append("epilogue: scales and bias per channel, the tile transposed through shared memory, 16-byte "
                   "stores of whole token rows (rows past M skipped); " + (
                       f"tail {tail}: the last {tail} of {tiles} tiles run as {TAIL_SPLITS} blocks each, one per "
                       f"quarter of K ({tiles - tail + tail * TAIL_SPLITS} blocks on {sms} SMs: the work of "
                       f"{tiles / sms:.2f} rounds of whole tiles, which alone take {math.ceil(tiles / sms)}); fp32 "
                       "partials added by the last block of a tile in a fixed order"
                       if tail else _streamk_words(tiles, k // BK, streamk) if streamk else "no split-K"))
    if producer_warp:
        reasons.append(f"a producer warpgroup ({WS_KNOB} false turns it off; setmaxnreg 40, the consumers take 232) issues every tensor "
                       "copy into the slot the consumers released (EMPTY mbarriers); the two consumer warpgroups meet "
                       "only at the FULL mbarriers")
    stagger = int(producer_warp and stagger_wanted(caps) and m >= STAGGER_MIN_M and not streamk)
    if stagger:
        reasons.append(f"staggered start ({STAGGER_KNOB} false: off): warpgroup 1 issues its first wgmmas after warpgroup "
                       "0's, so each decodes while the other's wgmmas run")
    forced_ring = ring_env(caps)
    prefetch = forced_ring or table_ring(RING_2WG, layout)
    reasons.append(f"{prefetch} weight atoms in flight per lane" + (f" ({RING_KNOB})" if forced_ring else "")
                   + (f": a trip of {2 * (prefetch + 1)} stages is whole rounds of the {stages} activation slots, every "
                      "slot index and phase a constant" if 2 * (prefetch + 1) % stages == 0 and not (streamk or tail)
                      else ""))
    early, early_why = early_ring_wanted(streamk, caps)
    if early_why:
        reasons.append(early_why)
    cluster, cluster_why = pair_cluster_blocks(caps, n, producer_warp, streamk, tail, cluster, m, bt)
    if cluster_why:
        reasons.append(cluster_why)
    raster = 0 if tail else knobs.value(RASTER_KNOB, caps)  # the tail option's blocks go in launch order
    if raster:
        reasons.append(f"blocks rasterized in groups of {raster} token tiles ({RASTER_KNOB} 0: launch order): a group's "
                       "blocks take its token tiles for one channel tile after another, so the blocks running together "
                       f"share {raster} activation tiles in L2 instead of all of them")
    tiles = RegisterATiles(bt, BC, BK, stages, 1, 12 if producer_warp else 8, 1,
                           bulk=2 if producer_warp else int(use_tma), stagger=stagger, raster=raster, prefetch=prefetch,
                           tail=tail, streamk=streamk, cluster=cluster, early=early)
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="wgmma",
        instruction=replace(form, shape=(64, bt, 16)), path=PATH, layout=layout, tiles=tiles, splits=1,
        async_copy=True, smem_bytes=smem, reasons=tuple(reasons),
    )


def _streamk_words(tiles: int, katoms: int, blocks: int) -> str:
    waves, left = divmod(tiles, blocks)
    return (f"stream-K over {blocks} persistent blocks: {waves} wave(s) of whole tiles, then the {left * katoms} k atoms "
            f"of the {left} tiles left split evenly ({left * katoms / blocks:.1f} a block, each block's run within at "
            "most two tiles); the producer copies every segment's stages without a break, each segment's epilogue "
            "goes through a staging tile of its own; a split tile's later parts store their fp32 partials and the block "
            "of its first part adds them to its own, in block order")


# ---- the small-M form (decode batches and prefill below M 513): one warpgroup per block (64 channels, one slab),
# BT tokens per tile in one wgmma m64nBTk16 (BT = M rounded up to 16, 128 from M 65), split-K over blocks with the
# fixed-order fix-up of the mma.sync kernels. Planned by default for M 9-1023 where the live GPU runs wgmma
# (small_default; from M 513 only where the two-warpgroup form does not take the layout); it runs on the stream
# kernel's prepared weights.
SMALL_MAX_M = 64  # up to here the token tile is M rounded up to 16; above, tiles of SMALL_MAX_BT
SMALL_MAX_BT = 128  # its widest token tile: wgmma m64n128k16, 64 accumulators per thread
SMALL_MIN_M = 9  # below: the stream kernel (one n8 token tile of mma.sync)
# the small form's default range ends below this M; from DEFAULT_MIN_M humming.gemm runs the two-warpgroup form where
# it takes the layout, so M DEFAULT_MIN_M..1023 reach small_default only for layouts that form refuses by default
SMALL_DEFAULT_BELOW_M = 1024
SMALL_STAGES = 6


def small_splits(n: int, k: int, sms: int, tiles: int = 1, bt: int = 16) -> tuple[int, str]:
    """Split-K of the small-M form: the fewest splits that give every SM one block fewer than fit (4 with token
    tiles up to 64, 3 above), keeping >= 8 atoms per block (the weight ring and the activation stages need a run to
    fill). Matches the tuner's winners on the H200 for 8192x8192, 28672x8192 and 4096x14336."""
    slabs, katoms = n // SMALL_BC, k // BK
    want = (3 if bt <= 64 else 2) * sms * 0.95
    splits = 1
    while tiles * slabs * splits < want and katoms % (2 * splits) == 0 and katoms // (2 * splits) >= 8:
        splits *= 2
    blocks = tiles * slabs * splits
    return splits, f"split-K {splits}: {blocks} blocks of one warpgroup ({tiles} token tile(s) x {slabs} slabs) on {sms} SMs"


def small_default(caps, layout, m: int, act: str, scheme: str = "") -> Plan | None:
    """The small form as the planner's default rule, or None where it does not apply: int4 layouts it decodes, the
    profile's wgmma k16 form and cp.async, M 9-1023 (with the TMA activation copies it also won at M=16 on
    28672x8192: 52.6 us against the stream kernel's 57.9 on the H200,; before them the stream kernel was
    5% faster there). Token tiles of M rounded up to 16 (128 from M 65, then fitted to M: fitted_token_tile); fold=1 (not where it
    would spill) and 8 stages up to 32 tokens, 4 stages at 64, 6 (4 on layers wider than 16384) at 128: the tuner's winners on the H200
    . Callers check that the live GPU runs the profile's wgmma."""
    if not SMALL_MIN_M <= m < SMALL_DEFAULT_BELOW_M or min_m(caps) is None:
        return None
    if wgmma_k16_form(caps, act) is None or not caps.memory.cp_async or layout_refusal(layout, SMALL_BC):
        return None
    if untested_refusal(layout) and not forced(caps):
        return None
    bt = 16 * math.ceil(m / 16) if m <= SMALL_MAX_M else SMALL_MAX_BT
    stages = 8 if bt <= 32 else 4 if bt <= 64 else (6 if layout.n <= 16384 else 4)
    # fold=1 spills (ptxas, 20-128 bytes) at 32 tokens with per-group zero tables or groups of 256, and at 16 with
    # both: plain there
    zeros, wide = layout.zero_group > 0, layout.scale_group >= 256
    spills = (zeros and wide) or (bt == 32 and (zeros or wide))
    occupied = _occupancy_default(caps, layout, m, act, scheme, bt, zeros or wide)
    if occupied is not None:
        return occupied
    for fold in ((1, 0) if bt <= 32 and not spills else (0,)):
        try:
            return plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=bt, stages=stages, fold=fold, small=True)
        except (ShapeError, UnsupportedOnDevice):
            continue
    return None


def _occupancy_default(caps, layout, m: int, act: str, scheme: str, bt: int, tables: bool) -> Plan | None:
    """The occupancy option as the default of wide layers, where the form's own split rule leaves one split (N/64
    slabs fill 4 blocks per SM): 7 blocks per SM with 2 splits where they all fit at once, else with 1 where the
    slabs do; token tiles of 16 (fold=1, 8 stages) or 32 (plain, 4 stages: fold=1 spills there). Measured on
    28672x8192 (H200, the tuner's winners: M=16 45.1 us against 50.3, M=32 53.1
    against 55.1; measured with the TMA activation copies only, so profiles without them keep the form's rule. None
    where it does not apply."""
    if not tma_wanted(caps, None) or scale_rows_per_atom(layout) > 1:  # (sub-atom tables spill at 72 registers)
        return None
    sms = caps.limits.sms or _DEFAULT_SMS
    slabs, katoms = layout.n // SMALL_BC, layout.k // BK
    occupancy = 7
    if bt > 32 or small_splits(layout.n, layout.k, sms, 1, bt)[0] != 1:
        return None
    splits = next((s for s in (2, 1) if slabs * s <= occupancy * sms and katoms % (2 * s) == 0), 0)
    if not splits:
        return None
    fold, stages = (1, 8) if bt == 16 and not tables else (0, 4)
    try:
        return plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=bt, splits=splits, stages=stages, fold=fold,
                                   small=True, occupancy=occupancy)
    except (ShapeError, UnsupportedOnDevice):
        return None


FIT_KNOB = "wgmma.fit_token_tile"  # false: both forms keep the token tile they are given (small form M 65-127: 128)


def fit_on(caps=None) -> bool:
    """The tuning knob wgmma.fit_token_tile: token tiles are fitted to M (fitted_token_tile)."""
    return bool(knobs.value(FIT_KNOB, caps))


def fitted_token_tile(m: int, bt: int, unit: int = 16, caps=None) -> int:
    """The token tile for M given a tile of ``bt`` (the rule's or a tuned entry's, measured at its bucket's largest
    M): as many tiles as ``bt`` needs, each M / tiles rounded up to ``unit`` rows, never wider than ``bt`` (the small
    form, and the two-warpgroup form with ``unit`` WIDE_BT_UNIT). A tile's rows past M cost their full share of the
    wgmmas, and the tensor copy that zero-fills them more. The tuning knob wgmma.fit_token_tile false keeps ``bt``. Measured on the H200 (W4A16 g128, scripts/ab_knobs.py, us, 128-token tiles / fitted):
    8192x8192 M=80 57.4 / 34.5, M=96 45.8 / 36.0, M=112 32.1 / 29.9; 4096x14336 41.6 / 32.0, 36.3 / 33.4, 30.5 / 28.2."""
    if not fit_on(caps):
        return bt
    tiles = math.ceil(m / bt)
    return min(bt, unit * math.ceil(math.ceil(m / tiles) / unit))


def _plan_small(caps, layout, m: int, act: str, scheme: str, form, bt: int | None, splits: int | None,
                stages: int | None, fold: int = 0, tma: bool = False, cluster: int = 0, occupancy: int = 0,
                prefetch: int = 0) -> Plan:
    why = layout_refusal(layout, SMALL_BC)
    if why:
        err = ShapeError if why.startswith(("N=", "K=")) else UnsupportedOnDevice
        raise err(f"the register-A wgmma WnA16 kernel does not apply: {why}; the stream or mma.sync kernels run it")
    n, k = layout.n, layout.k
    asked = bt or min(SMALL_MAX_BT, 16 * math.ceil(m / 16))
    if asked > SMALL_MAX_BT or asked % 16 or asked not in form.n_values:
        raise UnsupportedOnDevice(f"the small-M register-A form takes token tiles of 16..{SMALL_MAX_BT} (a multiple of "
                                  f"16 that {caps.name} declares for wgmma m64nNk16), not {asked}")
    bt = fitted_token_tile(m, asked, caps=caps)
    if bt not in form.n_values:
        bt = asked
    fit_why = (f"token tile {bt} instead of {asked}: M={m} in {math.ceil(m / bt)} tile(s) of whole 16-row groups "
               "(rows past M cost as much as tokens, and more where the tensor copy zero-fills them)" if bt != asked else "")
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms or _DEFAULT_SMS
    stages = stages or SMALL_STAGES
    if stages < MIN_STAGES or smem_bytes(bt, stages) > limit:
        raise UnsupportedOnDevice(f"{stages} activation stages of {bt} tokens do not fit (at least {MIN_STAGES}, "
                                  f"{limit} B of shared memory)")
    katoms = k // BK
    auto, split_why = small_splits(n, k, sms, math.ceil(m / bt), bt)
    if splits is None:
        splits = auto
    elif katoms % splits:
        raise ShapeError(f"split-K {splits} does not divide the {katoms} k atoms")
    else:
        split_why = f"split-K {splits} forced"
    if fold:
        if bt > 32:
            raise ShapeError(f"fold keeps three accumulator sets: token tiles up to 32, not {bt}")
        if scale_rows_per_atom(layout) > 1 or e2m1_codes(layout.decode):
            raise ShapeError("fold is written for integer codes with groups of whole 64-wide atoms, not "
                             + ("e2m1 codes" if e2m1_codes(layout.decode) else f"groups of {layout.scale_group}"))
        ga = fold_group_atoms(layout)
        if ga and (katoms // splits) % ga:
            raise ShapeError(f"fold: each split's {katoms // splits} k atoms must hold whole groups of {ga} atoms")
        if fold not in (1, 2):
            raise ShapeError(f"fold is 0, 1 (scale per group in fp32) or 2 (zero point too), not {fold}")
        if fold == 2 and not ga:
            # measured on the H200: the raw products summed over a whole split (e.g. 4096 k) lose too much to the
            # cancellation against (magic + zero) x sum(x): relative error 1.9e-3 against 1e-3 for f16
            raise ShapeError("fold=2 needs scale or zero groups: one sum over a whole split loses precision")
        if fold == 2:
            from humming.core.families.mma_wna16.sizing import fold_applies

            if fold_applies(layout):
                raise ShapeError(fold_applies(layout))
        split_why += (f"; fold={fold}: " + ("the scale" if fold == 1 else "the wgmma takes the raw codes (magic + code); "
                                            "zero point (activation sums from an all-ones A) and scale")
                      + " applied per " + (f"group of {ga * BK}" if ga else "split") + " in fp32")
    cluster_why = cluster_refusal(caps, n, stages, tma, cluster)
    if cluster_why:
        raise (UnsupportedOnDevice if "declare" in cluster_why else ShapeError)(cluster_why)
    why = occupancy_refusal(bt, occupancy, prefetch, cluster)
    if why:
        raise ShapeError(why)
    if not prefetch and not occupancy:  # (four table rows an atom: a shorter ring, table_ring; else the rule's)
        ring = small_ring(caps, bt, stages, cluster)[0]
        shorter = table_ring(ring, layout)
        prefetch = shorter if shorter != ring else 0
    pf, blocks = small_ring(caps, bt, stages, cluster, occupancy, prefetch)
    d = layout.decode
    reasons = [
        f"wgmma m64nNk16 {act} declared ({caps.target.arch}): A (weights) from registers, B (activations) K-major in "
        "128-byte-swizzled shared memory",
        f"path {PATH}, small-M form: one warpgroup per block owns one 64-channel slab; "
        + (f"every one of the M={m} tokens in one m64n{bt}k16 per k16 step" if m <= bt else
           f"{math.ceil(m / bt)} token tiles of {bt} (m64n{bt}k16 per k16 step)")
        + f"; each warp decodes its 16 channels ({d.kind}{d.bits}, the stream kernel's prepared weights; "
        f"{_load_words(layout)}) {pf} atoms ahead",
        f"{stages} {_copy_words(tma)} activation stages of {bt} x 64 ({smem_bytes(bt, stages) // 1024} KiB); {split_why}; "
        "split-K partials added by the last block in a fixed order",
    ]
    if fit_why:
        reasons.append(fit_why)
    if cluster:
        reasons.append(
            f"cluster {cluster} (cluster_multicast declared): the blocks of {cluster} adjacent slabs form a thread-block "
            f"cluster; block r copies the stages s with s % {cluster} == r by one multicast tensor copy into all "
            f"{cluster} blocks' slots (each activation stage leaves L2 once per cluster instead of once per block); a "
            "slot is refilled once every block has released it (an mbarrier arrival per warp on the copying block); a "
            "fifth warp issues the copies (160 threads), so no consumer waits for a peer and no block-wide barrier "
            "runs per stage")
    if occupancy:
        reasons.append(
            f"occupancy {occupancy}: registers budgeted for {occupancy} blocks per SM ({65536 // (occupancy * 128)} a "
            f"thread) with {pf} weight atoms in flight; each stage waits for its own wgmmas (one set of decoded "
            f"weights live): a warpgroup's small wgmmas run one after another, so more warpgroups per SM "
            f"({sms * occupancy} slots for {math.ceil(m / bt) * (n // SMALL_BC) * splits} blocks) hide their latency")
    tiles = RegisterATiles(bt, SMALL_BC, BK, stages, 1, 5 if cluster else 4, 1, fold=fold, bulk=int(tma), cluster=cluster,
                           prefetch=prefetch, occupancy=occupancy)
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="wgmma",
        instruction=replace(form, shape=(64, bt, 16)), path=PATH, layout=layout, tiles=tiles, splits=splits,
        async_copy=True, smem_bytes=smem_bytes(bt, stages), reasons=tuple(reasons),
    )


def fold_group_atoms(lay) -> int:
    """k atoms per fold group: the scale / zero group in atoms (the smaller one), 0 for one group over all of K."""
    groups = [g // BK for g in (lay.scale_group, lay.zero_group) if g > 0]
    return min(groups) if groups else 0
