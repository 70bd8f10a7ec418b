"""Planning the register-A wgmma W4A8 kernel (``humming.core.families.register_a8.generator``; the default for M >= 128,
the tuning knob register_a8.min_m): signed int4 weights of ``humming.core.families.register_a8.layout`` widened in registers to s8 or
e4m3 as the A operand of wgmma m64nNk32, the 8-bit activation codes the B operand in shared memory; groups of 128
or per-channel scales. ``RegisterA8Tiles.bm`` is the token tile (128, or 256 in the wide form), ``bn`` the 128 channels,
``bk`` the 128 k of one stage (one group).

The wide form (256 tokens, producer warpgroup only) widens each weight fragment once for two m64n128k32 token halves:
the narrow form issues about twice the instructions of the W8A8 kernel per tile (Nsight Compute, H200, 8192x8192
M=4096: 300 M vs 145 M warp instructions, tensor pipe 35% vs 73% busy), the widening of every fragment being the
difference. Its weight codes and group scales arrive by bulk copy into the stage's slot with the activations, so no
register ring holds weights in flight."""
from __future__ import annotations

from dataclasses import replace

from humming.core.common.wgmma import STAGGER_KNOB, declared_option, require_wgmma, stagger_wanted
from humming.core.families.register_a.planner import with_stsm
from humming.core.families.register_a8.layout import RS8_BK
from humming.core.families.register_a8.tiles import RegisterA8Tiles
from humming.core.families.wgmma_8bit.planner import wgmma_form
from humming.core.plan import Plan, pdl_wanted
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "wgmma-rs8"
FAST_ACCUM_WORDS = "GemmOptions.fast_accum"  # the call option behind WgmmaRs8Layout.fast_accum (the direct loop)
# int8 activations with per-channel scales: the wide form's wgmmas accumulate the int32 sums across every stage (exact;
# RegisterA8Tiles.direct, humming.core.families.register_a8.direct) instead of promoting each stage's partial; false: promoted
DIRECT_S8_KNOB = "register_a8.direct_int8"
DIRECT_S8_MAX_K = 65536  # |int32 sum| <= 16 x 8 x 128 x K: below 2^31 with a factor 2 to spare
MIN_M_KNOB = "register_a8.min_m"  # W4A8 (groups of 128 / per channel): from M >= 128 by default; null: never
# true: the wide form (without stream-K or clusters) launched with PDL behind the activation quantizer (and launch.pdl
# on). Off by default: measured slower at M=4096 (8192x8192 544.0 -> 560.9 us, 28672x8192 1926.6 -> 2098.1,
# and no faster at M=1024; in balanced rounds neutral: 8192x8192 M1024 140.7 -> 138.5, M4096 561.5 -> 558.4; 28672x8192 M1024 477.8 -> 478.8, M4096 2017 -> 2046
PDL_RS8_KNOB = "register_a8.pdl"
# the wide form's staggered start: warpgroup 1 issues its first chain this many 64-token chains after warpgroup 0
# (RegisterA8Tiles.stagger; 1 .. chains - 1 of the tile, the rest clamp to it); wgmma.stagger false still turns it off
# Measured on the H200 (scripts/ab_knobs.py, 8 rotated rounds, W4A8-FP8, median us, 1 / 2 / 3 chains):
# 8192x8192 M1024 136.6 / 136.6 / 139.5, M4096 556.2 / 546.3 / 557.8; 28672x8192 M1024 466.7 / 461.4 / 469.9, M4096
# 2030.7 / 2005.0 / 1943.2; 4096x14336 M1024 124.0 / 124.0 / 124.8, M4096 488.3 / 490.0 / 500.2: within the rounds'
# spread, 3 slower on four rows; 1 stays. Again (10 balanced rounds,
# unset / 2): 8192x8192 M4096 566.6 / 563.0, 28672x8192 M4096 1971.8 / 2050.2
STAGGER_CHAINS_KNOB = "register_a8.stagger_chains"

