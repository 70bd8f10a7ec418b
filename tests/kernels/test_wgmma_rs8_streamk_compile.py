"""CPU: the wide register-A W4A8 form's stream-K option (TileConfig.streamk): the consumers' segment function (a
model of the kernel's streamk_segment) visits the same segments as the producer's schedule, every atom of every tile
once, with the stage count before each; the plan's grid, workspace, shared memory, reasons and default rule; the
switch's refusals; the kernel compiles for sm_90a without spills or serialized wgmmas, for both operand types and both
chain widths, and the forms without stream-K keep their source."""
import re

import pytest
from test_wgmma_rs_streamk_compile import _segments  # the W4A16 form's schedule model (the producer's order)

import humming
from humming import api
from humming.core.families.register_a8.layout import WgmmaRs8Layout
from humming.core.families.register_a8.planner import STREAMK_ENV, plan_w4a8_wgmma_rs, smem_bytes
from humming.errors import ShapeError, UnsupportedOnDevice

H200 = "nvidia-h200"


def _consumer_segment(tiles: int, katoms: int, blocks: int, b: int, seg: int):
    """streamk_segment of generator_wgmma_rs8_streamk in Python: (tile, kt0, ktiles, it0) or None past the last."""
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
    covered = set()
    producer = _segments(tiles, katoms, blocks)[0]  # per block, the producer's order (StreamK.next)
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


def _layout(a_type="e4m3", n=8192, k=8192, group=128):
    return WgmmaRs8Layout(a_type, n, k, group)


def _plan(m=4096, a_type="e4m3", n=8192, k=8192, group=128, **kw):
    return plan_w4a8_wgmma_rs(api.resolve_profile(H200), _layout(a_type, n, k, group), m, "f16", scheme="w4a8",
                              **kw)


def test_streamk_plan(monkeypatch):
    monkeypatch.delenv(STREAMK_ENV, raising=False)
    p = _plan(streamk=132)  # 1024 wide tiles on 132 SMs: 7.76 a SM
    assert p.tiles.streamk == 132 and p.grid == (1, 132, 1) and p.tiles.bm == 256
    assert p.workspace_floats == 132 * 2 * 256 * 128 and p.tiles.stages == 5
    assert p.smem_bytes == smem_bytes(5, 256, True) == 5 * (32768 + 8192 + 512) + 2 * 64 * 72 * 2 + 2048 + 1024
    assert p.smem_bytes <= 227 * 1024 and p.kernel_name.split("_")[-2].endswith("k132")
    assert any("100 tiles left split evenly" in r and "7 wave(s)" in r for r in p.reasons), p.reasons
    assert _plan(streamk=0).tiles.streamk == 0 and _plan(streamk=0).grid == (16, 64, 1)


# (M, N, blocks by default): stream-K from one wide tile per SM where the rounds of whole tiles are < 84% full
@pytest.mark.parametrize("m,n,expect", [(4096, 8192, 0), (4096, 28672, 0), (1024, 8192, 0), (768, 8192, 132),
                                        (1280, 8192, 132), (1280, 4096, 132), (768, 4096, 0), (256, 28672, 0),
                                        (768, 28672, 0), (1280, 28672, 0), (512, 8192, 0), (300, 1024, 0)])
def test_default_rule(m, n, expect, monkeypatch):
    monkeypatch.delenv(STREAMK_ENV, raising=False)
    monkeypatch.delenv("HUMMING_WGMMA_W4A8_RS_BT", raising=False)
    p = _plan(m=m, n=n)
    assert p.tiles.streamk == expect, p.reasons
    assert p.tiles.bm == 128 or any(("stream-K by default" if expect else "no stream-K") in r for r in p.reasons)


# (M, N, token tile): 256 where the wide blocks fill 3/4 of the SMs or the narrow ones need more rounds, fitted to M
# in whole 64-token chains (M=384: two tiles of 192; HUMMING_WGMMA_RS_FIT_TILE=0: 256; M=200 on 28672 channels: one
# of 256, 128 with the narrow form's rule before the twenty-fifth session)
@pytest.mark.parametrize("m,n,bt", [(768, 4096, 256), (512, 4096, 128), (256, 8192, 128), (384, 8192, 192),
                                    (256, 28672, 256), (200, 28672, 256), (160, 28672, 192), (300, 28672, 192),
                                    (513, 8192, 192), (577, 8192, 256)])
