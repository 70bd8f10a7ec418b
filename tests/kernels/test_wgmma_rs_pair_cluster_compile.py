"""CPU: the two-warpgroup register-A form in thread-block clusters of two blocks (TileConfig.cluster = 2,
humming.core.families.register_a.pair_cluster; HUMMING_WGMMA_RS_CLUSTER=2): planned with its cluster shape and reason, refused with a
clear error where it does not apply, the kernel text rewritten (pairs of channel tiles, both blocks' releases, one
multicast copy a stage), compiled for sm_90a without spills or serialized wgmmas; on by default for plain plans of
256-token tiles from M 1024 (measured on the H200: planner_wgmma_rs.PAIR_CLUSTER_ENV), off elsewhere and with
HUMMING_WGMMA_RS_CLUSTER=0 (the GPU runs: tests/gpu/test_wgmma_rs_pair_cluster_gpu.py)."""
import re

import pytest

import humming
from humming import api
from humming.core.common.layout import layout_for
from humming.core.families.register_a.planner import PAIR_CLUSTER_ENV, PAIR_CLUSTER_MIN_M, plan_wna16_wgmma_rs
from humming.errors import ShapeError

H200 = "nvidia-h200"


def _plan(m=1024, n=8192, k=8192, bt=None, group=128, name="w4a16", **kw):
    sch = humming.schemes.get(name)
    sch = sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)
    caps = api.resolve_profile(H200)
    return plan_wna16_wgmma_rs(caps, layout_for(sch, n, k, "f16", caps=caps), m, "f16", scheme=name, bt=bt,
                               small=False, **kw)


@pytest.mark.parametrize("m,bt,raster", [(1024, 256, True), (128, 128, True), (300, 160, False)])
def test_pair_plan_and_source(m, bt, raster, monkeypatch):
    if not raster:
        monkeypatch.setenv("HUMMING_WGMMA_RS_RASTER", "0")
    p = _plan(m=m, bt=bt, cluster=2)
    assert p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) and "c2" in p.kernel_name
    assert any("clusters of 2 blocks" in r for r in p.reasons)
    src = api.source(p)
    assert ("pairs_y = gridDim.y >> 1" in src) == raster and "const int crank = blockIdx.y & 1" in src
    assert "mbar_init(xbar0 + 8 * (STAGES + s), 2 * THREADS / 32);" in src and "cluster_sync();  // both blocks'" in src
    assert "if (kt % 2 == crank)" in src and "tma_load_2d_multicast(x0 + s * X_BYTES, &XMAP, kt * BK, m0, xbar0 + 8 * s, (uint16_t)3);" in src
    assert "kt - 1 + STAGES < ktiles" in src and src.count("mbar_arrive_peer(empty, ") == 2
    assert "mbar_arrive(empty)" not in src and "tma_load_2d(x0 + s * X_BYTES" not in src


def test_pair_changes_nothing_else(monkeypatch):
    """Without the cluster the source is the form's own; with it, only the rewritten lines differ."""
    pair = api.source(_plan(cluster=2))
    monkeypatch.setenv(PAIR_CLUSTER_ENV, "0")
    plain = api.source(_plan())
    assert plain != pair and "crank" not in plain.split("extern \"C\"")[1]
    assert pair.split("extern \"C\"")[1].count("\n") - plain.split("extern \"C\"")[1].count("\n") < 12


@pytest.mark.parametrize("kwargs,words", [
    (dict(cluster=4), "take 2 blocks"),
    (dict(cluster=2, streamk=131), "even block count"),
    (dict(cluster=2, m=128, bt=128, tail=92, n=28672), "exclude tail"),
    (dict(cluster=2, n=8320), "do not pair up"),
])
def test_pair_refusals(kwargs, words):
    with pytest.raises(ShapeError, match=words):
        _plan(**kwargs)


def test_env_asks_for_pairs_where_they_apply(monkeypatch):
    monkeypatch.setenv(PAIR_CLUSTER_ENV, "2")
    assert _plan().tiles.cluster == 2
    sk = _plan(streamk=132)  # stream-K in pairs: only when asked
    assert sk.tiles.cluster == 2 and any("stream-K in clusters of 2 blocks" in r for r in sk.reasons)
    odd = _plan(streamk=131)
    assert odd.tiles.cluster == 0 and any("no cluster" in r and "even block count" in r for r in odd.reasons)
    monkeypatch.setenv(PAIR_CLUSTER_ENV, "3")
    with pytest.raises(ValueError, match="expected 0 or 2"):
        _plan()
    monkeypatch.setenv(PAIR_CLUSTER_ENV, "0")
    assert _plan().tiles.cluster == 0
    monkeypatch.delenv(PAIR_CLUSTER_ENV)
    on = _plan()  # by default: M 1024, 256-token tiles, no stream-K or tail
    assert on.tiles.bm == 256 and on.tiles.cluster == 2 and any("by default" in r for r in on.reasons)
    assert _plan(m=4096, n=28672).tiles.cluster == 2
    sk = _plan(m=4096, n=28672, streamk=132)  # stream-K plans of 256-token tiles too
    assert sk.tiles.cluster == 2 and any("stream-K in clusters of 2 blocks (from M 1024" in r for r in sk.reasons)
    for kw in (dict(m=PAIR_CLUSTER_MIN_M - 1), dict(bt=128), dict(m=768, bt=192), dict(streamk=131), dict(m=128),
               dict(m=768, streamk=132), dict(bt=128, streamk=132)):
        p = _plan(**kw)
        assert p.tiles.cluster == 0 and not any("cluster" in r for r in p.reasons), kw  # (silently not by default)
    assert _plan(n=8320).tiles.cluster == 0  # 65 channel tiles: no pairs


