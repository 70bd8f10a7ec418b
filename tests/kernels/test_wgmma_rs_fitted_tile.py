"""CPU: the small register-A form fits its token tile to M (planner_wgmma_rs.fitted_token_tile: a tile's rows past M
cost as much as tokens, and more where the tensor copy zero-fills them), the rule's and a tuned entry's tile alike;
HUMMING_WGMMA_RS_FIT_TILE=0 keeps the tile given; the fitted kernels compile for sm_90a without spills; and a tuned
entry of the two-warpgroup form (bucket 65-128, measured at M=128) runs an M below 128 only where its one 128-token
tile is at least three quarters tokens, and one of 256-token tiles runs 128-token tiles where they hold fewer rows and
256-token ones would be under 70% tokens."""
import pytest

import humming
from humming import api
from humming.core.common.layout import layout_for
from humming.core.families.register_a.planner import FIT_ENV, fitted_token_tile, plan_wna16_wgmma_rs
from humming.core.tuning import entries as tuning

H200 = "nvidia-h200"


def _layout(n=8192, k=8192):
    return layout_for(humming.schemes.get("w4a16"), n, k, "f16", caps=api.resolve_profile(H200))


@pytest.mark.parametrize("m,bt,want", [(9, 16, 16), (17, 32, 32), (33, 64, 48), (49, 64, 64), (65, 128, 80),
                                       (96, 128, 96), (100, 128, 112), (127, 128, 128), (128, 128, 128),
                                       (129, 128, 80), (200, 128, 112), (300, 128, 112), (65, 64, 48), (1000, 128, 128)])
def test_fitted_token_tile(m, bt, want):
    """As many tiles as the given one needs, each M / tiles rounded up to 16, never wider than given."""
    got = fitted_token_tile(m, bt)
    assert got == want and got % 16 == 0 and got <= bt and -(-m // got) == -(-m // bt)


def test_fit_switch_keeps_the_tile(monkeypatch):
    monkeypatch.setenv(FIT_ENV, "0")
    assert fitted_token_tile(65, 128) == 128


@pytest.mark.parametrize("m,bt", [(65, 80), (80, 80), (96, 96), (112, 112), (200, 112), (40, 48)])
def test_small_form_plans_the_fitted_tile(m, bt, monkeypatch):
    """The rule's plan (its 128-token tile from M 65) and a forced tile both take the fitted one, and say so; the
    switch restores the tile given."""
    caps = api.resolve_profile(H200)
    lay = _layout()
    given = 128 if m > 64 else 64
    p = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", bt=given, small=True)
    assert p.tiles.bm == bt and p.instruction.shape == (64, bt, 16) and p.grid[0] == -(-m // bt), p.explain()
    assert any(f"token tile {bt} instead of {given}" in r for r in p.reasons), p.reasons
    rule = humming.plan("w4a16", m, 4096, 4096, profile=H200)  # (no tuned entry for this shape)
    assert rule.tiles.bn == 64 and rule.tiles.bm == fitted_token_tile(m, rule.tiles.bm), rule.explain()
    monkeypatch.setenv(FIT_ENV, "0")
    kept = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", bt=given, small=True)
    assert kept.tiles.bm == given and not any("instead of" in r for r in kept.reasons)


@pytest.mark.parametrize("bt,stages,splits", [(48, 6, 4), (80, 6, 2), (96, 6, 2), (112, 6, 2), (80, 4, 1)])
def test_fitted_tiles_compile_without_spills(bt, stages, splits, compiled_without_spills):
    caps = api.resolve_profile(H200)
    n = 28672 if splits == 1 else 8192
    p = plan_wna16_wgmma_rs(caps, _layout(n), bt, "f16", scheme="w4a16", bt=bt, stages=stages, splits=splits,
                            small=True)
    mod = compiled_without_spills(p, caps)
    assert f"m64n{bt}k16" in mod.ptx and "wgmma.mma_async" in mod.ptx


def test_two_warpgroup_entry_below_128(monkeypatch, tmp_path):
    """An entry of the two-warpgroup form for bucket 65-128 (measured at 128) runs M 97-127 (its 128-token tile at
    least three quarters tokens, rows past M zero-filled by the tensor copy) and leaves M 65-96 to the rules (the
    small form with a fitted tile); its tile is fitted to M too (M=97: 112 tokens)."""
    caps = api.resolve_profile(H200)
    monkeypatch.setattr(api, "_wgmma_runs_here", lambda caps: True)  # the CPU machine plans as on an H200
    lay = _layout(28672)
    entry = plan_wna16_wgmma_rs(caps, lay, 128, "f16", scheme="w4a16", bt=128, small=False)
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(tmp_path / "tune.json"))
    tuning.clear_memory()
    tuning.record(entry, 100.0, scheme="w4a16", device="test")
    tuning.clear_memory()
    for m in (97, 112, 127, 128):
        p = tuning.tuned_plan(caps, lay, m, "f16", scheme="w4a16")
        assert p is not None and p.tiles.bn == 128 and p.tiles.bm == fitted_token_tile(m, 128) and p.grid[0] == 1, (m, p)
        assert p.tiles.bm == (112 if m <= 112 else 128)
    for m in (65, 80, 96):
        assert tuning.tuned_plan(caps, lay, m, "f16", scheme="w4a16") is None, m


@pytest.mark.parametrize("m,fitted,unfitted", [(257, 144, 128), (300, 160, 128), (358, 192, 128), (359, 192, 256),
                                               (380, 192, 256), (400, 208, 256), (512, 256, 256), (129, 144, 256),
                                               (200, 208, 256)])
def test_two_warpgroup_entry_of_256_token_tiles(m, fitted, unfitted, monkeypatch, tmp_path):
    """An entry of 256-token tiles runs M with its tiles fitted to M (as many as 256 needs, each M / tiles rounded up
    to 16); with FIT_ENV=0 with 256, or 128 where 256 would be mostly padding (the rule before the fitting)."""
    caps = api.resolve_profile(H200)
    monkeypatch.setattr(api, "_wgmma_runs_here", lambda caps: True)
    lay = _layout(8192)
    measured_at = 512 if m > 256 else 256
    entry = plan_wna16_wgmma_rs(caps, lay, measured_at, "f16", scheme="w4a16", bt=256, small=False)
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(tmp_path / "tune.json"))
    tuning.clear_memory()
    tuning.record(entry, 100.0, scheme="w4a16", device="test")
    for fit, want in ((None, fitted), ("0", unfitted)):
        if fit is None:
            monkeypatch.delenv(FIT_ENV, raising=False)
        else:  # the rules before the fitting (and before the rounds rules: their 128-token tiles fill rounds badly)
            monkeypatch.setenv(FIT_ENV, fit)
            monkeypatch.setenv("HUMMING_WGMMA_RS_ROUNDS", "0")
        tuning.clear_memory()
        p = tuning.tuned_plan(caps, lay, m, "f16", scheme="w4a16")
        assert p is not None and p.tiles.bn == 128 and p.tiles.bm == want and p.grid[0] == -(-m // want), (m, p)
        assert p.tiles.bm * p.grid[0] - m < 16 * p.grid[0] or fit == "0", "a fitted tile holds < 16 padding rows"
        assert tuning.two_warpgroup_token_tile(m, 256) == (256 if fit is None else unfitted)


@pytest.mark.parametrize("name,group", [("w4a16", 128), ("w4a16-zp", 128), ("w4a16", None), ("w4a16-zp", 256)])
@pytest.mark.parametrize("bt", [80, 96])
def test_wide_tiles_of_three_blocks_keep_six_atoms_in_flight(name, group, bt, compiled_without_spills):
    """Token tiles of 80 / 96 with 6 stages (3 blocks per SM) keep WIDE_TILE_PF weight atoms in flight (4 before),
    without spills on every layout the small form takes."""
    from humming.core.families.register_a.planner import WIDE_TILE_PF, small_ring

    caps = api.resolve_profile(H200)
    assert small_ring(caps, bt, 6) == (WIDE_TILE_PF, 3) and small_ring(caps, bt, 4) == (2, 3)
    sch = humming.schemes.get(name)
    sch = sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)
    lay = layout_for(sch, 8192, 8192, "f16", caps=caps)
    p = plan_wna16_wgmma_rs(caps, lay, bt, "f16", scheme=name, bt=bt, stages=6, splits=2, small=True)
    assert f"{WIDE_TILE_PF} atoms ahead" in " ".join(p.reasons), p.reasons
    compiled_without_spills(p, caps)


