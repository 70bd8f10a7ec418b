"""Planning the register-A wgmma W4A8 kernel (``humming.core.families.register_a8.generator``; the default for M >= 128,
HUMMING_WGMMA_W4A8_RS=0 never): signed int4 weights of ``humming.core.families.register_a8.layout`` widened in registers to s8 or
e4m3 as the A operand of wgmma m64nNk32, the 8-bit activation codes the B operand in shared memory; groups of 128
or per-channel scales. ``TileConfig.bm`` is the token tile (128, or 256 in the wide form), ``bn`` the 128 channels,
``bk`` the 128 k of one stage (one group).

The wide form (256 tokens, producer warpgroup only) widens each weight fragment once for two m64n128k32 token halves:
the narrow form issues about twice the instructions of the W8A8 kernel per tile (Nsight Compute, H200, 8192x8192
M=4096: 300 M vs 145 M warp instructions, tensor pipe 35% vs 73% busy), the widening of every fragment being the
difference. Its weight codes and group scales arrive by bulk copy into the stage's slot with the activations, so no
register ring holds weights in flight."""
from __future__ import annotations

import os
from dataclasses import replace

from humming.core.common.wgmma import (
    STAGGER_ENV,
    count_from_env,
    declared_option,
    raster_from_env,
    require_wgmma,
    stagger_wanted,
    threshold_from_env,
)
from humming.core.families.register_a.planner import with_stsm
from humming.core.families.register_a8.layout import RS8_BK
from humming.core.families.wgmma_8bit.planner import wgmma_form
from humming.core.plan import Plan, TileConfig, pdl_wanted
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "wgmma-rs8"
FAST_ACCUM_ENV = "HUMMING_WGMMA_FAST_ACCUM"  # (humming.api reads it: WgmmaRs8Layout.fast_accum; the wide form's direct loop)
# int8 activations with per-channel scales: the wide form's wgmmas accumulate the int32 sums across every stage (exact;
# TileConfig.direct, humming.core.families.register_a8.direct) instead of promoting each stage's partial; "0": promoted
DIRECT_S8_ENV = "HUMMING_WGMMA_W4A8_RS_DIRECT"
DIRECT_S8_MAX_K = 65536  # |int32 sum| <= 16 x 8 x 128 x K: below 2^31 with a factor 2 to spare
ENV = "HUMMING_WGMMA_W4A8_RS"  # W4A8 (groups of 128 / per channel): default (and "1") from M >= 128; "0": never
# "1": the wide form (without stream-K or clusters) launched with PDL behind the activation quantizer (and HUMMING_PDL
# not 0). Off by default: measured slower at M=4096 (8192x8192 544.0 -> 560.9 us, 28672x8192 1926.6 -> 2098.1,
# docs/runs/2026-12-01f/call8) and no faster at M=1024; in balanced rounds (2026-12-02, docs/runs/2026-12-02/call4/ab4)
# neutral: 8192x8192 M1024 140.7 -> 138.5, M4096 561.5 -> 558.4; 28672x8192 M1024 477.8 -> 478.8, M4096 2017 -> 2046
PDL_RS8_ENV = "HUMMING_WGMMA_W4A8_RS_PDL"
# the wide form's staggered start: warpgroup 1 issues its first chain this many 64-token chains after warpgroup 0
# (TileConfig.stagger; 1 .. chains - 1 of the tile, the rest clamp to it); HUMMING_WGMMA_STAGGER=0 still turns it off
# Measured on the H200 (2026-12-02, scripts/ab_env.py, 8 rotated rounds, W4A8-FP8, median us, 1 / 2 / 3 chains):
# 8192x8192 M1024 136.6 / 136.6 / 139.5, M4096 556.2 / 546.3 / 557.8; 28672x8192 M1024 466.7 / 461.4 / 469.9, M4096
# 2030.7 / 2005.0 / 1943.2; 4096x14336 M1024 124.0 / 124.0 / 124.8, M4096 488.3 / 490.0 / 500.2: within the rounds'
# spread, 3 slower on four rows; 1 stays (docs/runs/2026-12-02/call1/ab1). Again (2026-12-02, 10 balanced rounds,
# unset / 2): 8192x8192 M4096 566.6 / 563.0, 28672x8192 M4096 1971.8 / 2050.2 (docs/runs/2026-12-02b/call2)
STAGGER_CHAINS_ENV = "HUMMING_WGMMA_W4A8_RS_STAGGER"
STAGGER_CHAINS = 1

# the wide form (256 tokens, no stream-K, clusters or PDL) with its weights widened by three converter warps of the
# producer warpgroup into this many shared-memory slots of A fragments (TileConfig.widened; 0: the consumers widen).
# Why it was tried: a synthetic loop of the wide form's shape (scripts/wgmma_ceiling.py, H200, 2026-12-02) holds 73%
# of the FP8 tensor peak with the widening in the consumer warps, 92% with the fragments loaded from shared memory,
# 81% with a third warpgroup widening besides. Off: the kernel is slower (2026-12-02, scripts/ab_env.py, 6 balanced
# rounds, W4A8-FP8, us, unset / 2 slots / 1 slot): 8192x8192 M1024 130.8 / 153.1 / 181.3, M4096 523.6 / 619.8 /
# 743.7; 28672x8192 M1024 447.9 / 522.0 / 636.4, M4096 1769.7 / 2177.1 / 2761.5 (docs/runs/2026-12-02b/call11; a
# first version with a FULL / EMPTY mbarrier pair of its own per slot, call6, as slow)
WIDENED_ENV = "HUMMING_WGMMA_W4A8_RS_WIDENED"
WIDENED_SLOTS = 0
A_SLOT_BYTES = 128 * RS8_BK  # one stage's widened fragments: 128 channels x 128 k, one byte each


