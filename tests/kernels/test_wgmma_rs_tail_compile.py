"""CPU: the two-warpgroup register-A form's tail option (TileConfig.tail): the tile count it picks, planned with its
grid, workspace and reasons, refused with a clear error where it does not apply; the kernel offsets the K range of the
tail blocks (weights, tables and the producer's tensor copies) and adds the partials in split order; it compiles for
sm_90a without spills or serialized wgmmas; the tuner times it and a tuned entry carrying it comes back as the same
plan."""
import re

import pytest

import humming
from humming import api
from humming.core.common.layout import layout_for
from humming.core.families.register_a.planner import fitted_token_tile, plan_wna16_wgmma_rs, tail_tiles
from humming.core.plan import TAIL_SPLITS
from humming.core.tuning import entries as tuning
from humming.errors import ShapeError

H200 = "nvidia-h200"


def _layout(n=28672, k=8192, group=128, name="w4a16"):
    sch = humming.schemes.get(name)
    sch = sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)
    return layout_for(sch, n, k, "f16", caps=api.resolve_profile(H200))


def _plan(m=128, bt=128, tail=92, n=28672, k=8192, group=128, name="w4a16", small=False, **kw):
    return plan_wna16_wgmma_rs(api.resolve_profile(H200), _layout(n, k, group, name), m, "f16", scheme=name, bt=bt,
                               small=small, tail=tail, **kw)


@pytest.mark.parametrize("tiles,sms,want", [(224, 132, 92), (64, 132, 64), (32, 132, 32), (132, 132, 0),
                                            (256, 132, 0), (896, 132, 0), (3584, 132, 20), (448, 132, 52)])
def test_tail_tiles(tiles, sms, want):
    """The leftover tiles of the last round, where their quarters take fewer quarter rounds than a whole round."""
    assert tail_tiles(tiles, sms) == want


@pytest.mark.parametrize("m,bt,tail", [(128, 128, 92), (256, 256, 92), (300, 128, 20), (65, 128, 224)])
def test_tail_plan_grid_workspace_and_source(m, bt, tail):
    p = _plan(m=m, bt=bt, tail=tail)
    tiles = -(-m // bt) * 224
    fitted = fitted_token_tile(m, bt)  # as many tiles as bt needs, fitted to M (M=300: 3 x 112, M=65: 80)
    assert p.tiles.bm == fitted and p.grid == (1, tiles + 3 * tail, 1) and p.partials == TAIL_SPLITS == 4
    assert p.workspace_floats == tail * 4 * fitted * 128 and p.tiles.raster == 0
    assert re.search(rf"q{tail}m?$", p.kernel_name.split("_")[-2])
    assert any(f"tail {tail}: the last {tail} of {tiles} tiles run as 4 blocks each" in r for r in p.reasons)
    src = api.source(p)
    assert f"constexpr int TAIL = {tail}, TAIL_SPLITS = 4;" in src
    assert "&XMAP, (kt0 + kt) * BK, m0" in src  # the producer copies the block's K range
    assert "((size_t)slab * katoms + kt0) * ATOM_WORDS" in src  # the weights too
    assert "const uint16_t* sp = S + (size_t)((unsigned)(kt0) * BK / 128) * N + tab;" in src  # and the scale rows
    assert "for (int z = 0; z < TAIL_SPLITS; ++z)" in src and "int* counter = CNT + tail;" in src


def test_plan_without_tail_is_unchanged():
    p = _plan(tail=0)
    src = api.source(p)
    assert p.grid == (1, 224, 1) and p.workspace_floats == 0 and "TAIL" not in src and "kt0" not in src
    assert "q" not in p.kernel_name.split("_")[-2]


@pytest.mark.parametrize("kwargs,words", [
    (dict(tail=225), "between 1 and the 224 tiles"),
    (dict(k=8192 + 64 * 2), "must be a multiple of 4"),
    (dict(tma=False), "producer warpgroup"),
    (dict(bt=64, m=64, small=True), "option of the two-warpgroup form"),
    (dict(bt=48, m=48), r"token tiles of 64\.\.256"),
    (dict(bt=136, m=136), r"token tiles of 64\.\.256 \(a multiple of 16\)"),
])
def test_tail_refusals(kwargs, words):
    with pytest.raises(ShapeError, match=words):
        _plan(**kwargs)


@pytest.mark.parametrize("m,bt,tail,group,name", [(128, 128, 92, 128, "w4a16"), (256, 256, 92, None, "w4a16-zp"),
                                                  (128, 128, 64, 64, "w4a16-zp")])
def test_tail_kernels_compile_without_spills(m, bt, tail, group, name, compiled_without_spills):
    p = _plan(m=m, bt=bt, tail=tail, group=group, name=name, n=8192 if tail == 64 else 28672)
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log  # no serialized wgmmas


def test_tuner_times_tail_and_the_entry_comes_back(monkeypatch, tmp_path):
    """The tuner's candidates at one-token-tile M hold the two-warpgroup form with the tail option; a stored entry
    carrying it is planned back with the same tail (on a machine whose live GPU runs the profile's wgmma)."""
    caps = api.resolve_profile(H200)
    monkeypatch.setattr(api, "_wgmma_runs_here", lambda caps: True)  # the CPU machine plans as on an H200
    lay = _layout()
    plans = tuning.candidates(caps, lay, 128, "f16", scheme="w4a16")
    tails = [p for p in plans if p.tiles.tail]
    # the 256-token candidate fits to one tile of 128 at M=128: the same plan, timed once
    assert {p.tiles.tail for p in tails} == {92} and {p.tiles.bm for p in tails} == {128} and len(tails) == 1
    p = next(p for p in tails if p.tiles.bm == 128)
    path = tmp_path / "tune.json"
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(path))
    tuning.clear_memory()
    tuning.record(p, 97.0, scheme="w4a16", device="test")
    tuning.clear_memory()
    back = tuning.tuned_plan(caps, lay, 128, "f16", scheme="w4a16")
    assert back is not None and back.tiles == p.tiles and back.grid == p.grid
