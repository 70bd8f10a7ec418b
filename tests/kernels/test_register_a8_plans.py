"""CPU: the register-A W4A8 family's planning rules (humming.core.families.register_a8.planner) over its variants:
the path from M 128, the token tile (narrow 128, wide 256, fitted 192, the wide form at 128 tokens), stream-K (the
consumers' segment model against the producer's schedule, grid, workspace, shared memory, default rule, refusals),
direct accumulation for per-channel scales, the next wave's L2 prefetch, the staggered start, converter warps, and
the knobs' refusals of bad values; each with the reasons its plan gives and the source text it selects."""
import itertools
import re
from dataclasses import replace

import pytest

import humming
from humming import GemmOptions, api
from humming.core.common.wgmma import STAGGER_KNOB, TILE_RASTERIZED  # (the block -> tile statements the kernel writes)
from humming.core.families.register_a8 import planner as rs8
from humming.core.families.register_a8.layout import WgmmaRs8Layout
from humming.core.families.register_a8.planner import (
    CHAIN_KNOB,
    DIRECT_S8_KNOB,
    DIRECT_S8_MAX_K,
    FAST_ACCUM_WORDS,
    FIT_KNOB,
    L2NEXT_KNOB,
    MIN_M_KNOB,
    NARROW_PF_KNOB,
    PATH,
    PDL_RS8_KNOB,
    RASTER_KNOB,
    STAGGER_CHAINS_KNOB,
    STREAMK_KNOB,
    WIDE_FROM_KNOB,
    WIDE_KNOB,
    WIDENED_KNOB,
    plan_w4a8_wgmma_rs,
    planned_token_tile,
    smem_bytes,
    widened_slots,
)
from humming.core.tuning import knobs
from humming.errors import ProfileError, ShapeError, UnsupportedOnDevice

H200 = "nvidia-h200"
NATIVE = GemmOptions(act_widen=False)  # the native 8-bit kernels, not the widened weight-only path
FAST = GemmOptions(act_widen=False, fast_accum=True)
SCHEME = {"e4m3": "w4a8-fp8", "s8": "w4a8-int8"}


def _caps():
    return api.resolve_profile(H200)


def _scheme(a_type, group=128):
    sch = humming.schemes.get(SCHEME[a_type])
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _per_channel(name: str = "w4a8-fp8"):
    return humming.schemes.get(name).with_(granularity="channel", group_size=None)


def _plan(scheme="w4a8-fp8", m: int = 4096, n: int = 8192, k: int = 8192, options=NATIVE):
    """humming.plan on the H200 profile (the native 8-bit kernels unless ``options`` say otherwise)."""
    return humming.plan(scheme, m, n, k, profile=H200, options=options)


def _rs8(m=4096, a_type="e4m3", n=8192, k=8192, group=128, **kw):
    """The register-A W4A8 planner itself on an [n, k] layout."""
    return plan_w4a8_wgmma_rs(_caps(), WgmmaRs8Layout(a_type, n, k, group), m, "f16", scheme="w4a8", **kw)


# ----------------------------------------------------------------------------- path and token tile
def test_selection_default_from_m_128(set_knobs):
    """Default: M >= 128 (measured faster than the warp-specialised kernel at M 128-4096); register_a8.min_m null:
    never; 128: groups of 128 and per channel, e4m3 and s8, and nowhere else."""
    for name in ("w4a8-fp8", "w4a8-int8"):
        assert _plan(name, 128, 1024, 4096).path == PATH
        assert _plan(name, 127, 1024, 4096).path != PATH
    set_knobs({MIN_M_KNOB: None})
    for name in ("w4a8-fp8", "w4a8-int8"):
        assert _plan(name, 4096, 1024, 4096).path != PATH
    set_knobs({MIN_M_KNOB: 128})
    assert _plan("w4a8-fp8", 128, 1024, 4096).path == PATH
    for a_type, group in itertools.product(("e4m3", "s8"), (128, None)):
        p = _plan(_scheme(a_type, group), 1024, 1024, 4096)
        assert p.path == PATH and MIN_M_KNOB in p.explain(), p.explain()
    assert _plan("w4a8-fp8", 127, 1024, 4096).path != PATH
    assert _plan(_scheme("e4m3", 64), 1024, 1024, 4096).path != PATH
    assert humming.plan("w4a8-int8", 1024, 1024, 4096, profile="nvidia-a100", options=NATIVE).path != PATH
    assert _plan("w8a8-fp8", 1024, 1024, 4096).path != PATH