def widened_slots() -> int:
    """HUMMING_WGMMA_W4A8_RS_WIDENED as the wide form's slots of widened fragments ("0": off; unset: WIDENED_SLOTS)."""
    if os.environ.get(WIDENED_ENV, "").strip() == "0":
        return 0
    return count_from_env(WIDENED_ENV, 2, "slots of widened weight fragments (0: widened by the consumers)") or WIDENED_SLOTS


# the wide form's producer thread, after its tile's last stage, prefetches into L2 the first STAGES stages' codes and
# scales of the block launched one wave later (TileConfig.l2next; "0": off): each tile's pipeline fill then reads the
# weights from L2. Measured on the H200 (2026-12-02, scripts/ablate.py l2next_rs8, 16 balanced rounds, W4A8-FP8, us,
# off -> on): M4096 8192x8192 534.7 -> 529.8, 28672x8192 1813.5 -> 1791.5, 4096x14336 482.9 -> 479.2; M2048
# 8192x8192 267.0 -> 264.6, 28672x8192 903.8 -> 894.8 (docs/runs/2026-12-02b/call18; call17: 542.1 -> 534.5, 1814.7
# -> 1799.2; with the activations' tiles too, or the tensor map's descriptor prefetched, no better)
L2NEXT_ENV = "HUMMING_WGMMA_W4A8_RS_L2NEXT"

BT, BC, BK = 128, 128, RS8_BK
MIN_M = 128
# Measured on the H200 (2026-11-30, third session) against the warp-specialised wgmma W4A8 kernel, W4A8-FP8:
# 8192x8192 M=128 73.2 us (WS 91.8), M=512 134.8 (172.6), M=4096 1067 (1312); 28672x8192 M=128 142.2 (174.5),
# M=512 457.9 (567.3), M=4096 3569 (4361); W4A8-INT8 alike. Faster at every M measured from one 128-token tile.
DEFAULT_MIN_M = MIN_M
MIN_STAGES, MAX_STAGES = 4, 6
# stages of weight words loaded ahead per lane in the narrow form (register ring of PF + 1): one block per SM, so the
# ring is all the weight bytes in flight (8 KB a stage). Measured on the H200 (2026-12-01, scripts/ab_env.py W4A8-FP8
# g128 native, median us, PF 2 / 4 / 6): 28672x8192 M128 95.8 / 87.7 / 86.0, 8192x8192 M128 46.8 / 42.0 / 40.4, M256
# 49.9 / 45.7 / 44.2, 4096x14336 M128 76.4 / 67.8 / 65.1, M512 84.8 / 77.3 / 74.6 (the wide form's rows: unchanged);
# 168 registers, no spills (PF 7 spills)
PF = 6
# HUMMING_WGMMA_W4A8_RS_PF=N: the narrow form's weight stages in flight per lane (TileConfig.prefetch; unset: PF)
NARROW_PF_ENV = "HUMMING_WGMMA_W4A8_RS_PF"


def narrow_prefetch() -> int:
    """HUMMING_WGMMA_W4A8_RS_PF as the narrow form's ring depth (0: unset, PF; 7 spills)."""
    return count_from_env(NARROW_PF_ENV, 6, "weight stages in flight per lane")
PRODUCER_ENV = "HUMMING_WGMMA_W4A8_RS_WS"  # "1": a producer warpgroup brings the activations in by TMA; "0": cp.async
# unset: the producer warpgroup where tma, mbarrier and setmaxnreg are declared. Measured on the H200 (2026-11-30,
# bench_quantized, W4A8-FP8): 8192x8192 M128 72.0 -> 61.8 us, M1024 264.4 -> 225.6, M4096 1064.2 -> 887.5; 28672x8192
# M128 139.4 -> 120.9, M1024 874.2 -> 735.4, M4096 3558.8 -> 2933.8 (W4A8-INT8 alike: 0.76-1.41x of cuBLAS fp16)
PRODUCER_DEFAULT = True
OUT_PAD = 8  # 16-bit values of padding per staging row
WIDE_BT = 256  # tokens per block of the wide form (two m64n128k32 halves per warpgroup and stage); fitted to M: 192
WIDE_FITTED_BT = 192  # the wide form's tile fitted to M where 3 chains of 64 tokens hold the tile's share of M
FIT_ENV = "HUMMING_WGMMA_RS_FIT_TILE"  # "0": the wide form keeps 256 (planner_wgmma_rs.FIT_ENV, shared)
W_BYTES, S_BYTES = BC * BK // 2, BC * 4  # one stage's int4 codes (two 64-channel slabs) and fp32 group scales
WIDE_ENV = "HUMMING_WGMMA_W4A8_RS_BT"  # "128" / "256": the token tile wherever it applies; unset: the rule below
# the wide form from 128 tokens (256 before the twenty-fifth session) where its blocks fill at least 3/4 of the SMs
# once (producer warpgroup declared), its tile fitted to M (128, 192 or 256 tokens). Measured on the H200 (2026-11-30,
# W4A8-FP8, us, narrow -> wide): 8192x8192 M256 61.1 -> 78.2 (64 blocks: narrow), M512 113.9 -> 83.2, M1024 225.8 ->
# 160.5, M4096 899.4 -> 632.2; 28672x8192 M256 215.7 -> 153.1, M512 381.7 -> 291.9, M1024 749.5 -> 525.2, M4096
# 2964.4 -> 2159.5 (before the staggered start and the batched epilogue loads); 2026-12-01 (scripts/ab_env.py, 6
# rounds, docs/runs/2026-12-01m/call8): 28672x8192 M128 85.4 -> 81.0 (128-token tiles), M192 160.1 -> 102.2 (192)
WIDE_MIN_M = 128
# HUMMING_WGMMA_W4A8_RS_WIDE_FROM=M0: the wide form from M0 tokens (1..256) wherever the producer warpgroup runs, also
# where its blocks fill fewer SMs (with HUMMING_WGMMA_W4A8_RS_STREAMK=132 measured there: 4096x14336 M192 66.3 (narrow)
# -> 40.8, 8192x8192 M128 41.0 -> 34.5 (the widened path: 33.1), both 2026-12-01); its tile fitted to M (128 tokens up
# to M 128: TileConfig.wide)
WIDE_FROM_ENV = "HUMMING_WGMMA_W4A8_RS_WIDE_FROM"


