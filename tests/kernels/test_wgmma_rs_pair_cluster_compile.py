"""CPU: the two-warpgroup register-A form in thread-block clusters of two blocks (TileConfig.cluster = 2,
humming.core.pair_cluster; HUMMING_WGMMA_RS_CLUSTER=2): planned with its cluster shape and reason, refused with a
clear error where it does not apply, the kernel text rewritten (pairs of channel tiles, both blocks' releases, one
multicast copy a stage), compiled for sm_90a without spills or serialized wgmmas. Off by default (not GPU-run yet:
tests/gpu/test_wgmma_rs_pair_cluster_gpu.py runs it)."""
import re

import pytest

import humming
from humming import api
from humming.core.layout import layout_for
from humming.core.planner_wgmma_rs import PAIR_CLUSTER_ENV, plan_wna16_wgmma_rs
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


def test_pair_changes_nothing_else():
    """Without the cluster the source is the form's own; with it, only the rewritten lines differ."""
    plain, pair = api.source(_plan()), api.source(_plan(cluster=2))
    assert plain != pair and "crank" not in plain.split("extern \"C\"")[1]
    assert pair.split("extern \"C\"")[1].count("\n") - plain.split("extern \"C\"")[1].count("\n") < 12


@pytest.mark.parametrize("kwargs,words", [
    (dict(cluster=4), "take 2 blocks"),
    (dict(cluster=2, streamk=132), "exclude stream-K"),
    (dict(cluster=2, m=128, bt=128, tail=92, n=28672), "exclude stream-K and tail"),
    (dict(cluster=2, n=8320), "do not pair up"),
])
def test_pair_refusals(kwargs, words):
    with pytest.raises(ShapeError, match=words):
        _plan(**kwargs)


def test_env_asks_for_pairs_where_they_apply(monkeypatch):
    monkeypatch.setenv(PAIR_CLUSTER_ENV, "2")
    assert _plan().tiles.cluster == 2
    sk = _plan(streamk=132)
    assert sk.tiles.cluster == 0 and any("no cluster" in r and "stream-K" in r for r in sk.reasons)
    monkeypatch.setenv(PAIR_CLUSTER_ENV, "3")
    with pytest.raises(ValueError, match="expected 0 or 2"):
        _plan()
    monkeypatch.delenv(PAIR_CLUSTER_ENV)
    assert _plan().tiles.cluster == 0  # off by default


@pytest.mark.parametrize("m,bt,group,name", [(1024, 256, 128, "w4a16"), (128, 128, None, "w4a16-zp")])
def test_pair_kernels_compile_without_spills(m, bt, group, name, compiled_without_spills):
    p = _plan(m=m, bt=bt, group=group, name=name, n=28672, cluster=2)
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log  # no serialized wgmmas