def test_wide_form_selection(set_knobs):
    """The wide form (256 tokens, fitted to M: 128 / 192 from WIDE_MIN_M) with the producer warpgroup where its blocks
    fill 3/4 of the SMs, the narrow form of 128 below or without it; register_a8.token_tile forces either; asking for
    the wide form without the producer warpgroup is refused with the reason; register_a8.chain sets both forms'
    chain width."""
    caps = _caps()
    sms = caps.limits.sms
    big, small = WgmmaRs8Layout("e4m3", 28672, 4096, 128), WgmmaRs8Layout("e4m3", 8192, 4096, 128)
    assert rs8.WIDE_MIN_M == 128 and not plan_w4a8_wgmma_rs(caps, big, 127, "f16").tiles.wide
    wide128 = plan_w4a8_wgmma_rs(caps, big, 128, "f16").tiles  # 224 blocks: the wide form at 128 tokens
    assert (wide128.bm, wide128.wide, wide128.prefetch) == (128, 1, 0)
    assert plan_w4a8_wgmma_rs(caps, big, 192, "f16").tiles.bm == 192
    assert plan_w4a8_wgmma_rs(caps, big, 256, "f16").tiles.bm == 256
    assert plan_w4a8_wgmma_rs(caps, small, 128, "f16").tiles.wide == 0  # 64 blocks: the narrow form
    assert plan_w4a8_wgmma_rs(caps, small, 256, "f16").tiles.bm == 128  # 64 blocks: fewer than 3/4 of the SMs
    assert plan_w4a8_wgmma_rs(caps, small, 512, "f16").tiles.bm == (256 if 128 >= 0.75 * sms else 128)
    assert plan_w4a8_wgmma_rs(caps, small, 4096, "f16").tiles.bm == 256
    assert plan_w4a8_wgmma_rs(caps, big, 4096, "f16", producer=False).tiles.bm == 128
    with pytest.raises(UnsupportedOnDevice, match="producer warpgroup"):
        plan_w4a8_wgmma_rs(caps, big, 4096, "f16", producer=False, tokens=256)
    with knobs.override({WIDE_KNOB: 128}):
        assert plan_w4a8_wgmma_rs(caps, big, 4096, "f16").tiles.bm == 128
    with knobs.override({WIDE_KNOB: 256}):
        assert plan_w4a8_wgmma_rs(caps, small, 128, "f16").tiles.bm == 256
    for chain in (64, 128):  # the chain width of both forms
        set_knobs({CHAIN_KNOB: chain})
        assert plan_w4a8_wgmma_rs(caps, big, 4096, "f16").instruction.shape == (64, chain, 32)
        assert plan_w4a8_wgmma_rs(caps, big, 128, "f16").instruction.shape == (64, chain, 32)


def test_wide_form_at_m_128_by_default_where_it_fills_the_sms():
    """The wide form at 128 tokens is the default at M 128 where its blocks fill the SMs (28672x8192), not at
    8192x8192 (64 blocks: the narrow form)."""
    p = _plan(m=128)
    assert p.tiles.bm == 128 and not p.tiles.wide and "wide form" not in p.explain()
    p = _plan(m=128, n=28672)
    assert p.tiles.bm == 128 and p.tiles.wide and not p.tiles.streamk and "wide form" in p.explain()


def test_wide_from_fits_tiles_above_128(set_knobs):
    """register_a8.wide_from 128: the wide form from M 128 wherever it runs, its tile fitted to M (128 / 192 / 256),
    never below 128 tokens."""
    set_knobs({WIDE_FROM_KNOB: 128})
    assert [_plan(m=m).tiles.bm for m in (128, 160, 200)] == [128, 192, 256]
    assert not _plan(m=160).tiles.wide


# (M, N, token tile): 256 where the wide blocks fill 3/4 of the SMs or the narrow ones need more rounds, fitted to M
# in whole 64-token chains (M=384: two tiles of 192; wgmma.fit_token_tile false: 256; M=200 on 28672 channels: one of
# 256)
@pytest.mark.parametrize("m,n,bt", [(768, 4096, 256), (512, 4096, 128), (256, 8192, 128), (384, 8192, 192),
                                    (256, 28672, 256), (200, 28672, 256), (160, 28672, 192), (300, 28672, 192),
                                    (513, 8192, 192), (577, 8192, 256)])