# the wide form (256 tokens, no stream-K, clusters or PDL) with its weights widened by three converter warps of the
# producer warpgroup into this many shared-memory slots of A fragments (RegisterA8Tiles.widened; 0: the consumers widen).
# Why it was tried: a synthetic loop of the wide form's shape (H200) holds 73%
# of the FP8 tensor peak with the widening in the consumer warps, 92% with the fragments loaded from shared memory,
# 81% with a third warpgroup widening besides. Off: the kernel is slower (scripts/ab_knobs.py, 6 balanced
# rounds, W4A8-FP8, us, unset / 2 slots / 1 slot): 8192x8192 M1024 130.8 / 153.1 / 181.3, M4096 523.6 / 619.8 /
# 743.7; 28672x8192 M1024 447.9 / 522.0 / 636.4, M4096 1769.7 / 2177.1 / 2761.5; a
# first version with a FULL / EMPTY mbarrier pair of its own per slot, call6, as slow)
WIDENED_KNOB = "register_a8.widened_slots"
A_SLOT_BYTES = 128 * RS8_BK  # one stage's widened fragments: 128 channels x 128 k, one byte each


def widened_slots(caps=None) -> int:
    """The wide form's slots of widened fragments (the tuning knob register_a8.widened_slots; 0: the consumers)."""
    return knobs.value(WIDENED_KNOB, caps)


# the wide form's producer thread, after its tile's last stage, prefetches into L2 the first STAGES stages' codes and
# scales of the block launched one wave later (RegisterA8Tiles.l2next; false: off): each tile's pipeline fill then reads the
# weights from L2. Measured on the H200 (scripts/ablate.py l2next_rs8, 16 balanced rounds, W4A8-FP8, us,
# off -> on): M4096 8192x8192 534.7 -> 529.8, 28672x8192 1813.5 -> 1791.5, 4096x14336 482.9 -> 479.2; M2048
# 8192x8192 267.0 -> 264.6, 28672x8192 903.8 -> 894.8; call17: 542.1 -> 534.5, 1814.7
# -> 1799.2; with the activations' tiles too, or the tensor map's descriptor prefetched, no better)
L2NEXT_KNOB = "register_a8.l2next"

BT, BC, BK = 128, 128, RS8_BK
MIN_M = 128
# Measured on the H200 (against the warp-specialised wgmma W4A8 kernel, W4A8-FP8:
# 8192x8192 M=128 73.2 us (WS 91.8), M=512 134.8 (172.6), M=4096 1067 (1312); 28672x8192 M=128 142.2 (174.5),
# M=512 457.9 (567.3), M=4096 3569 (4361); W4A8-INT8 alike. Faster at every M measured from one 128-token tile.
DEFAULT_MIN_M = MIN_M
MIN_STAGES, MAX_STAGES = 4, 6
# stages of weight words loaded ahead per lane in the narrow form (register ring of PF + 1): one block per SM, so the
# ring is all the weight bytes in flight (8 KB a stage). Measured on the H200 (scripts/ab_knobs.py W4A8-FP8
# g128 native, median us, PF 2 / 4 / 6): 28672x8192 M128 95.8 / 87.7 / 86.0, 8192x8192 M128 46.8 / 42.0 / 40.4, M256
# 49.9 / 45.7 / 44.2, 4096x14336 M128 76.4 / 67.8 / 65.1, M512 84.8 / 77.3 / 74.6 (the wide form's rows: unchanged);
# 168 registers, no spills (PF 7 spills)
PF = 6
# the tuning knob register_a8.narrow_prefetch: the narrow form's weight stages in flight per lane (RegisterA8Tiles.prefetch;
# null: PF)
NARROW_PF_KNOB = "register_a8.narrow_prefetch"


def narrow_prefetch(caps=None) -> int:
    """The tuning knob register_a8.narrow_prefetch as the narrow form's ring depth (0: not set, PF; 7 spills)."""
    return knobs.value(NARROW_PF_KNOB, caps) or 0