@pytest.mark.parametrize("bt", [80, 144, 160, 192, 224, 240])
def test_two_warpgroup_fitted_tiles_compile_without_spills(bt, compiled_without_spills):
    """The two-warpgroup form's kernels at fitted token tiles (plain launch, the 6-atom ring below M 1024) compile for
    sm_90a without spills or serialized wgmmas (ptxas C7510-C7519)."""
    import re

    caps = api.resolve_profile(H200)
    p = plan_wna16_wgmma_rs(caps, _layout(), bt, "f16", scheme="w4a16", bt=bt, small=False)
    assert p.tiles.bm == bt and p.tiles.bn == 128 and not p.tiles.streamk
    mod = compiled_without_spills(p, caps)
    assert not re.search(r"C751\d", mod.log), mod.log


@pytest.mark.parametrize("m", [150, 300, 513])
def test_two_warpgroup_fitted_streamk_kernels_compile(m):
    """... and with stream-K (fitted 160 / 160 / 176 tokens): at most the 8-byte spill outside the main loop that
    ptxas leaves at some of these tiles (2026-12-01: 176 and 192 tokens), no serialized wgmmas."""
    import re

    from humming.core.compile.compiler import compile_cuda
    from humming.core.compile.nvrtc import select_toolchain
    from humming.devices import get_backend
    from humming.errors import UnsupportedOnDevice

    caps = api.resolve_profile(H200)
    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    p = plan_wna16_wgmma_rs(caps, _layout(28672), m, "f16", scheme="w4a16", bt=256, small=False, streamk=132)
    assert p.tiles.bm == fitted_token_tile(m, 256) and p.tiles.streamk == 132
    mod = compile_cuda(api.source(p, caps), [p.kernel_name], route.arch, options=(*route.options, "--ptxas-options=-v"),
                       cache=False)
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
    assert spills and max(spills) <= 8 and not re.search(r"C751\d", mod.log), mod.log