def test_token_tile_rule(m, n, bt):
    p = _rs8(m=m, n=n, k=14336 if n == 4096 else 8192)
    assert p.tiles.bm == bt == planned_token_tile(m, True, n, 132)
    if bt == 192:
        assert any("192 tokens instead of 256" in r for r in p.reasons), p.explain()
        assert "3 quarters x m64n64k32" in p.explain()
        with knobs.override({FIT_KNOB: False}):
            assert _rs8(m=m, n=n).tiles.bm == 256
        with knobs.override({WIDE_KNOB: 256}):  # a forced tile is not fitted
            assert _rs8(m=m, n=n).tiles.bm == 256


# ----------------------------------------------------------------------------- stream-K
def _segments(tiles: int, katoms: int, blocks: int):
    """The producer's order: StreamK.next of the register-A stream-K helpers (humming.core.families.register_a.streamk,
    which the W4A8 producer warpgroup runs) in Python: per block, its (tile, kt0, ktiles)."""
    waves, dp = tiles // blocks, tiles // blocks * blocks
    sk_atoms = (tiles - dp) * katoms
    out = []
    for b in range(blocks):
        segs = [(w * blocks + b, 0, katoms) for w in range(waves)]
        ga, sk1 = sk_atoms * b // blocks, sk_atoms * (b + 1) // blocks
        while ga < sk1:
            t = ga // katoms
            kt0 = ga - t * katoms
            n = min(katoms - kt0, sk1 - ga)
            segs.append((dp + t, kt0, n))
            ga += n
        out.append(segs)
    return out


def _consumer_segment(tiles: int, katoms: int, blocks: int, b: int, seg: int):
    """streamk_segment of the register-A W4A8 stream-K kernel in Python: (tile, kt0, ktiles, it0) or None past the
    last."""
    waves, dp = tiles // blocks, tiles // blocks * blocks
    sk_atoms = (tiles - dp) * katoms
    if seg < waves:
        return seg * blocks + b, 0, katoms, seg * katoms
    end, ga, it0 = sk_atoms * (b + 1) // blocks, sk_atoms * b // blocks, waves * katoms
    for i in range(waves, seg + 1):
        if ga >= end:
            return None
        t = ga // katoms
        tile, kt0 = dp + t, ga - t * katoms
        ktiles = min(katoms - kt0, end - ga)
        if i < seg:
            ga, it0 = ga + ktiles, it0 + ktiles
    return tile, kt0, ktiles, it0


@pytest.mark.parametrize("tiles,katoms,blocks", [(1024, 64, 132), (3584, 64, 132), (512, 112, 132), (6, 33, 5),
                                                 (24, 16, 5), (8, 32, 132), (4, 2, 13), (1, 1, 3), (3, 1, 65535)])
def test_consumer_segments_follow_the_producer(tiles, katoms, blocks):
    """The consumers' segments are the producer's, every atom of every tile once, the stage count before each."""
    covered = set()
    producer = _segments(tiles, katoms, blocks)  # per block, the producer's order (StreamK.next)
    for b in range(blocks):
        want = producer[b]
        got, seg, stages = [], 0, 0
        while (s := _consumer_segment(tiles, katoms, blocks, b, seg)) is not None:
            tile, kt0, ktiles, it0 = s
            assert it0 == stages  # the slot ring position: stages the producer copied before this segment
            got.append((tile, kt0, ktiles))
            stages, seg = stages + ktiles, seg + 1
        assert got == want
        assert got or blocks > tiles * katoms  # a block without segments only where the atoms are fewer
        assert sum(1 for s in got if s[2] != katoms) <= 2  # at most two split segments: two partial slots
        for tile, kt0, n in got:
            for kt in range(kt0, kt0 + n):
                assert (tile, kt) not in covered
                covered.add((tile, kt))
    assert len(covered) == tiles * katoms


def test_streamk_plan():
    p = _rs8(streamk=132)  # 1024 wide tiles on 132 SMs: 7.76 a SM
    assert p.tiles.streamk == 132 and p.grid == (1, 132, 1) and p.tiles.bm == 256
    assert p.workspace_floats == 132 * 2 * 256 * 128 and p.tiles.stages == 5
    assert p.smem_bytes == smem_bytes(5, 256, True) == 5 * (32768 + 8192 + 512) + 2 * 64 * 72 * 2 + 2048 + 1024
    assert p.smem_bytes <= 227 * 1024 and p.kernel_name.split("_")[-2].endswith("k132")
    assert any("100 tiles left split evenly" in r and "7 wave(s)" in r for r in p.reasons), p.reasons
    assert _rs8(streamk=0).tiles.streamk == 0 and _rs8(streamk=0).grid == (16, 64, 1)