PRODUCER_KNOB = "register_a8.producer"  # a producer warpgroup brings the activations in by TMA where tma, mbarrier and
# setmaxnreg are declared (false: cp.async). Measured on the H200 (bench_quantized, W4A8-FP8): 8192x8192 M128 72.0 -> 61.8 us, M1024 264.4 -> 225.6, M4096 1064.2 -> 887.5; 28672x8192
# M128 139.4 -> 120.9, M1024 874.2 -> 735.4, M4096 3558.8 -> 2933.8 (W4A8-INT8 alike: 0.76-1.41x of cuBLAS fp16)
OUT_PAD = 8  # 16-bit values of padding per staging row
WIDE_BT = 256  # tokens per block of the wide form (two m64n128k32 halves per warpgroup and stage); fitted to M: 192
WIDE_FITTED_BT = 192  # the wide form's tile fitted to M where 3 chains of 64 tokens hold the tile's share of M
FIT_KNOB = "wgmma.fit_token_tile"  # false: the wide form keeps 256 (shared with the register-A W4A16 forms)
W_BYTES, S_BYTES = BC * BK // 2, BC * 4  # one stage's int4 codes (two 64-channel slabs) and fp32 group scales
WIDE_KNOB = "register_a8.token_tile"  # 128 / 256: the token tile wherever it applies; null: the rule below
# the wide form from 128 tokens (256 before the where its blocks fill at least 3/4 of the SMs
# once (producer warpgroup declared), its tile fitted to M (128, 192 or 256 tokens). Measured on the H200 (W4A8-FP8, us, narrow -> wide): 8192x8192 M256 61.1 -> 78.2 (64 blocks: narrow), M512 113.9 -> 83.2, M1024 225.8 ->
# 160.5, M4096 899.4 -> 632.2; 28672x8192 M256 215.7 -> 153.1, M512 381.7 -> 291.9, M1024 749.5 -> 525.2, M4096
# 2964.4 -> 2159.5 (before the staggered start and the batched epilogue loads); (scripts/ab_knobs.py, 6
# rounds,: 28672x8192 M128 85.4 -> 81.0 (128-token tiles), M192 160.1 -> 102.2 (192)
WIDE_MIN_M = 128
# the tuning knob register_a8.wide_from M0: the wide form from M0 tokens (1..256) wherever the producer warpgroup runs,
# also where its blocks fill fewer SMs (with register_a8.streamk 132 measured there: 4096x14336 M192 66.3 (narrow)
# -> 40.8, 8192x8192 M128 41.0 -> 34.5 (the widened path: 33.1), both); its tile fitted to M (128 tokens up
# to M 128: RegisterA8Tiles.wide)
WIDE_FROM_KNOB = "register_a8.wide_from"


def wide_from(caps=None) -> int:
    """The tuning knob register_a8.wide_from as the smallest M of the wide form (0: not set, the rule of token_tile)."""
    return knobs.value(WIDE_FROM_KNOB, caps) or 0
WIDE_MIN_FILL = 0.75  # wide blocks / SMs
QUARTER_WT = 64  # the other chain width: m64n64k32 token quarters (wide) / halves (narrow) into two partials
CHAIN_KNOB = "register_a8.chain"  # 128 / 64: tokens per wgmma chain (both forms); null: the defaults below
# 64 in both forms: measured on the H200 (scripts/ab_knobs.py, W4A8-FP8, us, chain 128 -> 64): 8192x8192
# M256 (narrow) 57.6 -> 55.1, M1024 143.3 -> 139.8, M4096 633.5 -> 571.8; 28672x8192 M128 (narrow) 117.1 -> 113.0,
# M512 302.9 -> 281.8, M1024 544.7 -> 507.9, M4096 2059.7 -> 1944.7; 4096x14336 M4096 562.1 -> 534.2; W4A8-INT8
# 8192x8192 M4096 698.8 -> 591.9; never slower
WIDE_CHAIN = QUARTER_WT


NARROW_CHAIN = QUARTER_WT


RASTER_KNOB = "register_a8.raster"  # token tiles per rasterization group; 0: launch order
# 4: in launch order the blocks running at once cover every token tile, so the activations (33.5 MB at M 4096 x K 8192)
# do not stay in L2 and are read from DRAM once per wave (Nsight Compute: 305 MB per GEMM against 67 MB of inputs).
# Measured on the H200 (scripts/ab_knobs.py, W4A8-FP8, us, 0 / 4 / 8): 8192x8192 M4096 569.5 / 550.6 /
# 564.6, M1024 140.9 / 141.2 / 141.3; 28672x8192 M4096 1924.5 / 1938.4 / 1920.5; 4096x14336 M4096 509.9 / 506.2 / 508.7.
# 8 since (the kernel with the 9-instruction widening; rotated rounds, 4 / 8,,
# call13): 8192x8192 M4096 552.7 / 546.6 and 571.0 / 558.1, 28672x8192 2068.7 / 1967.9 and 2057.1 / 2020.1,
# 4096x14336 502.4 / 497.7; at M=1024 (4 token tiles: the same schedule) within 1%. Groups of 8 token tiles read
# each weight tile from DRAM twice per GEMM at M=4096 instead of four times (67 MB less at 8192x8192).