@pytest.mark.parametrize("m,bt,group,name", [(1024, 256, 128, "w4a16"), (128, 128, None, "w4a16-zp")])
def test_pair_kernels_compile_without_spills(m, bt, group, name, compiled_without_spills):
    p = _plan(m=m, bt=bt, group=group, name=name, n=28672, cluster=2)
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log  # no serialized wgmmas


@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_pair_rewrite_independent_of_row_scale(act, monkeypatch):
    """The pairs change the same lines of the kernel with or without per-token output scales (Plan.row_scale, the
    widened W4A8 path, which takes the default pairs from M 1024): the rewrite touches the copies, the releases and
    the block -> tile map, never the epilogue that applies the row scales."""
    import difflib
    from dataclasses import replace

    def lines(cluster: str, row_scale: bool):
        monkeypatch.setenv(PAIR_CLUSTER_ENV, cluster)
        caps = api.resolve_profile(H200)
        sch = humming.schemes.get("w4a16")
        p = plan_wna16_wgmma_rs(caps, layout_for(sch, 8192, 1024, act, caps=caps), 1024, act, scheme="w4a16",
                                small=False)
        p = replace(p, row_scale=True) if row_scale else p
        return api.source(p).replace(p.kernel_name, "KERNEL").splitlines()

    def changed(a, b):
        return [ln for ln in difflib.unified_diff(a, b, lineterm="", n=0) if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]

    plain = changed(lines("0", False), lines("2", False))
    scaled = changed(lines("0", True), lines("2", True))
    assert plain and plain == scaled
    assert "load_f32(GS + t0)" in "\n".join(lines("2", True)) and not any("GS" in ln for ln in scaled)


@pytest.mark.parametrize("early", [False, True])
def test_streamk_pair_source(early, monkeypatch):
    """Stream-K in pairs (asked for: cluster=2 with streamk): the schedule's units are the block pairs and its tiles
    pairs of channel tiles, each block its half; the producer's copy in turn by the global stage count; both blocks'
    slots released except the last STAGES stages of the run; the split tiles' halves with their own counters and
    slots; the early ring composes with it."""
    from humming.core.families.register_a.planner import EARLY_ENV

    if early:
        monkeypatch.setenv(EARLY_ENV, "1")
    p = _plan(m=4096, n=28672, streamk=132, cluster=2)
    assert p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) and p.grid == (1, 132, 1) and re.search(r"c2(p\d+)?k132", p.kernel_name)
    src = api.source(p)
    assert "static constexpr int P = 66, katoms = 128;" in src and "tiles_y = N / (2 * cfg::BC);" in src
    for unpaired in ("run_start(blockIdx.y)", "next(blockIdx.y,", "(int)blockIdx.y + 1", "CNT + (tile - sk.dp_tiles)"):
        assert unpaired not in src, unpaired  # (the schedule's unit is the pair, blockIdx.y >> 1)
    assert src.count("StreamK(M, N).next(blockIdx.y >> 1, ") == (3 if early else 2)
    assert "n0 += (blockIdx.y & 1) * BC;  // this block's channel tile of the pair" in src
    assert ("n0 += (blockIdx.y & 1) * BC;\n" in src) == early  # (the early ring's next tile too)
    assert "if (it % 2 == (blockIdx.y & 1))" in src and "tma_load_2d_multicast(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0" in src
    assert "it0 + kt - 1 + STAGES < total_stages" in src and src.count("mbar_arrive_peer(empty, ") == 2
    assert "int* counter = CNT + 2 * (tile - sk.dp_tiles) + (blockIdx.y & 1);" in src
    assert "(size_t)(2 * bj + (blockIdx.y & 1)) * SPLIT_FLOATS" in src and "cluster_sync();" in src
    assert "mbar_arrive(empty)" not in src and "tma_load_2d(x0 + s * X_BYTES" not in src


@pytest.mark.parametrize("m,bt", [(4096, 256), (128, 128)])
def test_streamk_pair_kernels_compile(m, bt, compiled_without_spills):
    p = _plan(m=m, bt=bt, n=28672, streamk=132, cluster=2)
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log