# (M, N, blocks by default): stream-K from one wide tile per SM where the rounds of whole tiles are < 84% full
@pytest.mark.parametrize("m,n,expect", [(4096, 8192, 0), (4096, 28672, 0), (1024, 8192, 0), (768, 8192, 132),
                                        (1280, 8192, 132), (1280, 4096, 132), (768, 4096, 0), (256, 28672, 0),
                                        (768, 28672, 0), (1280, 28672, 0), (512, 8192, 0), (300, 1024, 0)])
def test_streamk_default_rule(m, n, expect):
    p = _rs8(m=m, n=n)
    assert p.tiles.streamk == expect, p.reasons
    assert p.tiles.bm == 128 or any(("stream-K by default" if expect else "no stream-K") in r for r in p.reasons)


@pytest.mark.parametrize("m,n,k,blocks,planned", [(300, 256, 256, 13, 8), (256, 128, 128, 132, 1),
                                                  (300, 1024, 4096, 132, 132), (1024, 768, 2048, 7, 7)])
def test_every_streamk_block_has_a_segment(m, n, k, blocks, planned, set_knobs):
    """A block without segments would hang in the staggered start (warpgroup 1 waits for a turn warpgroup 0 gives at
    the block's first stage; seen on the H200): the plan launches at most as many blocks as the tiles' k atoms."""
    set_knobs({STREAMK_KNOB: blocks})
    p = _rs8(m=m, n=n, k=k, tokens=256)
    assert p.tiles.streamk == planned and p.grid == (1, planned, 1)
    tiles = -(-m // 256) * (n // 128)
    assert all(_consumer_segment(tiles, k // 128, planned, b, 0) is not None for b in range(planned))


def test_streamk_knob(set_knobs):
    set_knobs({STREAMK_KNOB: 0})
    assert _rs8().tiles.streamk == 0
    set_knobs({STREAMK_KNOB: 7})
    p = _rs8(m=1024)
    assert p.tiles.streamk == 7 and p.grid == (1, 7, 1)


def test_streamk_refusals():
    with pytest.raises(UnsupportedOnDevice, match="wide register-A W4A8 form"):
        _rs8(m=4096, tokens=128, streamk=132)
    with pytest.raises(ShapeError, match="1..65535"):
        _rs8(streamk=70000)
    assert _rs8(m=4096, tokens=128).tiles.streamk == 0  # the narrow form never takes the rule's stream-K


def test_without_streamk_the_source_is_the_wide_form():
    """streamk = 0 gives the wide form's own kernel (no schedule, the token-scale warp, the staging in the slots)."""
    src = api.source(_rs8(streamk=0))
    assert "StreamK" not in src and "block_y" not in src and "mbar_init(xbar0 + 8 * (2 * STAGES), 32);" in src
    assert _plan("w4a8-fp8").tiles.streamk == 0


# ----------------------------------------------------------------------------- direct accumulation
def _direct_loop(src: str) -> str:
    start = src.index("chains of WT tokens a stage straight into")
    return src[start:src.index("consumer_sync();", start)]


def test_direct_default_plans_do_not_change():
    p = _plan()
    assert p.tiles.direct == 0 and not p.layout.fast_accum and p.instruction.shape == (64, 64, 32), p.explain()
    src = api.source(p)
    assert "fast accumulation" not in src and "rcp_approx" not in src and "pa[WG_ACC_REGS], pb[WG_ACC_REGS]" in src
    assert "md_" not in p.kernel_name


def test_fast_accumulation_plans_the_direct_loop_for_per_channel_scales():
    base = _plan(_per_channel())
    p = _plan(_per_channel(), options=FAST)
    assert p.layout.fast_accum and p.tiles.direct == 1 and p.tiles.bm == 256, p.explain()
    assert p.instruction.shape == (64, 128, 32) and p.tiles.stagger == 1 and p.tiles.l2next == 1
    assert p.kernel_name != base.kernel_name and "md_" in p.kernel_name
    assert any(FAST_ACCUM_WORDS in r and "per-channel scales in the epilogue" in r for r in p.reasons), p.explain()
    src = api.source(p)
    loop = _direct_loop(src)
    # no partials and no promotion: both halves' wgmmas accumulate into facc
    assert "pa[" not in src and "part[" not in src and "+= wg_acc_to_f32" not in src and "*=" not in loop
    for hv in (0, 1):
        assert (f"wgmma_k32_rs(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>(facc + WG_ACC_REGS * {hv}), fa[u][ks], "
                f"desc_x + {hv} * (WT * BK / 16) + 2 * ks, 1);") in loop
    # the next stage widened into the other fragment before this stage's wait, the slot released after it
    assert loop.index("fa[u ^ 1][j >> 1]") < loop.index("wgmma_wait<0>();")
    assert loop.index("wgmma_wait<0>();") < loop.index("mbar_arrive(xbar0 + 8 * (STAGES + s))")
    assert src.count("consumer_turn_take();") == 1 and "if (wg == 0 && kt == 0) consumer_turn_give();" in loop
    # the channel scales in the epilogue
    assert "const float fs0 = s_lo, fs1 = s_hi;" in src
    assert "cs[h] = (CS ? load_f32(CS + n0 + ch) : 1.0f) * (h ? fs1 : fs0);" in src


def test_direct_groups_of_128_keep_promoting_and_say_why():
    base = _plan()
    p = _plan(options=FAST)
    assert p.layout.fast_accum and p.tiles.direct == 0 and p.instruction.shape == (64, 64, 32), p.explain()
    assert any("asked for, not planned" in r and "groups of 128" in r for r in p.reasons), p.explain()
    assert api.source(p).replace(p.kernel_name, base.kernel_name) == api.source(base)  # (the name says fast_accum)


@pytest.mark.parametrize("knob,value,why", [(STREAMK_KNOB, 132, "stream-K"), (PDL_RS8_KNOB, True, "PDL"),
                                            (WIDENED_KNOB, 2, "converter warps")])
def test_direct_forms_without_it_keep_promoting_and_say_why(knob, value, why, set_knobs):
    set_knobs({knob: value})
    p = _plan(_per_channel(), options=FAST)
    assert p.layout.fast_accum and p.tiles.direct == 0, p.explain()
    assert any("asked for, not planned" in r and why in r for r in p.reasons), p.explain()
    assert "chains of WT tokens a stage straight into" not in api.source(p)


@pytest.mark.parametrize("name", ["w4a8-int8", "w4a8-fp8"])
def test_direct_fitted_and_narrow_tiles(name):
    """Per-channel plans of 192 / 128 tokens: the wide form fitted to M in 64-token chains, the narrow form in its one
    128-token chain; int8 by default, e4m3 with GemmOptions.fast_accum."""
    sch = _per_channel(name)
    fitted = _plan(sch, m=300, options=FAST)
    assert fitted.tiles.bm == 192 and fitted.tiles.direct == 1 and fitted.instruction.shape == (64, 64, 32), \
        fitted.explain()
    assert any("3 m64n64k32 chains a stage" in r for r in fitted.reasons), fitted.explain()
    src = api.source(fitted)
    assert "wgmma_k32_rs(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>(" in src and " + WG_ACC_REGS * 2)" in src
    assert "pa[" not in src and "+= wg_acc_to_f32" not in src and "+= small_s32_to_f32" not in src
    narrow = _plan(sch, m=512, n=4096, k=14336, options=FAST)
    assert narrow.tiles.bm == 128 and not narrow.tiles.wide and narrow.tiles.direct == 1, narrow.explain()
    assert narrow.instruction.shape == (64, 128, 32)
    src = api.source(narrow)
    acc = "iacc" if name == "w4a8-int8" else "facc"
    assert f"wgmma_k32_rs({acc}, a[ks], desc_x + 2 * ks, 1);" in src and "part[" not in src and "pa[" not in src
    assert "const float fs0 = s_lo, fs1 = s_hi;" in src and "(h ? fs1 : fs0)" in src
    assert ("facc[i] = (float)iacc[i]" in src) == (name == "w4a8-int8")
    # groups of 128 there: promoted (e4m3: and said why)
    grouped = _plan(name, m=300, options=FAST)
    assert grouped.tiles.direct == 0
    assert _plan("w4a8-int8", options=FAST).tiles.direct == 0  # int8 groups of 128: int32 sums per group only


def test_direct_generator_refuses_what_it_is_not_written_for():
    p = _plan(_per_channel(), options=FAST)
    for tiles in (replace(p.tiles, streamk=132), replace(p.tiles, cluster=2), replace(p.tiles, bm=192)):
        with pytest.raises(ValueError):
            api.source(replace(p, tiles=tiles))
    grouped = _plan("w4a8-int8", options=FAST)  # groups of 128: promoted only
    with pytest.raises(ValueError, match="per-channel scales"):
        api.source(replace(grouped, tiles=replace(grouped.tiles, direct=1)))


def test_int8_per_channel_accumulates_int32_sums_by_default():
    p = _plan(_per_channel("w4a8-int8"))
    assert not p.layout.fast_accum and p.tiles.direct == 1 and p.instruction.shape == (64, 128, 32), p.explain()
    assert any("int32 sums across every stage" in r and DIRECT_S8_KNOB in r for r in p.reasons), p.explain()
    src = api.source(p)
    loop = _direct_loop(src)
    assert "int iacc[BT / 2];" in loop and "*=" not in loop
    assert "s8x16_lo(wq[j >> 2][j & 3])" in loop and "int4n8_to_e4m3x8_x" not in loop
    assert "wgmma_k32_rs(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>(iacc + WG_ACC_REGS * 1)" in loop
    assert "for (int i = 0; i < BT / 2; ++i) facc[i] = (float)iacc[i];" in src
    assert src.index("facc[i] = (float)iacc[i]") < src.index("consumer_sync();                 // all wgmmas done")
    assert "const float fs0 = s_lo, fs1 = s_hi;" in src and "pa[" not in src
    # the knob off, a K past the int32 bound, and int8 groups of 128 keep promoting
    with knobs.override({DIRECT_S8_KNOB: False}):
        assert _plan(_per_channel("w4a8-int8")).tiles.direct == 0
    assert _plan(_per_channel("w4a8-int8"), k=2 * DIRECT_S8_MAX_K).tiles.direct == 0
    assert _plan("w4a8-int8").tiles.direct == 0


# ----------------------------------------------------------------------------- the next wave's weights into L2
def _l2next_block(src: str) -> str:
    start = src.index("{  // the block launched one wave later")
    return src[start:src.index("} else if (warp == THREADS / 32 + 1)", start)]


def test_l2next_by_default_and_says_so():
    """Once its producer thread has issued the tile's last stage it asks the L2 for the first STAGES stages' codes
    (and group scales) of the block launched one wave later: the addresses that block's producer copies."""
    p = _plan()
    assert p.tiles.l2next == 1 and p.tiles.streamk == 0 and p.tiles.bm == 256, p.explain()
    assert any(L2NEXT_KNOB in r and "one wave" in r for r in p.reasons)
    block = _l2next_block(api.source(p))
    assert "const int nb = bid + (int)nsm;" in block and "nsm = sm_count();" in block
    # the same codes and scales the producer of block nb copies for its first STAGES stages
    assert "for (int kt = 0; kt < min(ktiles, STAGES); ++kt)" in block
    assert "l2_prefetch(ncodes + (size_t)kt * SLAB_BYTES, SLAB_BYTES);" in block
    assert "l2_prefetch(ncodes + ((size_t)ktiles + kt) * SLAB_BYTES, SLAB_BYTES);" in block
    assert "l2_prefetch(S + (size_t)kt * N + nn0, S_BYTES);" in block
    assert "(size_t)(nn0 / 64) * ktiles * SLAB_BYTES" in block


def test_l2next_block_is_mapped_as_the_block_maps_itself():
    block = _l2next_block(api.source(_plan()))
    mine = [ln.split("   //")[0].strip() for ln in TILE_RASTERIZED.split("\n")[1:]]
    theirs = [ln.strip() for ln in block.split("\n") if "nfirst" in ln or "nm0 =" in ln]
    back = [re.sub(r"\bn(first|rows|m0|n0)\b", r"\1", re.sub(r"\bnb\b", "bid", ln)) for ln in theirs]
    assert back == mine


def test_l2next_launch_order_mapping(set_knobs):
    set_knobs({RASTER_KNOB: 0})
    p = _plan()
    assert p.tiles.raster == 0 and p.tiles.l2next == 1
    src = api.source(p)
    assert "const int m0 = blockIdx.x * BT, n0 = blockIdx.y * BC;" in src
    block = _l2next_block(src)
    # launch order: block nb = blockIdx.x + blockIdx.y * gridDim.x
    assert "const int nb = blockIdx.x + blockIdx.y * gridDim.x + (int)nsm;" in block
    assert "const int nm0 = nb % (int)gridDim.x * BT, nn0 = nb / (int)gridDim.x * BC;" in block


def test_l2next_per_channel_scales_prefetch_only_codes():
    p = _plan(_per_channel())
    assert p.tiles.l2next == 1, p.explain()
    block = _l2next_block(api.source(p))
    assert "l2_prefetch(ncodes" in block and "l2_prefetch(S +" not in block


def test_l2next_off_and_other_forms():
    base = _plan()
    with knobs.override({L2NEXT_KNOB: False}):
        off = _plan()
    assert off.tiles.l2next == 0 and "one wave later" not in api.source(off) and off.kernel_name != base.kernel_name
    for knob, value in ((STREAMK_KNOB, 132), (PDL_RS8_KNOB, True), (WIDENED_KNOB, 2)):
        with knobs.override({knob: value}):
            p = _plan()
        assert p.tiles.l2next == 0 and "one wave later" not in api.source(p), (knob, p.explain())


# ----------------------------------------------------------------------------- the staggered start
def _give_after(src: str) -> int:
    """The chain whose issue warpgroup 0's turn give follows (from the chain comments before it)."""
    head = src[:src.index("consumer_turn_give();  // warpgroup 1 may start")]
    return int(re.findall(r"// tokens (\d+)\.\.\d+: slot rows", head)[-1]) // 64


def test_stagger_default_gives_after_the_first_chain():
    p = _plan()
    assert p.tiles.bm == 256 and p.tiles.stagger == knobs.value(STAGGER_CHAINS_KNOB) == 1
    src = api.source(p)
    assert _give_after(src) == 0 and "start one wgmma chain behind warpgroup 0" in src


def test_stagger_clamped_to_the_tiles_chains(set_knobs):
    set_knobs({STAGGER_CHAINS_KNOB: 3})
    p = _plan(m=192, n=28672)  # the wide form fitted to 192 tokens
    assert p.tiles.bm == 192 and p.tiles.stagger == 2, p.explain()
    assert _give_after(api.source(p)) == 1


def test_stagger_off_knob_wins(set_knobs):
    set_knobs({STAGGER_CHAINS_KNOB: 2, STAGGER_KNOB: False})
    p = _plan()
    assert p.tiles.stagger == 0 and "consumer_turn_give" not in api.source(p)


# ----------------------------------------------------------------------------- converter warps
def test_widened_unset_and_zero_leave_the_consumers_widening(set_knobs):
    base = _plan()
    assert base.tiles.widened == widened_slots() == 0 and "cbar0" not in api.source(base)
    set_knobs({WIDENED_KNOB: 0})
    assert _plan().kernel_name == base.kernel_name


@pytest.mark.parametrize("knob,value", [(STREAMK_KNOB, 132), (PDL_RS8_KNOB, True)])
def test_widened_other_forms_keep_their_plans(knob, value, set_knobs):
    set_knobs({knob: value})
    before = _plan()
    set_knobs({WIDENED_KNOB: 2})
    after = _plan()
    assert after.tiles.widened == 0 and after.kernel_name == before.kernel_name


def test_widened_narrow_and_fitted_tiles_keep_their_plans(set_knobs):
    set_knobs({WIDENED_KNOB: 2})
    for m in (128, 300):  # a 128-token (narrow or wide at 128) and a 192-token fitted tile
        p = _plan(m=m)
        assert p.tiles.widened == 0, p.explain()


# ----------------------------------------------------------------------------- bad knob values
@pytest.mark.parametrize("knob,bad", [(WIDE_KNOB, 192), (CHAIN_KNOB, 32), (STREAMK_KNOB, "many"),
                                      *((NARROW_PF_KNOB, v) for v in (0, 7, "x")),
                                      *((STAGGER_CHAINS_KNOB, v) for v in (0, 4, "x")),
                                      *((WIDE_FROM_KNOB, v) for v in (0, 257, "x")),
                                      *((WIDENED_KNOB, v) for v in (3, -1, "two"))])
def test_bad_knob_values_are_refused(knob, bad, set_knobs):
    with pytest.raises(ProfileError, match=re.escape(knob)):
        set_knobs({knob: bad})
    assert _plan(m=128, n=28672).path == PATH  # nothing was applied