def wide_from() -> int:
    """HUMMING_WGMMA_W4A8_RS_WIDE_FROM as the smallest M of the wide form (0: unset, the rule of token_tile)."""
    return count_from_env(WIDE_FROM_ENV, WIDE_BT, "the smallest M of the wide form")
WIDE_MIN_FILL = 0.75  # wide blocks / SMs
QUARTER_WT = 64  # the other chain width: m64n64k32 token quarters (wide) / halves (narrow) into two partials
CHAIN_ENV = "HUMMING_WGMMA_W4A8_RS_CHAIN"  # "128" / "64": tokens per wgmma chain (both forms); unset: the defaults below
# 64 in both forms: measured on the H200 (2026-11-30, scripts/ab_env.py, W4A8-FP8, us, chain 128 -> 64): 8192x8192
# M256 (narrow) 57.6 -> 55.1, M1024 143.3 -> 139.8, M4096 633.5 -> 571.8; 28672x8192 M128 (narrow) 117.1 -> 113.0,
# M512 302.9 -> 281.8, M1024 544.7 -> 507.9, M4096 2059.7 -> 1944.7; 4096x14336 M4096 562.1 -> 534.2; W4A8-INT8
# 8192x8192 M4096 698.8 -> 591.9; never slower
WIDE_CHAIN = QUARTER_WT


NARROW_CHAIN = QUARTER_WT


RASTER_ENV = "HUMMING_WGMMA_W4A8_RS_RASTER"  # token tiles per rasterization group; "0": launch order; unset: RASTER
# 4: in launch order the blocks running at once cover every token tile, so the activations (33.5 MB at M 4096 x K 8192)
# do not stay in L2 and are read from DRAM once per wave (Nsight Compute: 305 MB per GEMM against 67 MB of inputs).
# Measured on the H200 (2026-11-30, scripts/ab_env.py, W4A8-FP8, us, 0 / 4 / 8): 8192x8192 M4096 569.5 / 550.6 /
# 564.6, M1024 140.9 / 141.2 / 141.3; 28672x8192 M4096 1924.5 / 1938.4 / 1920.5; 4096x14336 M4096 509.9 / 506.2 / 508.7.
# 8 since 2026-12-01 (the kernel with the 9-instruction widening; rotated rounds, 4 / 8, docs/runs/2026-12-01f/call12,
# call13): 8192x8192 M4096 552.7 / 546.6 and 571.0 / 558.1, 28672x8192 2068.7 / 1967.9 and 2057.1 / 2020.1,
# 4096x14336 502.4 / 497.7; at M=1024 (4 token tiles: the same schedule) within 1%. Groups of 8 token tiles read
# each weight tile from DRAM twice per GEMM at M=4096 instead of four times (67 MB less at 8192x8192).
RASTER = 8


STREAMK_ENV = "HUMMING_WGMMA_W4A8_RS_STREAMK"  # "0": never; a block count: stream-K wherever the wide form runs; unset:
# the rule of streamk_blocks
STREAMK_STAGING_TOKENS = 64  # the stream-K epilogue's staging tiles: token rows per pass (a quarter of the wide tile)
# stream-K by default where the wide tiles give each SM at least one and the last round of whole tiles is badly
# filled. Measured on the H200 (2026-12-01, scripts/ab_env.py, W4A8-FP8, us, without -> with stream-K over 132
# blocks): 8192x8192 M768 (192 tiles: 1.45 a SM, rounds 73% full) 130.0 -> 119.8, M1280 (2.42, 81%) 201.7 -> 193.3;
# 4096x14336 M1280 (1.21, 61%) 223.7 -> 170.6. At 85% full (28672x8192: 224 channel tiles on 132 SMs) mixed: M256
# (1.70) 129.6 -> 137.7, M384 249.8 -> 246.5, M512 (3.39) 254.6 -> 251.0, M768 (5.09) 404.8 -> 390.4: not by default.
# Slower where whole tiles fill the rounds: 28672x8192 M1280 (8.48, 94%) 657.1 -> 681.5; M4096 (97%) 8192x8192
# 590.4 -> 622.6, 28672x8192 2176.6 -> 2322.7, 4096x14336 517.5 -> 557.8 (even without the split: 128 persistent
# blocks on 1024 tiles 634.8: the persistent blocks cost ~6% there); 8192x8192 M512 (0.97 a SM) 68.3 -> 89.4.
# Again 2026-12-02 (8 balanced rounds, docs/runs/2026-12-02b/call14): M4096 8192x8192 554.2 -> 582.4, 28672x8192
# 1928.4 -> 2091.1; Nsight (call15, call16; 128 persistent blocks, whole tiles): 476.4 against 456.3 us, 3% more
# instructions, and its token-scale warp busy-polls for a free buffer (the top stall line: 1.26 M polls a GEMM)
STREAMK_MIN_TILES_PER_SM = 1.0
STREAMK_MAX_FILL = 0.84