STREAMK_KNOB = "register_a8.streamk"  # 0: never; a block count: stream-K wherever the wide form runs; null: the rule
# of streamk_blocks
STREAMK_STAGING_TOKENS = 64  # the stream-K epilogue's staging tiles: token rows per pass (a quarter of the wide tile)
# stream-K by default where the wide tiles give each SM at least one and the last round of whole tiles is badly
# filled. Measured on the H200 (scripts/ab_knobs.py, W4A8-FP8, us, without -> with stream-K over 132
# blocks): 8192x8192 M768 (192 tiles: 1.45 a SM, rounds 73% full) 130.0 -> 119.8, M1280 (2.42, 81%) 201.7 -> 193.3;
# 4096x14336 M1280 (1.21, 61%) 223.7 -> 170.6. At 85% full (28672x8192: 224 channel tiles on 132 SMs) mixed: M256
# (1.70) 129.6 -> 137.7, M384 249.8 -> 246.5, M512 (3.39) 254.6 -> 251.0, M768 (5.09) 404.8 -> 390.4: not by default.
# Slower where whole tiles fill the rounds: 28672x8192 M1280 (8.48, 94%) 657.1 -> 681.5; M4096 (97%) 8192x8192
# 590.4 -> 622.6, 28672x8192 2176.6 -> 2322.7, 4096x14336 517.5 -> 557.8 (even without the split: 128 persistent
# blocks on 1024 tiles 634.8: the persistent blocks cost ~6% there); 8192x8192 M512 (0.97 a SM) 68.3 -> 89.4.
# Again (8 balanced rounds,: M4096 8192x8192 554.2 -> 582.4, 28672x8192
# 1928.4 -> 2091.1; Nsight (call15, call16; 128 persistent blocks, whole tiles): 476.4 against 456.3 us, 3% more
# instructions, and its token-scale warp busy-polls for a free buffer (the top stall line: 1.26 M polls a GEMM)
STREAMK_MIN_TILES_PER_SM = 1.0
STREAMK_MAX_FILL = 0.84


CLUSTER_KNOB = "register_a8.cluster"  # 2: the wide form in clusters of two blocks sharing each activation stage by
# multicast (off by default: not measured faster yet); 0: off