def test_token_tile_rule(m, n, bt, monkeypatch):
    from humming.core.families.register_a8.planner import FIT_ENV, planned_token_tile

    monkeypatch.delenv("HUMMING_WGMMA_W4A8_RS_BT", raising=False)
    monkeypatch.delenv(FIT_ENV, raising=False)
    p = _plan(m=m, n=n, k=14336 if n == 4096 else 8192)
    assert p.tiles.bm == bt == planned_token_tile(m, True, n, 132)
    if bt == 192:
        assert any("192 tokens instead of 256" in r for r in p.reasons), p.explain()
        assert "3 quarters x m64n64k32" in p.explain()
        monkeypatch.setenv(FIT_ENV, "0")
        assert _plan(m=m, n=n).tiles.bm == 256
        monkeypatch.delenv(FIT_ENV)
        monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_BT", "256")  # a forced tile is not fitted
        assert _plan(m=m, n=n).tiles.bm == 256


@pytest.mark.parametrize("m,n,k,blocks,planned", [(300, 256, 256, 13, 8), (256, 128, 128, 132, 1),
                                                  (300, 1024, 4096, 132, 132), (1024, 768, 2048, 7, 7)])
def test_every_block_has_a_segment(m, n, k, blocks, planned, monkeypatch):
    """A block without segments would hang in the staggered start (warpgroup 1 waits for a turn warpgroup 0 gives at
    the block's first stage; seen on the H200): the plan launches at most as many blocks as the tiles' k atoms."""
    monkeypatch.setenv(STREAMK_ENV, str(blocks))
    p = _plan(m=m, n=n, k=k, tokens=256)
    assert p.tiles.streamk == planned and p.grid == (1, planned, 1)
    tiles = -(-m // 256) * (n // 128)
    assert all(_consumer_segment(tiles, k // 128, planned, b, 0) is not None for b in range(planned))


def test_switch(monkeypatch):
    monkeypatch.setenv(STREAMK_ENV, "0")
    assert _plan().tiles.streamk == 0
    monkeypatch.setenv(STREAMK_ENV, "7")
    p = _plan(m=1024)
    assert p.tiles.streamk == 7 and p.grid == (1, 7, 1)
    monkeypatch.setenv(STREAMK_ENV, "many")
    with pytest.raises(ValueError, match=STREAMK_ENV):
        _plan()


def test_refusals(monkeypatch):
    monkeypatch.delenv(STREAMK_ENV, raising=False)
    with pytest.raises(UnsupportedOnDevice, match="wide register-A W4A8 form"):
        _plan(m=4096, tokens=128, streamk=132)
    with pytest.raises(ShapeError, match="1..65535"):
        _plan(streamk=70000)
    assert _plan(m=4096, tokens=128).tiles.streamk == 0  # the narrow form never takes the rule's stream-K


@pytest.mark.parametrize("a_type,chain,group", [("e4m3", "64", 128), ("s8", "64", None), ("e4m3", "128", None),
                                                ("s8", "128", 128)])
def test_streamk_kernels_compile(a_type, chain, group, compiled_without_spills, monkeypatch):
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CHAIN", chain)
    p = _plan(a_type=a_type, group=group or 8192, streamk=132)
    src = api.source(p)
    assert "streamk_segment(StreamK(M, N), block_y(), seg, tile, kt0, ktiles, it0)" in src
    assert f"static constexpr int P = 132, katoms = {p.k // p.tiles.bk};" in src
    assert "mbar_wait(xbar0 + 8 * s, ((it0 + kt) / STAGES) & 1)" in src and "const int s = (it0 + kt) % STAGES;" in src
    assert "atomic_add_i32(counter, ktiles)" in src and "warpgroup_sync(wg);" in src
    # the staggered start: warpgroup 1 waits for the turn once, warpgroup 0 gives it at the block's first stage (so
    # every block needs a segment: test_every_block_has_a_segment)
    assert src.count("consumer_turn_take();") == 1 and src.count("consumer_turn_give();") == 1
    assert "if (wg == 0 && it0 + kt == 0" in src
    # the linear widening (the default): no tables, the lane's slot addresses on the held zero
    assert "la0 = lds_32" not in src and ("int4_to_e4m3x8(wq[j >> 2][j & 3]" in src) == (a_type == "e4m3")
    assert "zero = lds_32(held0 + 16);" in src and "lane * 16 + zero;" in src
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log  # no serialized wgmmas
    assert mod.ptx.count("wgmma.mma_async") >= 4 and re.search(r"bar\.sync\s+%r", mod.ptx)  # the warpgroup barrier


def test_without_streamk_the_source_is_the_wide_form(monkeypatch):
    """streamk = 0 gives the wide form's own kernel (no schedule, the token-scale warp, the staging in the slots)."""
    p = _plan(streamk=0)
    src = api.source(p)
    assert "StreamK" not in src and "block_y" not in src and "mbar_init(xbar0 + 8 * (2 * STAGES), 32);" in src
    assert humming.plan("w4a8-fp8", m=4096, n=8192, k=8192, profile=H200).tiles.streamk == 0


@pytest.mark.parametrize("a_type,chain,raster", [("e4m3", "64", "4"), ("s8", "128", "0")])
def test_cluster_option(a_type, chain, raster, compiled_without_spills, monkeypatch):
    """HUMMING_WGMMA_W4A8_RS_CLUSTER=2: clusters of two blocks (1 x 2 x 1) taking turns multicasting the activation
    stages; the pair shares a token tile (the tile of block formula in Python: every pair's two channel tiles are
    adjacent, every tile once); compiles for sm_90a without spills; refused beside stream-K and on odd tile counts."""
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CLUSTER", "2")
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CHAIN", chain)
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_RASTER", raster)
    p = _plan(a_type=a_type, streamk=0)
    assert p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) and p.grid == (16, 64, 1)
    src = api.source(p)
    assert "tma_load_2d_multicast(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full, (uint16_t)3);" in src
    assert "mbar_init(xbar0 + 8 * (STAGES + s), 2 * THREADS / 32);" in src and "cluster_sync();" in src
    assert src.count("mbar_arrive_peer(xbar0 + 8 * (STAGES + s), ") == 2 and "kt + STAGES < ktiles" in src
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log
    # the pair mapping (the kernel's _CLUSTER_TILE) covers every tile once, the pair on one token tile
    gx, gy, r = 16, 64, int(raster)
    seen = set()
    for by in range(gy):
        for bx in range(gx):
            crank, pairs_y = by & 1, gy >> 1
            if r:
                bid, per_group = bx + (by >> 1) * gx, r * pairs_y
                first = bid // per_group * r
                rows = min(gx - first, r)
                m0, n0 = first + bid % per_group % rows, 2 * (bid % per_group // rows) + crank
            else:
                m0, n0 = bx, by
            seen.add((m0, n0))
            if crank == 1:
                assert (m0, n0 - 1) in seen  # the rank-0 block of the pair: same token tile, the channel tile before
    assert len(seen) == gx * gy
    assert _plan(streamk=132).tiles.cluster == 0  # stream-K first
    assert _plan(n=128 * 3, m=4096, streamk=0).tiles.cluster == 0  # 3 channel tiles: no pairs


@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
@pytest.mark.parametrize("streamk", [0, 132])
def test_wide_192_token_kernels_compile_without_spills(a_type, streamk, compiled_without_spills, monkeypatch):
    """The wide form at 192 tokens (three 64-token chains, fitted to M=300), plain and with stream-K, compiles for
    sm_90a without spills or serialized wgmmas; the loop issues three chains a stage."""
    monkeypatch.delenv("HUMMING_WGMMA_W4A8_RS_BT", raising=False)
    monkeypatch.delenv("HUMMING_WGMMA_RS_FIT_TILE", raising=False)
    monkeypatch.setenv(STREAMK_ENV, str(streamk))
    p = _plan(m=300, a_type=a_type)
    assert p.tiles.bm == 192 and p.tiles.streamk == streamk
    src = api.source(p)
    assert "tokens 128..191: slot rows + 128" in src and "tokens 192..255" not in src
    mod = compiled_without_spills(p, api.resolve_profile("nvidia-h200"))
    assert not re.search(r"C751\d", mod.log), mod.log