CLUSTER_ENV = "HUMMING_WGMMA_W4A8_RS_CLUSTER"  # "2": the wide form in clusters of two blocks sharing each activation
# stage by multicast (off by default: not measured faster yet); "0"/unset: off
CLUSTER_DEFAULT = 0


def cluster_blocks(caps, n: int, bt: int, streamk: int) -> tuple[int, str]:
    """(blocks per cluster, why) of the wide form: CLUSTER_ENV, else CLUSTER_DEFAULT; 0 where the profile declares no
    multicast, the form is narrow, stream-K runs or the channel tiles do not pair up."""
    forced = os.environ.get(CLUSTER_ENV, "").strip()
    if forced not in ("", "0", "2"):
        raise ValueError(f"{CLUSTER_ENV}={forced!r}: expected 0 or 2")
    want = int(forced) if forced else CLUSTER_DEFAULT
    if not want or bt != WIDE_BT:
        return 0, ""
    if not caps.memory.cluster_multicast:
        return 0, f"no cluster: {caps.name} does not declare cluster_multicast"
    if streamk:
        return 0, "no cluster: stream-K runs"
    if (n // BC) % want:
        return 0, f"no cluster: {n // BC} channel tiles do not pair up"
    return want, (f"clusters of {want} blocks ({CLUSTER_ENV}): adjacent channel tiles of one token tile; block kt % 2 "
                  "copies stage kt's activations by one multicast tensor copy into both blocks' slots (one L2 read), "
                  "each slot refilled once every consumer warp of both blocks released it")


def wide_chain() -> int:
    """Tokens per wgmma chain of the wide form: BT (two halves, one partial: chain, wait, promote) or QUARTER_WT
    (four quarters, two partials: the next chain runs while the last one is promoted); HUMMING_WGMMA_W4A8_RS_CHAIN."""
    return _chain(WIDE_CHAIN)


def narrow_chain() -> int:
    """Tokens per wgmma chain of the narrow form: BT (one partial) or QUARTER_WT (two halves, two partials: the second
    half runs while the first is promoted); HUMMING_WGMMA_W4A8_RS_CHAIN."""
    return _chain(NARROW_CHAIN)


def _chain(default: int) -> int:
    forced = os.environ.get(CHAIN_ENV, "").strip()
    if not forced:
        return default
    if forced not in (str(BT), str(QUARTER_WT)):
        raise ValueError(f"{CHAIN_ENV}={forced!r}: expected {BT} or {QUARTER_WT}")
    return int(forced)


def min_m() -> int | None:
    """The smallest M this kernel takes: MIN_M with HUMMING_WGMMA_W4A8_RS=1, none with =0, else DEFAULT_MIN_M."""
    return threshold_from_env(ENV, MIN_M, DEFAULT_MIN_M)


def enabled() -> bool:
    return min_m() is not None


def smem_bytes(stages: int, tokens: int = BT, streamk: bool = False, wide: bool = False, widened: int = 0) -> int:
    """STAGES activation tiles (tokens x 128 B; the wide form (``wide``, or more than BT tokens) adds each stage's
    weight codes and scales, and the block's token scales) and 1 KiB of alignment; the staging tile reuses the
    activation tiles (stream-K: one staging tile per warpgroup, STREAMK_STAGING_TOKENS rows of its 64 channels, as the
    slots keep loading, and two buffers of token scales)."""
    wide = wide or tokens > BT
    if wide and streamk:
        return (stages * (tokens * BK + W_BYTES + S_BYTES) + 2 * STREAMK_STAGING_TOKENS * (BC // 2 + OUT_PAD) * 2
                + 2 * tokens * 4 + 1024)  # and two buffers of token scales
    if wide:  # the wide form (256 tokens, or fitted to M: 192 / 128): and the block's token scales (and the slots
        # of widened fragments, TileConfig.widened)
        return stages * (tokens * BK + W_BYTES + S_BYTES) + tokens * 4 + widened * A_SLOT_BYTES + 1024
    return stages * tokens * BK + 1024


def wide_tiles(m: int, n: int) -> int:
    """The wide form's tiles (blocks without stream-K) at M x N."""
    return -(-m // WIDE_BT) * (n // BC)


def stagger_chains(tile: int, chain: int) -> int:
    """How many chains warpgroup 1 of the wide form starts behind warpgroup 0 (TileConfig.stagger): STAGGER_CHAINS_ENV,
    else STAGGER_CHAINS, at most the tile's chains less one."""
    want = count_from_env(STAGGER_CHAINS_ENV, 3, "chains warpgroup 1 starts behind warpgroup 0") or STAGGER_CHAINS
    return max(1, min(want, tile // chain - 1))


def fits_wide(bt: int, chain: int, cluster: int) -> bool:
    """True where the wide form's tile is fitted to M: 256-token tiles in 64-token chains, no tile forced by WIDE_ENV,
    no clusters (written for 256)."""
    return bt == WIDE_BT and chain == QUARTER_WT and not cluster and not os.environ.get(WIDE_ENV, "").strip()


def planned_token_tile(m: int, producer: bool, n: int = 0, sms: int = 0) -> int:
    """The token tile plan_w4a8_wgmma_rs takes at M by default: token_tile's, the wide one fitted to M (the cluster
    taken as CLUSTER_ENV asks)."""
    bt = token_tile(m, producer, n, sms)
    cluster = os.environ.get(CLUSTER_ENV, "").strip() == "2"
    return fitted_wide_tile(m) if fits_wide(bt, wide_chain(), cluster) else bt


def fitted_wide_tile(m: int) -> int:
    """The wide form's token tile at M: as many tiles as 256 tokens need, each M / tiles rounded up to whole 64-token
    chains, never below 128 (M=300: two of 192; M=100: one of 128; planner_wgmma_rs.fitted_token_tile, whose FIT_ENV=0
    keeps 256)."""
    from humming.core.families.register_a.planner import fitted_token_tile

    return max(BT, fitted_token_tile(m, WIDE_BT, QUARTER_WT))


def _rounds(blocks: int, sms: int) -> int:
    return -(-blocks // sms)


def token_tile(m: int, producer: bool, n: int = 0, sms: int = 0) -> int:
    """WIDE_BT from WIDE_MIN_M tokens where the producer warpgroup runs and either ceil(m / 256) x n / 128 blocks fill
    WIDE_MIN_FILL of the SMs or the 128-token blocks would take more rounds of the SMs than the 256-token ones (n or
    sms 0: no such conditions), else BT; HUMMING_WGMMA_W4A8_RS_BT=128/256 forces one (256 only with the producer
    warpgroup). Measured on the H200 (2026-12-01, scripts/ab_env.py, W4A8-FP8, us, 128 -> 256 tokens): 4096x14336
    M768 (192 narrow blocks: two rounds; 96 wide: one) 164.6 -> 112.6; M512 (128 / 64 blocks: one round each) 85.1 ->
    109.1; 8192x8192 M256 (128 / 64) 50.7 -> 64.7."""
    forced = os.environ.get(WIDE_ENV, "").strip()
    if forced:
        if forced not in (str(BT), str(WIDE_BT)):
            raise ValueError(f"{WIDE_ENV}={forced!r}: expected {BT} or {WIDE_BT}")
        return WIDE_BT if forced == str(WIDE_BT) and producer else BT
    if wide_from() and producer and m >= wide_from():
        return WIDE_BT
    wide, narrow = wide_tiles(m, n), -(-m // BT) * (n // BC)
    fills = not (n and sms) or wide >= WIDE_MIN_FILL * sms or _rounds(narrow, sms) > _rounds(wide, sms)
    return WIDE_BT if producer and m >= WIDE_MIN_M and fills else BT


def streamk_blocks(caps, m: int, n: int) -> tuple[int, str]:
    """(persistent blocks, why) of the wide form's stream-K at M x N: HUMMING_WGMMA_W4A8_RS_STREAMK=0 never, =B
    always with B blocks; unset: one block per SM from STREAMK_MIN_TILES_PER_SM wide tiles per SM where the rounds of
    whole tiles are less than STREAMK_MAX_FILL full (0: no stream-K)."""
    forced = os.environ.get(STREAMK_ENV, "").strip()
    sms = caps.limits.sms or 0
    tiles = wide_tiles(m, n)
    if forced:
        if not forced.isdigit() or not 0 <= int(forced) <= 65535:
            raise ValueError(f"{STREAMK_ENV}={forced!r}: expected 0 (off) or a block count up to 65535")
        if forced == "0":
            return 0, f"no stream-K ({STREAMK_ENV}=0)"
        return int(forced), f"stream-K over {int(forced)} blocks ({STREAMK_ENV})"
    if not sms:
        return 0, "no stream-K: the profile declares no SM count"
    per_sm = tiles / sms
    fill = per_sm / _rounds(tiles, sms)
    words = f"{tiles} tiles of {WIDE_BT} tokens on {sms} SMs: {per_sm:.2f} a SM, rounds of whole tiles {fill:.0%} full"
    if per_sm < STREAMK_MIN_TILES_PER_SM or fill >= STREAMK_MAX_FILL:
        return 0, (f"no stream-K ({words}; it pays from {STREAMK_MIN_TILES_PER_SM:g} a SM in rounds below "
                   f"{STREAMK_MAX_FILL:.0%} full)")
    return sms, f"stream-K by default ({words}; {STREAMK_ENV}=0: off)"


def _producer_wanted(caps, producer: bool | None) -> bool:
    return declared_option(bool(caps.memory.tma and caps.memory.mbarrier and caps.memory.setmaxnreg), producer,
                           PRODUCER_ENV, PRODUCER_DEFAULT,
                           f"{caps.name} does not declare tma, mbarrier and setmaxnreg (the producer warpgroup)")


def plan_w4a8_wgmma_rs(caps, layout, m: int, act: str, scheme: str = "", producer: bool | None = None,
                       tokens: int | None = None, streamk: int | None = None) -> Plan:
    """Plan the register-A wgmma W4A8 kernel for a ``WgmmaRs8Layout``, or UnsupportedOnDevice / ShapeError.
    ``producer``: a producer warpgroup issues TMA copies of the activations and the consumers meet only at mbarriers
    (None: HUMMING_WGMMA_W4A8_RS_WS, else PRODUCER_DEFAULT, where tma/mbarrier/setmaxnreg are declared).
    ``tokens``: the token tile, 128 or 256 (the wide form, producer only); None: ``token_tile``. ``streamk`` (the
    wide form): that many persistent blocks take the tiles in whole waves, then split the left-over tiles' k atoms
    evenly (humming.core.families.register_a8.streamk); 0: one block per tile; None: ``streamk_blocks``."""
    a_type = layout.a_type
    form = wgmma_form(caps, a_type)
    acc = "s32" if a_type == "s8" else "f32"
    require_wgmma(caps, m, form, f"m64nNk32 {a_type} x {a_type} -> {acc}", "the 8-bit mma.sync kernel runs W4A8 there",
                  "register-A wgmma W4A8 pipeline")
    n, k, group = layout.n, layout.k, layout.group
    if n % BC or k % BK:
        raise ShapeError(f"N={n} must be a multiple of {BC} and K={k} of {BK} for the register-A wgmma W4A8 kernel")
    if group not in (128, k):
        raise UnsupportedOnDevice(f"{scheme}: group {group}: the register-A wgmma W4A8 kernel takes groups of 128 or "
                                  "per-channel scales")
    if BT not in form.n_values:
        raise UnsupportedOnDevice(f"{caps.name} declares no wgmma m64n{BT}k32 {a_type}")
    use_producer = _producer_wanted(caps, producer)
    bt = token_tile(m, use_producer, n, caps.limits.sms) if tokens is None else tokens
    if bt not in (BT, WIDE_BT):
        raise ValueError(f"the register-A wgmma W4A8 kernel takes token tiles of {BT} or {WIDE_BT}, not {bt}")
    if bt == WIDE_BT and not use_producer:
        raise UnsupportedOnDevice(f"the wide register-A W4A8 form ({WIDE_BT} tokens) needs the producer warpgroup "
                                  f"(tma, mbarrier, setmaxnreg declared; {PRODUCER_ENV} not 0)")
    if streamk is None:
        blocks, streamk_why = streamk_blocks(caps, m, n) if bt == WIDE_BT else (0, "")
    else:
        blocks, streamk_why = streamk, (f"stream-K over {streamk} blocks (requested)" if streamk else "")
    if blocks and bt != WIDE_BT:
        raise UnsupportedOnDevice(f"stream-K is written for the wide register-A W4A8 form ({WIDE_BT} tokens)")
    if not 0 <= blocks <= 65535:
        raise ShapeError(f"stream-K takes 1..65535 persistent blocks, not {blocks}")
    tiles, katoms = wide_tiles(m, n), k // BK
    if blocks > tiles * katoms:  # every block gets a segment (the kernel's staggered start waits for one)
        streamk_why += f"; {tiles * katoms} blocks: as many as the tiles' k atoms"
        blocks = tiles * katoms
    chain = wide_chain() if bt == WIDE_BT else narrow_chain()
    cluster, cluster_why = cluster_blocks(caps, n, bt, blocks)
    tile = bt  # the wide form's tile fitted to M in whole 64-token chains (not with forced tiles or clusters)
    if fits_wide(bt, chain, cluster):
        tile = fitted_wide_tile(m)
    limit = caps.limits.smem_per_block_kb * 1024
    wide = bt == WIDE_BT
    pdl = (bt == WIDE_BT and not blocks and not cluster and os.environ.get(PDL_RS8_ENV, "") == "1" and pdl_wanted()
           and bool(caps.memory.griddepcontrol))
    widened = widened_slots() if wide and tile == WIDE_BT and not blocks and not cluster and not pdl else 0
    l2next = int(wide and not blocks and not cluster and not pdl and not widened
                 and os.environ.get(L2NEXT_ENV, "").strip() != "0")
    fast = bool(getattr(layout, "fast_accum", False)) and a_type == "e4m3"
    exact = int32_sums_wanted(a_type, group, k)
    direct_why = ""
    if fast and group == 128:
        direct_why = ("groups of 128 need an fp32 step a stage either way (the running sums rescaled by the ratio of "
                      "consecutive group scales instead of a promotion measured 0-3% faster at ~5x the error: "
                      "docs/performance.md, twenty-ninth session)")
    elif fast or exact:
        direct_why = _direct_refusal(wide, tile, blocks, cluster, widened, pdl)
    direct = int((fast or exact) and not direct_why)
    if direct:  # chains accumulating straight into the block's accumulators: 128 tokens, 64 in fitted wide tiles
        chain = QUARTER_WT if wide and tile != WIDE_BT else BT
    stages = next((s for s in range(MAX_STAGES, MIN_STAGES - 1, -1)
                   if smem_bytes(s, tile, bool(blocks), wide, widened) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no register-A wgmma W4A8 tile with {MIN_STAGES} stages fits {caps.name}'s "
                                  f"{limit} B of shared memory")
    if a_type == "s8":
        src = "int4 -> s8 (16 x code; the scales carry 1/16)"
    elif getattr(layout, "widen", "linear") == "prmt":
        src = ("int4 -> e4m3 by tables (HUMMING_W4A8_WIDEN=prmt): codes stored with bits 2 and 3 swapped, two "
               "byte-permute lookups and an xor per 4 codes")
    else:
        from humming.core.common.layout import LINEAR_WIDENING_REASON

        src = LINEAR_WIDENING_REASON
    promotion = ("group 128" if group == 128 else "per-channel scales") + ": each stage's 128-deep partial is waited " \
        "and added into fp32 registers times the scale of the thread's two channels"
    if chain not in form.n_values:
        raise UnsupportedOnDevice(f"{caps.name} declares no wgmma m64n{chain}k32 {a_type} ({CHAIN_ENV})")
    piece = "half" if bt // chain == 2 else "quarter"
    fit_words = (f"; {tile} tokens instead of {WIDE_BT}: M={m} in {-(-m // tile)} tile(s) of whole {QUARTER_WT}-token "
                 f"chains ({FIT_ENV}=0 or {WIDE_ENV}: {WIDE_BT})" if tile != bt else "")
    chains_words = f"{tile // chain} m64n{chain}k32 chain{'s' if tile > chain else ''} a stage"
    overlap = ("; the next stage's fragment widened while this stage's wgmmas run" if wide else "")
    if direct and exact:
        promotion = ("per-channel scales with int8 activations: the wgmmas accumulate the int32 sums across every "
                     f"stage in {chains_words} (exact: |sum| < 2^31 for K <= {DIRECT_S8_MAX_K}), converted to fp32 "
                     f"once after the loop; no partials, no promotion ({DIRECT_S8_ENV}=0: promoted per stage)"
                     + overlap)
    elif direct:
        promotion = (f"fast accumulation ({FAST_ACCUM_ENV}=1): the wgmmas accumulate straight into the fp32 "
                     f"accumulators across every stage in {chains_words} (no partials, no promotion; ~2x the promoted "
                     "form's error at K=4096, the tensor core's own accumulation); per-channel scales in the epilogue"
                     + overlap)
    elif chain == QUARTER_WT:
        promotion += (f", once per token {piece} of {chain}: {piece} c + 1's chain is issued before {piece} c's is "
                      f"waited for (wait_group 1) and promoted, into two partials ({CHAIN_ENV}={BT}: one partial, "
                      "chain, wait, promote)")
    if bt == WIDE_BT:
        chains = ("2 halves x m64n128k32" if chain == BT else f"{tile // chain} quarters x m64n64k32 (two partials)")
        if chain == BT and not direct:
            promotion += ", once per token half (the partial holds 128 tokens)"
        reasons = (
            f"wgmma m64nNk32 {a_type} declared ({caps.target.arch}): A (weights) from registers, B (activation "
            "codes) K-major in 128-byte-swizzled shared memory",
            f"path {PATH} (M >= {DEFAULT_MIN_M}; {ENV}=0 switches it off), wide form (M >= {WIDE_MIN_M} and blocks for "
            f">= {WIDE_MIN_FILL:.0%} of the SMs or fewer rounds of them than of 128-token blocks; {WIDE_ENV}=128 "
            "switches it off): C^T = W x^T per tile; each lane reads its int4 codes of a 128-deep stage from "
            f"the stage's slot with two 16-byte shared loads and widens them exactly ({src}) into the m16n8k32 A "
            f"fragment of its warp once for all {tile // chain} token {'halves' if chain == BT else 'quarters'}",
            promotion,
            f"tile {BC} channels x {tile} tokens x {BK} k: 2 warpgroups x {chains}, {stages} slots "
            f"of activations, weight codes and group scales, {smem_bytes(stages, tile, bool(blocks), True) // 1024} KiB of "
            f"{limit // 1024} KiB shared memory{fit_words}",
            _streamk_words(m, n, k, blocks, streamk_why) if blocks else
            "epilogue: per-token activation scale (the block's, staged in shared memory by a producer warp during "
            "the main loop), bias per channel, the tile transposed through shared memory, 16-byte stores of whole "
            "token rows; no split-K" + (f" ({streamk_why})" if streamk_why else ""),
            f"a producer warpgroup (setmaxnreg 40; the consumers take 232) issues per stage one TMA tensor copy of "
            f"the activations ({tile} rows), bulk copies of the two slabs' codes and the stage's scales into the "
            "slot the consumers released (EMPTY mbarriers); the consumer warpgroups meet only at the FULL mbarriers",
        )
        if stagger_wanted():
            behind = stagger_chains(tile, chain)
            reasons += (f"staggered start ({STAGGER_ENV}=0: off; {STAGGER_CHAINS_ENV}=N: N chains): warpgroup 1 "
                        f"issues its first wgmmas {behind} chain{'s' if behind > 1 else ''} after warpgroup 0's, so "
                        "each promotes while the other's wgmmas run",)
    else:
        reasons = (
            f"wgmma m64nNk32 {a_type} declared ({caps.target.arch}): A (weights) from registers, B (activation codes) "
            "K-major in 128-byte-swizzled shared memory",
            f"path {PATH} (M >= {DEFAULT_MIN_M}; {ENV}=0 switches it off): C^T = W x^T per tile; each lane loads its int4 codes of a 128-deep stage with two "
            f"16-byte loads (humming.core.families.register_a8.layout), {narrow_prefetch() or PF} stages ahead"
            + (f" ({NARROW_PF_ENV})" if narrow_prefetch() else "") + f", and widens them exactly ({src}) into "
            "the m16n8k32 A fragment of its warp; no shared-memory traffic for the weights",
            promotion,
            f"tile {BC} channels x {BT} tokens x {BK} k: 2 warpgroups x "
            f"{'m64n128k32' if chain == BT else '2 halves x m64n64k32 (two partials)'}, {stages} {'TMA' if use_producer else 'cp.async'} activation slots "
            f"({stages - 1} in flight), {smem_bytes(stages) // 1024} KiB of {limit // 1024} KiB shared memory",
            "epilogue: per-token activation scale, bias per channel, the tile transposed through shared memory, 16-byte "
            "stores of whole token rows; no split-K",
        )
        if use_producer:
            reasons += (f"{PRODUCER_ENV}: a producer warpgroup (setmaxnreg 40; the consumers take 232) issues one TMA "
                        "tensor copy per activation stage into the slot the consumers released (EMPTY mbarriers); the "
                        "two consumer warpgroups meet only at the FULL mbarriers, so one promotes while the other's "
                        "wgmmas run",)
    if cluster_why:
        reasons += (cluster_why,)
    if direct_why and fast:
        reasons += (f"fast accumulation ({FAST_ACCUM_ENV}=1) asked for, not planned: {direct_why}; each stage's "
                    "partial is promoted",)
    raster = raster_from_env(RASTER_ENV, RASTER)
    if raster:
        reasons += (f"blocks rasterized in groups of {raster} token tiles ({RASTER_ENV}=0: launch order): a group's "
                    "blocks take its token tiles for one channel tile after another, so the blocks running together "
                    f"share {raster} activation tiles in L2 instead of all of them",)
    if l2next:
        reasons += (f"next wave's weights into L2 ({L2NEXT_ENV}=0: off): once the producer has issued its tile's last "
                    f"stage it prefetches the first {stages} stages' codes and scales of the block launched one wave "
                    "later (block id + the SM count, same rasterization), so that block's pipeline fill reads L2",)
    if widened:
        reasons += (f"weights widened by three converter warps of the producer warpgroup ({WIDENED_ENV}=N: N slots; "
                    f"0: in the consumers): each stage's fragments into one of {widened} shared-memory slots "
                    f"({A_SLOT_BYTES // 1024} KiB each), which the consumers load with four 16-byte shared loads a lane; "
                    "their only ALU work next to the register-A wgmmas is the promotion",)
    if pdl:
        reasons += (f"programmatic dependent launch ({PDL_RS8_ENV}=1; griddepcontrol declared): launched with the "
                    "PDL attribute behind the activation quantizer (which lets its dependents start), the producer "
                    "copies the first stages' codes and scales while the quantizer finishes, then waits for it "
                    "(griddepcontrol.wait) before copying activations or reading token scales",)
    plan = Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="wgmma",
        instruction=replace(form, shape=(64, chain, 32)), path=PATH, layout=layout,
        tiles=TileConfig(tile, BC, BK, stages, 1, 12 if use_producer else 8, 1, bulk=2 if use_producer else 0,
                         stagger=stagger_chains(tile, chain) if bt == WIDE_BT and stagger_wanted() else 0,
                         raster=raster, streamk=blocks,
                         prefetch=0 if bt == WIDE_BT else narrow_prefetch(),
                         cluster=cluster, wide=int(wide and tile == BT), widened=widened, l2next=l2next,
                         direct=direct),
        splits=1, async_copy=True, smem_bytes=smem_bytes(stages, tile, bool(blocks), wide, widened), reasons=reasons,
        pdl=pdl,
    )
    # the stmatrix staging (HUMMING_WGMMA_RS_STSM=0: off) of the narrow and wide forms; the stream-K form keeps its stores
    return plan if blocks else with_stsm(caps, plan)



def int32_sums_wanted(a_type: str, group: int, k: int) -> bool:
    """The kernel accumulates exact int32 sums across stages (TileConfig.direct): int8 activations with per-channel
    scales, K within the int32 bound, DIRECT_S8_ENV not "0" (the plan's other conditions aside: _direct_refusal)."""
    return (a_type == "s8" and group != 128 and k <= DIRECT_S8_MAX_K
            and os.environ.get(DIRECT_S8_ENV, "").strip() != "0")


def _direct_refusal(wide: bool, tile: int, blocks: int, cluster: int, widened: int, pdl: bool) -> str:
    """Why the direct-accumulation loops (TileConfig.direct) do not apply to this plan ("" where they do)."""
    for on, what in ((blocks, "stream-K"), (cluster, "clusters"), (widened, "converter warps"), (pdl, "PDL")):
        if on:
            return f"it is written for the plain grid, without {what}"
    return ""


def _streamk_words(m: int, n: int, k: int, blocks: int, why: str) -> str:
    waves, left = divmod(wide_tiles(m, n), blocks)
    return (f"{why}: {blocks} persistent blocks take {waves} wave(s) of whole tiles, then the {left * (k // BK)} k "
            f"atoms of the {left} tiles left split evenly ({left * (k // BK) / blocks:.1f} a block, each block's run "
            "within at most two tiles); the producer copies every segment's stages without a break; a whole tile's "
            f"epilogue (per-token activation scale staged per segment in shared memory by a producer warp, bias per "
            f"channel) goes through a staging "
            f"tile per warpgroup ({STREAMK_STAGING_TOKENS} token rows a pass), 16-byte stores of whole token rows; a "
            "split tile's fp32 partials are added by the last of its blocks, in block order")