def cluster_blocks(caps, n: int, bt: int, streamk: int) -> tuple[int, str]:
    """(blocks per cluster, why) of the wide form: the tuning knob register_a8.cluster; 0 where the profile declares
    no multicast, the form is narrow, stream-K runs or the channel tiles do not pair up."""
    want = knobs.value(CLUSTER_KNOB, caps)
    if not want or bt != WIDE_BT:
        return 0, ""
    if not caps.memory.cluster_multicast:
        return 0, f"no cluster: {caps.name} does not declare cluster_multicast"
    if caps.limits.max_cluster_size is not None and want > caps.limits.max_cluster_size:
        return 0, f"no cluster: {caps.name} declares max_cluster_size {caps.limits.max_cluster_size}"
    if streamk:
        return 0, "no cluster: stream-K runs"
    if (n // BC) % want:
        return 0, f"no cluster: {n // BC} channel tiles do not pair up"
    return want, (f"clusters of {want} blocks ({CLUSTER_KNOB}): adjacent channel tiles of one token tile; block kt % 2 "
                  "copies stage kt's activations by one multicast tensor copy into both blocks' slots (one L2 read), "
                  "each slot refilled once every consumer warp of both blocks released it")


def wide_chain(caps=None) -> int:
    """Tokens per wgmma chain of the wide form: BT (two halves, one partial: chain, wait, promote) or QUARTER_WT
    (four quarters, two partials: the next chain runs while the last one is promoted); the knob register_a8.chain."""
    return knobs.value(CHAIN_KNOB, caps) or WIDE_CHAIN


def narrow_chain(caps=None) -> int:
    """Tokens per wgmma chain of the narrow form: BT (one partial) or QUARTER_WT (two halves, two partials: the second
    half runs while the first is promoted); the knob register_a8.chain."""
    return knobs.value(CHAIN_KNOB, caps) or NARROW_CHAIN


def min_m(caps=None) -> int | None:
    """The smallest M this kernel takes (the tuning knob register_a8.min_m; None: never)."""
    return knobs.value(MIN_M_KNOB, caps)


def enabled(caps=None) -> bool:
    return min_m(caps) is not None


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
        # of widened fragments, RegisterA8Tiles.widened)
        return stages * (tokens * BK + W_BYTES + S_BYTES) + tokens * 4 + widened * A_SLOT_BYTES + 1024
    return stages * tokens * BK + 1024


def wide_tiles(m: int, n: int) -> int:
    """The wide form's tiles (blocks without stream-K) at M x N."""
    return -(-m // WIDE_BT) * (n // BC)


def stagger_chains(tile: int, chain: int, caps=None) -> int:
    """How many chains warpgroup 1 of the wide form starts behind warpgroup 0 (RegisterA8Tiles.stagger): the tuning knob
    register_a8.stagger_chains, at most the tile's chains less one."""
    want = knobs.value(STAGGER_CHAINS_KNOB, caps)
    return max(1, min(want, tile // chain - 1))


def fits_wide(bt: int, chain: int, cluster: int, caps=None) -> bool:
    """True where the wide form's tile is fitted to M: 256-token tiles in 64-token chains, no tile forced by the knob
    register_a8.token_tile, no clusters (written for 256)."""
    return bt == WIDE_BT and chain == QUARTER_WT and not cluster and knobs.value(WIDE_KNOB, caps) is None


def planned_token_tile(m: int, producer: bool, n: int = 0, sms: int = 0, caps=None) -> int:
    """The token tile plan_w4a8_wgmma_rs takes at M by default: token_tile's, the wide one fitted to M (the cluster
    taken as the knob register_a8.cluster asks)."""
    bt = token_tile(m, producer, n, sms, caps)
    cluster = knobs.value(CLUSTER_KNOB, caps) == 2
    return fitted_wide_tile(m, caps) if fits_wide(bt, wide_chain(caps), cluster, caps) else bt


def fitted_wide_tile(m: int, caps=None) -> int:
    """The wide form's token tile at M: as many tiles as 256 tokens need, each M / tiles rounded up to whole 64-token
    chains, never below 128 (M=300: two of 192; M=100: one of 128; register_a.planner.fitted_token_tile, whose knob
    wgmma.fit_token_tile false keeps 256)."""
    from humming.core.families.register_a.planner import fitted_token_tile

    return max(BT, fitted_token_tile(m, WIDE_BT, QUARTER_WT, caps))


def _rounds(blocks: int, sms: int) -> int:
    return -(-blocks // sms)


def token_tile(m: int, producer: bool, n: int = 0, sms: int = 0, caps=None) -> int:
    """WIDE_BT from WIDE_MIN_M tokens where the producer warpgroup runs and either ceil(m / 256) x n / 128 blocks fill
    WIDE_MIN_FILL of the SMs or the 128-token blocks would take more rounds of the SMs than the 256-token ones (n or
    sms 0: no such conditions), else BT; the knob register_a8.token_tile 128 / 256 forces one (256 only with the
    producer warpgroup). Measured on the H200 (scripts/ab_knobs.py, W4A8-FP8, us, 128 -> 256 tokens): 4096x14336
    M768 (192 narrow blocks: two rounds; 96 wide: one) 164.6 -> 112.6; M512 (128 / 64 blocks: one round each) 85.1 ->
    109.1; 8192x8192 M256 (128 / 64) 50.7 -> 64.7."""
    forced = knobs.value(WIDE_KNOB, caps)
    if forced:
        return WIDE_BT if forced == WIDE_BT and producer else BT
    if wide_from(caps) and producer and m >= wide_from(caps):
        return WIDE_BT
    wide, narrow = wide_tiles(m, n), -(-m // BT) * (n // BC)
    fills = not (n and sms) or wide >= WIDE_MIN_FILL * sms or _rounds(narrow, sms) > _rounds(wide, sms)
    return WIDE_BT if producer and m >= WIDE_MIN_M and fills else BT


def streamk_blocks(caps, m: int, n: int) -> tuple[int, str]:
    """(persistent blocks, why) of the wide form's stream-K at M x N: the knob register_a8.streamk 0 never, B always
    with B blocks; null: one block per SM from STREAMK_MIN_TILES_PER_SM wide tiles per SM where the rounds of
    whole tiles are less than STREAMK_MAX_FILL full (0: no stream-K)."""
    forced = knobs.value(STREAMK_KNOB, caps)
    sms = caps.limits.sms or 0
    tiles = wide_tiles(m, n)
    if forced is not None:
        if forced == 0:
            return 0, f"no stream-K ({STREAMK_KNOB} 0)"
        return forced, f"stream-K over {forced} blocks ({STREAMK_KNOB})"
    if not sms:
        return 0, "no stream-K: the profile declares no SM count"
    per_sm = tiles / sms
    fill = per_sm / _rounds(tiles, sms)
    words = f"{tiles} tiles of {WIDE_BT} tokens on {sms} SMs: {per_sm:.2f} a SM, rounds of whole tiles {fill:.0%} full"
    if per_sm < STREAMK_MIN_TILES_PER_SM or fill >= STREAMK_MAX_FILL:
        return 0, (f"no stream-K ({words}; it pays from {STREAMK_MIN_TILES_PER_SM:g} a SM in rounds below "
                   f"{STREAMK_MAX_FILL:.0%} full)")
    return sms, f"stream-K by default ({words}; {STREAMK_KNOB} 0: off)"


def _producer_wanted(caps, producer: bool | None) -> bool:
    return declared_option(bool(caps.memory.tma and caps.memory.mbarrier and caps.memory.setmaxnreg), producer,
                           PRODUCER_KNOB, caps,
                           f"{caps.name} does not declare tma, mbarrier and setmaxnreg (the producer warpgroup)")


def plan_w4a8_wgmma_rs(caps, layout, m: int, act: str, scheme: str = "", producer: bool | None = None,
                       tokens: int | None = None, streamk: int | None = None) -> Plan:
    """Plan the register-A wgmma W4A8 kernel for a ``WgmmaRs8Layout``, or UnsupportedOnDevice / ShapeError.
    ``producer``: a producer warpgroup issues TMA copies of the activations and the consumers meet only at mbarriers
    (None: the tuning knob register_a8.producer, where tma/mbarrier/setmaxnreg are declared).
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
    bt = token_tile(m, use_producer, n, caps.limits.sms, caps) if tokens is None else tokens
    if bt not in (BT, WIDE_BT):
        raise ValueError(f"the register-A wgmma W4A8 kernel takes token tiles of {BT} or {WIDE_BT}, not {bt}")
    if bt == WIDE_BT and not use_producer:
        raise UnsupportedOnDevice(f"the wide register-A W4A8 form ({WIDE_BT} tokens) needs the producer warpgroup "
                                  f"(tma, mbarrier, setmaxnreg declared; {PRODUCER_KNOB} on)")
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
    chain = wide_chain(caps) if bt == WIDE_BT else narrow_chain(caps)
    cluster, cluster_why = cluster_blocks(caps, n, bt, blocks)
    tile = bt  # the wide form's tile fitted to M in whole 64-token chains (not with forced tiles or clusters)
    if fits_wide(bt, chain, cluster, caps):
        tile = fitted_wide_tile(m, caps)
    limit = caps.limits.smem_per_block_kb * 1024
    wide = bt == WIDE_BT
    pdl = (bt == WIDE_BT and not blocks and not cluster and knobs.value(PDL_RS8_KNOB, caps) and pdl_wanted(caps)
           and bool(caps.memory.griddepcontrol))
    widened = widened_slots(caps) if wide and tile == WIDE_BT and not blocks and not cluster and not pdl else 0
    l2next = int(wide and not blocks and not cluster and not pdl and not widened and knobs.value(L2NEXT_KNOB, caps))
    fast = bool(getattr(layout, "fast_accum", False)) and a_type == "e4m3"
    exact = int32_sums_wanted(a_type, group, k, caps)
    direct_why = ""
    if fast and group == 128:
        direct_why = ("groups of 128 need an fp32 step a stage either way (the running sums rescaled by the ratio of "
                      "consecutive group scales instead of a promotion measured 0-3% faster at ~5x the error: "
                      "docs/performance.md)")
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
        src = ("int4 -> e4m3 by tables (GemmOptions.w4a8_widen='prmt'): codes stored with bits 2 and 3 swapped, two "
               "byte-permute lookups and an xor per 4 codes")
    else:
        from humming.core.common.layout import LINEAR_WIDENING_REASON

        src = LINEAR_WIDENING_REASON
    promotion = ("group 128" if group == 128 else "per-channel scales") + ": each stage's 128-deep partial is waited " \
        "and added into fp32 registers times the scale of the thread's two channels"
    if chain not in form.n_values:
        raise UnsupportedOnDevice(f"{caps.name} declares no wgmma m64n{chain}k32 {a_type} ({CHAIN_KNOB})")
    piece = "half" if bt // chain == 2 else "quarter"
    fit_words = (f"; {tile} tokens instead of {WIDE_BT}: M={m} in {-(-m // tile)} tile(s) of whole {QUARTER_WT}-token "
                 f"chains ({FIT_KNOB} false or {WIDE_KNOB}: {WIDE_BT})" if tile != bt else "")
    chains_words = f"{tile // chain} m64n{chain}k32 chain{'s' if tile > chain else ''} a stage"
    overlap = ("; the next stage's fragment widened while this stage's wgmmas run" if wide else "")
    if direct and exact:
        promotion = ("per-channel scales with int8 activations: the wgmmas accumulate the int32 sums across every "
                     f"stage in {chains_words} (exact: |sum| < 2^31 for K <= {DIRECT_S8_MAX_K}), converted to fp32 "
                     f"once after the loop; no partials, no promotion ({DIRECT_S8_KNOB} false: promoted per stage)"
                     + overlap)
    elif direct:
        promotion = (f"fast accumulation ({FAST_ACCUM_WORDS}): the wgmmas accumulate straight into the fp32 "
                     f"accumulators across every stage in {chains_words} (no partials, no promotion; ~2x the promoted "
                     "form's error at K=4096, the tensor core's own accumulation); per-channel scales in the epilogue"
                     + overlap)
    elif chain == QUARTER_WT:
        promotion += (f", once per token {piece} of {chain}: {piece} c + 1's chain is issued before {piece} c's is "
                      f"waited for (wait_group 1) and promoted, into two partials ({CHAIN_KNOB} {BT}: one partial, "
                      "chain, wait, promote)")
    if bt == WIDE_BT:
        chains = ("2 halves x m64n128k32" if chain == BT else f"{tile // chain} quarters x m64n64k32 (two partials)")
        if chain == BT and not direct:
            promotion += ", once per token half (the partial holds 128 tokens)"
        reasons = (
            f"wgmma m64nNk32 {a_type} declared ({caps.target.arch}): A (weights) from registers, B (activation "
            "codes) K-major in 128-byte-swizzled shared memory",
            f"path {PATH} (M >= {min_m(caps) or DEFAULT_MIN_M}, {MIN_M_KNOB}), wide form (M >= {WIDE_MIN_M} and blocks for "
            f">= {WIDE_MIN_FILL:.0%} of the SMs or fewer rounds of them than of 128-token blocks; {WIDE_KNOB} 128 "
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
        if stagger_wanted(caps):
            behind = stagger_chains(tile, chain, caps)
            reasons += (f"staggered start ({STAGGER_KNOB} false: off; {STAGGER_CHAINS_KNOB}: N chains): warpgroup 1 "
                        f"issues its first wgmmas {behind} chain{'s' if behind > 1 else ''} after warpgroup 0's, so "
                        "each promotes while the other's wgmmas run",)
    else:
        reasons = (
            f"wgmma m64nNk32 {a_type} declared ({caps.target.arch}): A (weights) from registers, B (activation codes) "
            "K-major in 128-byte-swizzled shared memory",
            f"path {PATH} (M >= {min_m(caps) or DEFAULT_MIN_M}, {MIN_M_KNOB}): C^T = W x^T per tile; each lane loads its int4 codes of a "
            f"128-deep stage with two 16-byte loads (humming.core.families.register_a8.layout), "
            f"{narrow_prefetch(caps) or PF} stages ahead"
            + (f" ({NARROW_PF_KNOB})" if narrow_prefetch(caps) else "") + f", and widens them exactly ({src}) into "
            "the m16n8k32 A fragment of its warp; no shared-memory traffic for the weights",
            promotion,
            f"tile {BC} channels x {BT} tokens x {BK} k: 2 warpgroups x "
            f"{'m64n128k32' if chain == BT else '2 halves x m64n64k32 (two partials)'}, {stages} {'TMA' if use_producer else 'cp.async'} activation slots "
            f"({stages - 1} in flight), {smem_bytes(stages) // 1024} KiB of {limit // 1024} KiB shared memory",
            "epilogue: per-token activation scale, bias per channel, the tile transposed through shared memory, 16-byte "
            "stores of whole token rows; no split-K",
        )
        if use_producer:
            reasons += (f"{PRODUCER_KNOB}: a producer warpgroup (setmaxnreg 40; the consumers take 232) issues one TMA "
                        "tensor copy per activation stage into the slot the consumers released (EMPTY mbarriers); the "
                        "two consumer warpgroups meet only at the FULL mbarriers, so one promotes while the other's "
                        "wgmmas run",)
    if cluster_why:
        reasons += (cluster_why,)
    if direct_why and fast:
        reasons += (f"fast accumulation ({FAST_ACCUM_WORDS}) asked for, not planned: {direct_why}; each stage's "
                    "partial is promoted",)
    raster = knobs.value(RASTER_KNOB, caps)
    if raster:
        reasons += (f"blocks rasterized in groups of {raster} token tiles ({RASTER_KNOB} 0: launch order): a group's "
                    "blocks take its token tiles for one channel tile after another, so the blocks running together "
                    f"share {raster} activation tiles in L2 instead of all of them",)
    if l2next:
        reasons += (f"next wave's weights into L2 ({L2NEXT_KNOB} false: off): once the producer has issued its tile's last "
                    f"stage it prefetches the first {stages} stages' codes and scales of the block launched one wave "
                    "later (block id + the SM count, same rasterization), so that block's pipeline fill reads L2",)
    if widened:
        reasons += (f"weights widened by three converter warps of the producer warpgroup ({WIDENED_KNOB}: N slots; "
                    f"0: in the consumers): each stage's fragments into one of {widened} shared-memory slots "
                    f"({A_SLOT_BYTES // 1024} KiB each), which the consumers load with four 16-byte shared loads a lane; "
                    "their only ALU work next to the register-A wgmmas is the promotion",)
    if pdl:
        reasons += (f"programmatic dependent launch ({PDL_RS8_KNOB}; griddepcontrol declared): launched with the "
                    "PDL attribute behind the activation quantizer (which lets its dependents start), the producer "
                    "copies the first stages' codes and scales while the quantizer finishes, then waits for it "
                    "(griddepcontrol.wait) before copying activations or reading token scales",)
    plan = Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="wgmma",
        instruction=replace(form, shape=(64, chain, 32)), path=PATH, layout=layout,
        tiles=RegisterA8Tiles(tile, BC, BK, stages, 1, 12 if use_producer else 8, 1, bulk=2 if use_producer else 0,
                              stagger=stagger_chains(tile, chain, caps) if bt == WIDE_BT and stagger_wanted(caps) else 0,
                              raster=raster, streamk=blocks,
                              prefetch=0 if bt == WIDE_BT else narrow_prefetch(caps),
                              cluster=cluster, wide=int(wide and tile == BT), widened=widened, l2next=l2next,
                              direct=direct),
        splits=1, async_copy=True, smem_bytes=smem_bytes(stages, tile, bool(blocks), wide, widened), reasons=reasons,
        pdl=pdl,
    )
    # the stmatrix staging (register_a.stmatrix false: off) of the narrow and wide forms; the stream-K form keeps its stores
    return plan if blocks else with_stsm(caps, plan)



def int32_sums_wanted(a_type: str, group: int, k: int, caps=None) -> bool:
    """The kernel accumulates exact int32 sums across stages (RegisterA8Tiles.direct): int8 activations with per-channel
    scales, K within the int32 bound, the knob register_a8.direct_int8 on (the plan's other conditions aside:
    _direct_refusal)."""
    return (a_type == "s8" and group != 128 and k <= DIRECT_S8_MAX_K and bool(knobs.value(DIRECT_S8_KNOB, caps)))


def _direct_refusal(wide: bool, tile: int, blocks: int, cluster: int, widened: int, pdl: bool) -> str:
    """Why the direct-accumulation loops (RegisterA8Tiles.direct) do not apply to this plan ("" where they do)."""
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
