"""CPU: the planning rules of the register-A W4A16 family (humming.core.families.register_a): when the kernel is
chosen, the small form's default rule, token tiles fitted to M, the weight ring depth, the occupancy option, stream-K
(its schedule modelled in Python), the tail option, the small form's multicast clusters and the two-warpgroup form's
pairs, the stmatrix staging, the refusals, tuned entries carrying the options, and the tuning knobs that switch
each variant (tests/kernels/test_register_a_compile.py compiles the kernels)."""
import itertools
import re
from dataclasses import replace

import pytest
import torch

import humming
from humming import api
from humming.core.families.mma_wna16 import tuned
from humming.core.families.mma_wna16.candidates import candidates
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.families.register_a.layout import layout_refusal
from humming.core.families.register_a.planner import (
    BC,
    CLUSTER_SIZES,
    OCCUPANCY_PF,
    OUT_PAD,
    PAIR_CLUSTER_MIN_M,
    PATH,
    fitted_token_tile,
    plan_wna16_wgmma_rs,
    small_default,
    small_ring,
    smem_bytes,
    tail_tiles,
)
from humming.core.plan import TAIL_SPLITS
from humming.core.problem import Problem
from humming.core.registry import select
from humming.core.runtime.kernel import ArgBlock, LaunchError, LoadedKernel
from humming.core.tuning import entries as tuning
from humming.core.tuning import knobs
from humming.errors import ProfileError, ShapeError, UnsupportedOnDevice

H200 = "nvidia-h200"
# the tuning knobs (humming.core.tuning.knobs) these tests set or find named in the plans' reasons
MIN_M_KNOB = "register_a.min_m"
ANY_GROUP = "register_a.any_group"
TMA_KNOB = "register_a.tma"
WS_KNOB = "register_a.producer"
RING_KNOB = "register_a.prefetch"
RASTER_KNOB = "register_a.raster"
STSM_KNOB = "register_a.stmatrix"
EARLY_KNOB = "register_a.early_ring"
ROUNDS_KNOB = "register_a.rounds_rules"
PAIR_CLUSTER_KNOB = "register_a.cluster"
FIT_KNOB = "wgmma.fit_token_tile"
STAGGER_KNOB = "wgmma.stagger"
WNA16_KNOB = "wgmma_wna16.enabled"


# ----------------------------------------------------------------------------- helpers (also used by the other files)
def _caps(name=H200):
    return api.resolve_profile(name)


def _scheme(name="w4a16", group=128):
    """The scheme ``name`` with groups of ``group`` (None: per-channel scales)."""
    sch = humming.schemes.get(name)
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _layout(sch="w4a16", n=8192, k=8192, act="f16", profile=H200):
    """The layout of ``sch`` (a scheme or a name, brackets included) as ``profile`` gets it (tile-major pair order
    where it has wgmma); profile None: the layout without a profile (step-major)."""
    sch = humming.schemes.get(sch) if isinstance(sch, str) else sch
    return layout_for(sch, n, k, act, caps=None if profile is None else _caps(profile))


def _plan(m=1024, n=8192, k=8192, name="w4a16", group=128, act="f16", profile=H200, caps=None, **options):
    """plan_wna16_wgmma_rs on the layout of ``name`` with ``group`` (profile None: the profile-less layout);
    ``options`` go to the planner (bt, small, streamk, tail, cluster, occupancy, ...)."""
    lay = _layout(_scheme(name, group), n, k, act, profile)
    return plan_wna16_wgmma_rs(caps or _caps(), lay, m, act, scheme=name, **options)


# ----------------------------------------------------------------------------- when the kernel is chosen
def test_the_knobs_named_here_are_declared():
    assert {MIN_M_KNOB, ANY_GROUP, TMA_KNOB, WS_KNOB, RING_KNOB, RASTER_KNOB, STSM_KNOB, EARLY_KNOB, ROUNDS_KNOB,
            PAIR_CLUSTER_KNOB, FIT_KNOB, STAGGER_KNOB, WNA16_KNOB} <= set(knobs.KNOBS)


def test_selection_is_opt_in_and_gated():
    caps = _caps()
    sch = humming.schemes.get("w4a16")
    # the default: the two-warpgroup form (the register_a family) from M = 513, its small form below
    assert select(Problem(sch, 512, 1024, 2048, "f16"), caps).family.name != "register_a"
    assert select(Problem(sch, 513, 1024, 2048, "f16"), caps).family.name == "register_a"
    small = humming.plan("w4a16", 512, 1024, 2048, profile=H200)
    assert small.path == PATH and small.tiles.bn == 64 and small.tiles.bm == 128, small.explain()
    assert humming.plan("w4a16", 513, 1024, 2048, profile=H200).tiles.bn == 128
    assert humming.plan("w4a16", 1024, 1024, 2048, profile=H200).tiles.bn == 128
    for name, group in itertools.product(("w4a16", "w4a16-zp"), (128, None)):  # the GPU-tested layouts
        assert humming.plan(_scheme(name, group), 4096, 1024, 2048, profile=H200).path == PATH, (name, group)
    for group in (64, 256):  # GPU-tested: the default takes them
        assert humming.plan(_scheme("w4a16", group), 4096, 1024, 2048, profile=H200).path == PATH, group
    assert humming.plan(_scheme("w4a16", 512), 4096, 1024, 2048, profile=H200).path != PATH  # not GPU-tested
    with knobs.override({MIN_M_KNOB: None}):  # never: the dequant-smem wgmma kernel
        assert humming.plan("w4a16", 4096, 1024, 2048, profile=H200).path == "wgmma-dequant-smem"
        assert humming.plan("w4a16", 1023, 1024, 2048, profile=H200).path == "wgmma-dequant-smem"
        assert humming.plan("w4a16", 513, 1024, 2048, profile=H200).path == "wgmma-dequant-smem"
        assert humming.plan("w4a16", 1024, 1024, 2048, profile=H200).path != PATH
    with knobs.override({MIN_M_KNOB: 128, ANY_GROUP: True}):  # from one 128-token tile, every group it runs
        for act, name, group in itertools.product(("f16", "bf16"), ("w4a16", "w4a16-zp"), (128, 64, 256, None)):
            p = humming.plan(_scheme(name, group), 1024, 1024, 2048, profile=H200, act=act)
            assert p.family == "wgmma" and p.path == PATH, p.explain()
            assert PATH in p.explain() and MIN_M_KNOB in p.explain()
        assert humming.plan("w4a16", 128, 1024, 2048, profile=H200).path == PATH
        with knobs.override({WNA16_KNOB: False}):  # keeps the mma.sync kernels, this one too
            assert humming.plan("w4a16", 1024, 1024, 2048, profile=H200).family == "mma_sync"
        assert humming.plan("w4a16", 127, 1024, 2048, profile=H200).tiles.bn == 64  # below one 128-token tile
        assert humming.plan("w4a16", 1024, 1088, 2048, profile=H200).path != PATH  # N % 128
        # groups of 32 and e2m1 codes: decoded with a table row per group (tests/kernels/test_register_a_float_codes.py)
        assert humming.plan(_scheme("w4a16", 32), 1024, 1024, 2048, profile=H200).path == PATH
        assert humming.plan("w4a16-fp4", 1024, 1024, 2048, profile=H200).path == PATH
        for other in ("w8a16", "w2a16"):  # not 4-bit codes: the other kernels
            assert humming.plan(other, 1024, 1024, 2048, profile=H200).path != PATH, other
        for profile in ("nvidia-l40s", "nvidia-a100", "nvidia-b300"):
            assert humming.plan("w4a16", 1024, 1024, 2048, profile=profile).path != PATH


def test_names_are_distinct():
    p = _plan(n=1024, k=4096, act="f16", bt=256)
    q = _plan(n=1024, k=4096, act="bf16", bt=256)
    z = _plan(n=1024, k=4096, name="w4a16-zp", bt=256)
    assert len({p.kernel_name, q.kernel_name, z.kernel_name}) == 3
    assert p.kernel_name.startswith("hm_wna16_wgmmars_")
    small = humming.plan("w4a16", 512, 1024, 4096, profile=H200)  # the small form (default below 1024)
    assert small.tiles.bn == 64 and small.kernel_key != p.kernel_key and small.kernel_name != p.kernel_name


def test_plan_refuses_what_it_does_not_run():
    caps = _caps()
    with pytest.raises(UnsupportedOnDevice, match="zero group 32 is not a multiple of 64"):
        plan_wna16_wgmma_rs(caps, layout_for(_scheme("w4a16-zp", 32), 1024, 2048, "f16"), 1024, "f16")
    with pytest.raises(ShapeError, match="multiple of 128"):
        plan_wna16_wgmma_rs(caps, layout_for(_scheme(), 1088, 2048, "f16"), 1024, "f16")
    with pytest.raises(UnsupportedOnDevice, match="4-bit integer"):
        plan_wna16_wgmma_rs(caps, layout_for(humming.schemes.get("w8a16"), 1024, 2048, "f16"), 1024, "f16")
    with pytest.raises(UnsupportedOnDevice, match="declares no wgmma"):
        plan_wna16_wgmma_rs(_caps("nvidia-l40s"), layout_for(_scheme(), 1024, 2048, "f16"), 1024, "f16")
    assert layout_refusal(layout_for(_scheme("w4a16-zp", 128), 1024, 2048, "bf16")) == ""


def test_token_tile_and_shared_memory():
    def tile(m, n, **kw):
        return _plan(m=m, n=n, k=4096, **kw).tiles.bm

    assert tile(4096, 8192) == 256
    # 256-token tiles would leave most SMs idle: 128, then fitted to M (two tiles of 100 rows -> 112 each)
    assert tile(200, 2048) == 112
    assert tile(300, 8192) == 160  # two 256-token tiles fitted: 2 x 160 rows for 300 tokens
    assert tile(300, 8192, tma=False) == 160  # the cp.async copies: whole passes of 32 rows
    assert tile(270, 8192, tma=False) == 160 and tile(270, 8192) == 144
    assert tile(1100, 8192) == 224  # 5 tiles of 220 rows -> 224 each (1120 rows, not 1280)
    assert tile(4096, 8192) == 256 and tile(4100, 8192) == 256  # 17 x 241.2 -> 256
    for bt in (128, 256):
        p = _plan(m=4096, n=8192, k=4096, bt=bt)
        assert p.tiles.stages >= 4 and p.smem_bytes == smem_bytes(bt, p.tiles.stages) <= 227 * 1024
        assert bt * (128 + OUT_PAD) * 2 <= p.tiles.stages * bt * 128  # the staging tile fits the slots


# ----------------------------------------------------------------------------- the small form's default rule
def test_small_form_default_rule():
    """small_default: M 9-1023 take the small form on the H200 profile; fold=1 up to 32 tokens; 128-token tiles
    above 64; split-K fills the SMs; non-int4 layouts and profiles without wgmma keep the mma.sync kernels."""
    from humming.core.families.register_a.planner import SMALL_MAX_BT

    caps = _caps()
    narrow, wide = _layout(_scheme(), 4096, 4096, profile=None), _layout(_scheme(), 28672, 8192, profile=None)
    assert small_default(caps, narrow, 8, "f16") is None  # below SMALL_MIN_M: the stream kernel
    p16 = small_default(caps, narrow, 16, "f16")
    assert p16 is not None and p16.tiles.bm == 16 and p16.tiles.fold == 1 and p16.splits == 8
    assert small_default(caps, wide, 16, "f16").tiles.bm == 16  # wide layers too (measured faster with TMA)
    p40 = small_default(caps, wide, 40, "f16")
    assert p40.tiles.bm == 48 and p40.tiles.fold == 0 and p40.tiles.stages == 4
    p700 = small_default(caps, narrow, 700, "f16")
    assert p700.tiles.bm == SMALL_MAX_BT and p700.grid[0] == 6 and p700.tiles.stages == 6
    assert small_default(caps, narrow, 1024, "f16") is None  # the two-warpgroup form's range
    zp = _layout(_scheme("w4a16-zp", 128), 4096, 4096, profile=None)
    assert small_default(caps, zp, 32, "f16").tiles.fold == 0  # fold=1 would spill there
    assert small_default(caps, zp, 16, "f16").tiles.fold == 1
    assert small_default(caps, _layout("w8a16", 4096, 4096, profile=None), 40, "f16") is None
    assert small_default(_caps("nvidia-a100"), narrow, 40, "f16") is None


# ----------------------------------------------------------------------------- token tiles fitted to M
@pytest.mark.parametrize("m,bt,want", [(9, 16, 16), (17, 32, 32), (33, 64, 48), (49, 64, 64), (65, 128, 80),
                                       (96, 128, 96), (100, 128, 112), (127, 128, 128), (128, 128, 128),
                                       (129, 128, 80), (200, 128, 112), (300, 128, 112), (65, 64, 48), (1000, 128, 128)])
def test_fitted_token_tile(m, bt, want):
    """As many tiles as the given one needs, each M / tiles rounded up to 16, never wider than given."""
    got = fitted_token_tile(m, bt)
    assert got == want and got % 16 == 0 and got <= bt and -(-m // got) == -(-m // bt)


def test_fit_knob_keeps_the_tile(set_knobs):
    set_knobs({FIT_KNOB: False})
    assert fitted_token_tile(65, 128) == 128


@pytest.mark.parametrize("m,bt", [(65, 80), (80, 80), (96, 96), (112, 112), (200, 112), (40, 48)])
def test_small_form_plans_the_fitted_tile(m, bt):
    """The rule's plan (its 128-token tile from M 65) and a forced tile both take the fitted one, and say so; the
    knob wgmma.fit_token_tile false restores the tile given."""
    caps = _caps()
    lay = _layout()
    given = 128 if m > 64 else 64
    p = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", bt=given, small=True)
    assert p.tiles.bm == bt and p.instruction.shape == (64, bt, 16) and p.grid[0] == -(-m // bt), p.explain()
    assert any(f"token tile {bt} instead of {given}" in r for r in p.reasons), p.reasons
    rule = humming.plan("w4a16", m, 4096, 4096, profile=H200)  # (no tuned entry for this shape)
    assert rule.tiles.bn == 64 and rule.tiles.bm == fitted_token_tile(m, rule.tiles.bm), rule.explain()
    with knobs.override({FIT_KNOB: False}):
        kept = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", bt=given, small=True)
    assert kept.tiles.bm == given and not any("instead of" in r for r in kept.reasons)


@pytest.fixture
def tune_file(monkeypatch, tmp_path):
    """A fresh user tuning file (HUMMING_TUNE_FILE) on a CPU machine that plans as on an H200."""
    monkeypatch.setattr(tuned, "runs_here", lambda caps: True)
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(tmp_path / "tune.json"))
    tuning.clear_memory()
    yield tmp_path / "tune.json"
    tuning.clear_memory()


def test_two_warpgroup_entry_below_128(tune_file):
    """An entry of the two-warpgroup form for bucket 65-128 (measured at 128) runs M 97-127 (its 128-token tile at
    least three quarters tokens, rows past M zero-filled by the tensor copy) and leaves M 65-96 to the rules (the
    small form with a fitted tile); its tile is fitted to M too (M=97: 112 tokens)."""
    caps = _caps()
    lay = _layout(n=28672)
    entry = plan_wna16_wgmma_rs(caps, lay, 128, "f16", scheme="w4a16", bt=128, small=False)
    tuning.record(entry, 100.0, scheme="w4a16", device="test")
    tuning.clear_memory()
    for m in (97, 112, 127, 128):
        p = tuned.tuned_plan(caps, lay, m, "f16", scheme="w4a16")
        assert p is not None and p.tiles.bn == 128 and p.tiles.bm == fitted_token_tile(m, 128) and p.grid[0] == 1, (m, p)
        assert p.tiles.bm == (112 if m <= 112 else 128)
    for m in (65, 80, 96):
        assert tuned.tuned_plan(caps, lay, m, "f16", scheme="w4a16") is None, m


@pytest.mark.parametrize("m,fitted,unfitted", [(257, 144, 128), (300, 160, 128), (358, 192, 128), (359, 192, 256),
                                               (380, 192, 256), (400, 208, 256), (512, 256, 256), (129, 144, 256),
                                               (200, 208, 256)])
def test_two_warpgroup_entry_of_256_token_tiles(m, fitted, unfitted, tune_file):
    """An entry of 256-token tiles runs M with its tiles fitted to M (as many as 256 needs, each M / tiles rounded up
    to 16); with the fit off with 256, or 128 where 256 would be mostly padding (the rule before the fitting)."""
    caps = _caps()
    lay = _layout()
    measured_at = 512 if m > 256 else 256
    entry = plan_wna16_wgmma_rs(caps, lay, measured_at, "f16", scheme="w4a16", bt=256, small=False)
    tuning.record(entry, 100.0, scheme="w4a16", device="test")
    # (with the fit off: the rules before the fitting, and before the rounds rules, whose 128-token tiles fill
    # rounds badly)
    for fit, want in ((True, fitted), (False, unfitted)):
        with knobs.override({} if fit else {FIT_KNOB: False, ROUNDS_KNOB: False}):
            tuning.clear_memory()
            p = tuned.tuned_plan(caps, lay, m, "f16", scheme="w4a16")
            assert p is not None and p.tiles.bn == 128 and p.tiles.bm == want and p.grid[0] == -(-m // want), (m, p)
            assert p.tiles.bm * p.grid[0] - m < 16 * p.grid[0] or not fit, "a fitted tile holds < 16 padding rows"
            assert tuned.two_warpgroup_token_tile(m, 256) == (256 if fit else unfitted)


# ----------------------------------------------------------------------------- weight ring depth
def test_small_ring_takes_the_option():
    caps = _caps()
    assert small_ring(caps, 16, 8) == (7, 4)  # the form's own rule
    assert small_ring(caps, 16, 8, occupancy=7) == (OCCUPANCY_PF, 7)
    assert small_ring(caps, 32, 8, occupancy=6, prefetch=5) == (5, 6)
    assert small_ring(caps, 16, 8, prefetch=4) == (4, 4)


def test_another_ring_depth_keeps_the_computed_slots(set_knobs):
    """The two-warpgroup form's ring depth (RING_2WG, 5 by default) set by the knob register_a.prefetch: another depth
    keeps the computed slot indices (the constant slots of the ring of 5: test_register_a_compile.py)."""
    set_knobs({RING_KNOB: 4})
    p = humming.plan("w4a16", 1024, 4096, 14336, profile=H200)
    assert p.tiles.prefetch == 4 and "((unsigned)kt % STAGES)" in api.source(p)
    assert any(RING_KNOB in r and "constant" not in r for r in p.reasons if "weight atoms in flight" in r)


def test_stream_k_keeps_its_stage_counter():
    p = humming.plan("w4a16", 4096, 28672, 8192, profile=H200)
    assert p.tiles.streamk and p.tiles.prefetch == 5, p.explain()
    assert "((unsigned)(it0 + kt) % STAGES)" in api.source(p)


# ----------------------------------------------------------------------------- tuning knobs: invalid values
@pytest.mark.parametrize("knob,value,words", [
    (RING_KNOB, 0, RING_KNOB), (RING_KNOB, 13, RING_KNOB), (RING_KNOB, "x", RING_KNOB),
    (STSM_KNOB, 2, STSM_KNOB),
    (RASTER_KNOB, "x", RASTER_KNOB),
    (PAIR_CLUSTER_KNOB, 3, r"expected one of \[0, 2\]"),
])
def test_bad_knob_values_are_refused(knob, value, words):
    with pytest.raises(ProfileError, match=words):
        with knobs.override({knob: value}):
            humming.plan("w4a16", 1024, 4096, 14336, profile=H200)


# ----------------------------------------------------------------------------- the occupancy option (small form)
OCC = dict(m=16, n=4096, small=True, tma=True, fold=0, occupancy=7, prefetch=0, stages=8, splits=2, cluster=0)


@pytest.mark.parametrize("fold,occupancy,prefetch,m", [(0, 7, 0, 16), (0, 8, 0, 16), (0, 7, 4, 32), (1, 6, 0, 16),
                                                       (0, 6, 0, 48)])
def test_occupancy_kernel_source_and_plan(fold, occupancy, prefetch, m):
    p = _plan(**{**OCC, "m": m, "fold": fold, "occupancy": occupancy, "prefetch": prefetch})
    src = api.source(p)
    assert p.tiles.occupancy == occupancy and p.kernel_name.endswith(p.kernel_name[-10:])
    assert f"o{occupancy}" in p.kernel_name and (f"p{prefetch}" in p.kernel_name) == bool(prefetch)
    assert f"__launch_bounds__(cfg::THREADS, {occupancy})" in src
    assert f"constexpr int PF = {prefetch or OCCUPANCY_PF}, R = PF + 1;" in src
    main_loop = src[src.index("for (int kb = 0;"):src.index("// all wgmmas and copies done")]
    assert "wgmma_wait<1>" not in main_loop and "this stage's group has finished" in main_loop
    assert any(f"occupancy {occupancy}: registers budgeted for {occupancy} blocks per SM" in r for r in p.reasons)


def test_tuned_entry_with_occupancy_comes_back():
    """A stored entry with occupancy / prefetch in its tiles forces that plan (the fields round-trip)."""
    import dataclasses

    p = _plan(**{**OCC, "prefetch": 4})
    entry = {"tiles": dataclasses.asdict(p.tiles), "splits": p.splits, "path": p.path}
    tiles, splits, path = tuned._forced(entry)
    assert (tiles.occupancy, tiles.prefetch, splits, path) == (7, 4, 2, "wgmma-rs")


@pytest.mark.parametrize("n,k,m,splits,fold", [(24576, 8192, 16, 2, 1), (24576, 8192, 32, 2, 0), (57344, 8192, 16, 1, 1),
                                               (24576, 4096, 24, 2, 0)])
def test_wide_layers_take_the_occupancy_option_by_default(n, k, m, splits, fold):
    """Without a tuned entry, layers whose N/64 slabs fill the form's 4 blocks per SM take 7 blocks per SM with the
    splits that still all fit at once; narrower layers keep the form's own rule (more splits, 4 blocks per SM)."""
    caps = _caps()
    p = small_default(caps, _layout(n=n, k=k), m, "f16", "w4a16")
    assert (p.tiles.occupancy, p.splits, p.tiles.fold) == (7, splits, fold), p.explain()
    narrow = small_default(caps, _layout(n=8192, k=8192), m, "f16", "w4a16")
    assert narrow.tiles.occupancy == 0 and narrow.splits > 1
    widest = small_default(caps, _layout(n=65536, k=8192), m, "f16", "w4a16")  # 1024 slabs > 7 x 132 blocks
    assert widest.tiles.occupancy == 0


def test_occupancy_default_needs_the_tma_copies(set_knobs):
    """The default rule was measured with TMA activation copies: with cp.async (register_a.tma false) the form's own
    rule plans."""
    set_knobs({TMA_KNOB: False})
    p = small_default(_caps(), _layout(n=24576, k=8192), 16, "f16", "w4a16")
    assert p.tiles.occupancy == 0 and not p.tiles.bulk


@pytest.mark.parametrize("m,bt,occupancy,late", [(16, 16, 7, True), (32, 32, 7, True), (16, 16, 0, False),
                                                 (64, 64, 0, True), (128, 128, 0, True)])
def test_block_barrier_after_the_wgmmas_where_measured_faster(m, bt, occupancy, late):
    """With TMA copies, at the occupancy option or from 64 tokens, the block barrier and the refill of the slot of
    kt - 2 follow the stage's wgmma issue; at 16-32 tokens with 4 blocks per SM they precede it."""
    p = _plan(**{**OCC, "m": m, "bt": bt, "occupancy": occupancy, "stages": 4 if bt < 128 else 6})
    loop = api.source(p)
    loop = loop[loop.index("for (int kb = 0;"):loop.index("// all wgmmas and copies done")]
    stage_barrier = "__syncthreads();             // everyone's"
    barrier, commit = loop.index(stage_barrier), loop.index("wgmma_commit();")
    assert (barrier > commit) == late
    assert loop.count(stage_barrier) == 1 and loop.count("load_stage(") == 1


# ----------------------------------------------------------------------------- stream-K (two-warpgroup form)
SK = dict(m=128, bt=128, n=28672, small=False, streamk=132)


def _segments(tiles: int, katoms: int, blocks: int):
    """The kernel's schedule (register_a.streamk.SCHEDULE) in Python: per block, its (tile, kt0, ktiles)."""
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
    return out, dp, sk_atoms


@pytest.mark.parametrize("tiles,katoms,blocks", [(224, 128, 132), (1024, 128, 132), (32, 224, 132), (8, 4, 7),
                                                 (133, 128, 132), (3584, 128, 132), (8, 64, 3), (1, 16, 132)])
def test_streamk_schedule_covers_every_atom_once(tiles, katoms, blocks):
    """The schedule covers every atom of every tile once, a block's run meets at most two tiles, the reader's block
    range and slot rule find every writer of a split tile (also with fewer left-over atoms than blocks)."""
    per_block, dp, sk_atoms = _segments(tiles, katoms, blocks)
    covered = {}
    for b, segs in enumerate(per_block):
        split = [s for s in segs if s[2] != katoms]
        assert len(split) <= 2  # a block's stream-K run meets at most two tiles
        for tile, kt0, n in segs:
            for kt in range(kt0, kt0 + n):
                assert (tile, kt) not in covered
                covered[(tile, kt)] = b
    assert len(covered) == tiles * katoms
    for tile in range(dp, tiles):  # the reader's block range and slot rule find every writer of a split tile
        t0 = (tile - dp) * katoms
        b_first, b_last = ((t0 + 1) * blocks - 1) // sk_atoms, ((t0 + katoms) * blocks - 1) // sk_atoms
        writers = sorted({covered[(tile, kt)] for kt in range(katoms)})
        if len(writers) == 1 and any(s == (tile, 0, katoms) for s in per_block[writers[0]]):
            continue
        assert writers == [b for b in range(b_first, b_last + 1) if sk_atoms * b // blocks < sk_atoms * (b + 1) // blocks]
        for b in writers:
            slot = 0 if sk_atoms * b // blocks >= t0 else 1
            first = next(s for s in per_block[b] if s[2] != katoms)
            assert (first[0] == tile) == (slot == 0)


@pytest.mark.parametrize("tiles,katoms,blocks", [(224, 128, 132), (32, 128, 132), (512, 128, 132), (200, 224, 132),
                                                 (133, 128, 132), (7, 3, 5), (11, 64, 4), (1, 16, 132)])
def test_streamk_handover_schedule(tiles, katoms, blocks):
    """The hand-over's premises (register_a.streamk.HANDOVER): a split tile's later parts (kt0 > 0) are their blocks'
    first stream-K segments (one stored partial per block: the workspace's one slot); its first part (kt0 = 0)
    belongs to its lowest block, which waits only for higher blocks (no cycle); the parts cover the tile once."""
    segs, _, _ = _segments(tiles, katoms, blocks)
    parts: dict[int, list[tuple[int, int, int]]] = {}
    for b, ss in enumerate(segs):
        split = [(t, kt0, n) for t, kt0, n in ss if n != katoms]
        later = [s for s in split if s[1] > 0]
        assert len(later) <= 1 and all(s == split[0] for s in later)  # at most one stored partial: the first
        for t, kt0, n in split:
            parts.setdefault(t, []).append((b, kt0, n))
    for ps in parts.values():
        ps.sort(key=lambda p: p[1])
        assert ps[0][1] == 0 and ps[0][0] == min(b for b, _, _ in ps)  # the finisher: the first part, lowest block
        assert sum(n for _, _, n in ps) == katoms and [b for b, _, _ in ps] == sorted(b for b, _, _ in ps)


@pytest.mark.parametrize("m,bt,stages", [(128, 128, 6), (256, 256, 4), (4096, 256, 4)])
def test_streamk_plan(m, bt, stages, set_knobs):
    """The plan's grid, workspace, shared memory and reasons, and the schedule's constants in the kernel text."""
    set_knobs({PAIR_CLUSTER_KNOB: 0})  # (the unpaired text; pairs: test_streamk_pair_source)
    p = _plan(**{**SK, "m": m, "bt": bt, "n": 8192 if m == 4096 else 28672})
    assert p.grid == (1, 132, 1) and p.workspace_floats == 132 * bt * 128  # one slot per block (the hand-over)
    assert p.tiles.stages == stages and p.smem_bytes == smem_bytes(bt, stages, True)
    assert p.smem_bytes == stages * bt * 128 + 1024 + bt * (BC + OUT_PAD) * 2 <= 227 * 1024
    assert p.tiles.stagger == 0 and re.search(r"k132m?$", p.kernel_name.split("_")[-2])
    assert any("stream-K over 132 persistent blocks" in r for r in p.reasons)
    src = api.source(p)
    assert "StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles)" in src
    # the block count and K's atoms are constants of the kernel (divisions by constants: uniform loop counters)
    assert "static constexpr int P = 132, katoms = 128;" in src and "gridDim.y" not in src.split("struct StreamK")[1]
    assert "constexpr int katoms = StreamK::katoms;" in src and "K / BK" not in src
    assert "tma_load_2d(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0" in src
    assert "if (it >= STAGES) mbar_wait_polite(xbar0 + 8 * (STAGES + s)" in src
    assert "const uint32_t stg0 = x0 + STAGES * X_BYTES;" in src and "lds_128(r, stg0 + " in src
    assert "mbar_wait(xbar0 + 8 * ((unsigned)(it0 + kt) % STAGES), ((unsigned)(it0 + kt) / STAGES) & 1)" in src
    # split tiles handed over to the block of their first part
    assert "if (tid == 0) red_add_i32(counter, ktiles);" in src and "wait_count_i32(counter, katoms - ktiles);" in src
    assert "atomic_add_i32(" not in src.split("extern \"C\"")[1] and src.rstrip().endswith("it0 += ktiles;\n  }\n}")


def test_early_ring_option(set_knobs):
    """The knob register_a.early_ring (RegisterATiles.early, off by default): the weight ring declared before the segment
    loop, the next segment's first atoms loaded after a segment's last wgmmas and the consumers' barrier (not after a
    split tile's later part), the prologue skipped when they are in; its own kernel name; the generator refuses it
    without stream-K (its kernels compile: test_register_a_compile.py)."""
    off = _plan(**SK)
    assert off.tiles.early == 0 and "ring_ready" not in api.source(off)
    set_knobs({EARLY_KNOB: True})
    on = _plan(**SK)
    assert on.tiles.early == 1 and on.kernel_name != off.kernel_name and re.search(r"k132em?_", on.kernel_name)
    assert any(EARLY_KNOB in r for r in on.reasons)
    src = api.source(on)
    consumers = src.split("setmaxnreg_inc<232>();")[1]
    body = consumers.split("while (StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles)) {")
    assert len(body) == 2 and "uint32_t wq[R][4];" in body[0] and "uint32_t wq[R][4];" not in body[1]
    assert "bool ring_ready = false;" in body[0] and "if (!ring_ready && s < ktiles) {" in body[1]
    early = body[1].index("ring_ready = kt0 == 0 && StreamK(M, N).next(blockIdx.y, wave_n, ga_n")
    assert body[1].index("consumer_sync();") < early < body[1].index("if (ktiles != katoms)")
    assert _plan(**{**SK, "streamk": 0}).tiles.early == 0  # (stream-K plans only)
    plain = _plan(**{**SK, "streamk": 0})
    with pytest.raises(ValueError, match="stream-K option"):
        api.source(replace(plain, tiles=replace(plain.tiles, early=1)))


def test_streamk_kernels_differ_by_k():
    """K is compiled into a stream-K kernel: two shapes of one tile configuration and different K get two kernels
    (a shared name ran the 8192x8192 kernel on 4096x14336: wrong results); the same K shares one."""
    a, b, c = (_plan(**{**SK, "m": 4096, "bt": 256, "n": n, "k": k}) for n, k in ((8192, 8192), (4096, 14336),
                                                                                    (28672, 8192)))
    assert a.kernel_name != b.kernel_name and a.kernel_name == c.kernel_name
    assert "katoms = 224;" in api.source(b) and "katoms = 128;" in api.source(a)
    plain = [_plan(**{**SK, "m": 4096, "bt": 256, "n": n, "k": k, "streamk": 0}) for n, k in ((8192, 8192),
                                                                                            (4096, 14336))]
    assert plain[0].kernel_name == plain[1].kernel_name  # without stream-K, K stays a launch argument


# ----------------------------------------------------------------------------- the tail option (two-warpgroup form)
TAIL = dict(m=128, bt=128, n=28672, small=False, tail=92)


@pytest.mark.parametrize("tiles,sms,want", [(224, 132, 92), (64, 132, 64), (32, 132, 32), (132, 132, 0),
                                            (256, 132, 0), (896, 132, 0), (3584, 132, 20), (448, 132, 52)])
def test_tail_tiles(tiles, sms, want):
    """The leftover tiles of the last round, where their quarters take fewer quarter rounds than a whole round."""
    assert tail_tiles(tiles, sms) == want


@pytest.mark.parametrize("m,bt,tail", [(128, 128, 92), (256, 256, 92), (300, 128, 20), (65, 128, 224)])
def test_tail_plan_grid_workspace_and_source(m, bt, tail):
    """The kernel offsets the K range of the tail blocks (weights, tables and the producer's tensor copies) and adds
    the partials in split order."""
    p = _plan(**{**TAIL, "m": m, "bt": bt, "tail": tail})
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
    p = _plan(**{**TAIL, "tail": 0})
    src = api.source(p)
    assert p.grid == (1, 224, 1) and p.workspace_floats == 0 and "TAIL" not in src and "kt0" not in src
    assert "q" not in p.kernel_name.split("_")[-2]


def test_tuner_times_tail_and_the_entry_comes_back(tune_file):
    """The tuner's candidates at one-token-tile M hold the two-warpgroup form with the tail option; a stored entry
    carrying it is planned back with the same tail (on a machine whose live GPU runs the profile's wgmma)."""
    caps = _caps()
    lay = _layout(n=28672)
    plans = candidates(caps, lay, 128, "f16", scheme="w4a16")
    tails = [p for p in plans if p.tiles.option("tail")]
    # the 256-token candidate fits to one tile of 128 at M=128: the same plan, timed once
    assert {p.tiles.tail for p in tails} == {92} and {p.tiles.bm for p in tails} == {128} and len(tails) == 1
    p = next(p for p in tails if p.tiles.bm == 128)
    tuning.record(p, 97.0, scheme="w4a16", device="test")
    tuning.clear_memory()
    back = tuned.tuned_plan(caps, lay, 128, "f16", scheme="w4a16")
    assert back is not None and back.tiles == p.tiles and back.grid == p.grid


# ----------------------------------------------------------------------------- the small form's multicast clusters
def test_profiles_declare_cluster_multicast_where_the_target_has_it():
    """Hopper profiles declare it (the kernel uses it there); the target rule refuses it below sm_90a."""
    from humming.capabilities import list_profiles

    by_name = {c.name: c for c in list_profiles(include_abstract=False)}
    for name in ("nvidia-h200", "nvidia-h100", "nvidia-h20"):
        assert by_name[name].memory.cluster_multicast, name
    for name, c in by_name.items():
        if c.memory.cluster_multicast:
            assert c.target.arch in ("sm_90a", "sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f"), name


def test_cluster_shape_must_divide_the_grid():
    """The runtime refuses a cluster launch whose grid is not a multiple of the cluster shape before it touches the
    driver (so this runs without a GPU)."""
    k = LoadedKernel(b"", "hm_test_kernel", 0)
    args = ArgBlock("i", [1])
    with pytest.raises(LaunchError, match=r"grid \(1, 3, 1\) is not a multiple of the cluster shape \(1, 2, 1\)"):
        k.launch(0, (1, 3, 1), 128, 0, args, cluster=(1, 2, 1))
    with pytest.raises(LaunchError, match="take an ArgBlock"):
        k.launch(0, (1, 2, 1), 128, 0, [torch.tensor(0)], cluster=(1, 2, 1))
    # the prepared launcher of the hot path checks the same once, when it is built
    with pytest.raises(LaunchError, match=r"grid \(1, 1, 3\) is not a multiple of the cluster shape \(1, 1, 2\)"):
        k.launcher(0, (1, 1, 3), 128, args, pdl=True, cluster=(1, 1, 2))
    with pytest.raises(LaunchError, match="takes an ArgBlock"):
        k.launcher(0, (1, 1, 2), 128, [torch.tensor(0)])


# ----------------------------------------------------------------------------- pairs (two-warpgroup form, cluster 2)
PAIR = dict(m=1024, small=False)


@pytest.mark.parametrize("m,bt,raster", [(1024, 256, True), (128, 128, True), (300, 160, False)])
def test_pair_plan_and_source(m, bt, raster, set_knobs):
    """Pairs of channel tiles, both blocks' releases, one multicast copy a stage."""
    if not raster:
        set_knobs({RASTER_KNOB: 0})
    p = _plan(**{**PAIR, "m": m, "bt": bt, "cluster": 2})
    assert p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) and "c2" in p.kernel_name
    assert any("clusters of 2 blocks" in r for r in p.reasons)
    src = api.source(p)
    assert ("pairs_y = gridDim.y >> 1" in src) == raster and "const int crank = blockIdx.y & 1" in src
    assert "mbar_init(xbar0 + 8 * (STAGES + s), 2 * THREADS / 32);" in src and "cluster_sync();  // both blocks'" in src
    assert ("if (kt % 2 == crank)" in src
            and "tma_load_2d_multicast(x0 + s * X_BYTES, &XMAP, kt * BK, m0, xbar0 + 8 * s, (uint16_t)3);" in src)
    assert "kt - 1 + STAGES < ktiles" in src and src.count("mbar_arrive_peer(empty, ") == 2
    assert "mbar_arrive(empty)" not in src and "tma_load_2d(x0 + s * X_BYTES" not in src


def test_pair_changes_nothing_else():
    """Without the cluster the source is the form's own; with it, only the rewritten lines differ."""
    pair = api.source(_plan(**PAIR, cluster=2))
    with knobs.override({PAIR_CLUSTER_KNOB: 0}):
        plain = api.source(_plan(**PAIR))
    assert plain != pair and "crank" not in plain.split("extern \"C\"")[1]
    assert pair.split("extern \"C\"")[1].count("\n") - plain.split("extern \"C\"")[1].count("\n") < 12


def test_cluster_knob_asks_for_pairs_where_they_apply():
    """register_a.cluster 2: pairs wherever they apply (stream-K only with an even block count); 0: never; unset:
    by default for plain plans of 256-token tiles from M 1024, stream-K ones too, silently not elsewhere."""
    with knobs.override({PAIR_CLUSTER_KNOB: 2}):
        assert _plan(**PAIR).tiles.cluster == 2
        sk = _plan(**PAIR, streamk=132)  # stream-K in pairs: only when asked
        assert sk.tiles.cluster == 2 and any("stream-K in clusters of 2 blocks" in r for r in sk.reasons)
        odd = _plan(**PAIR, streamk=131)
        assert odd.tiles.cluster == 0 and any("no cluster" in r and "even block count" in r for r in odd.reasons)
    with knobs.override({PAIR_CLUSTER_KNOB: 0}):
        assert _plan(**PAIR).tiles.cluster == 0
    on = _plan(**PAIR)  # by default: M 1024, 256-token tiles, no stream-K or tail
    assert on.tiles.bm == 256 and on.tiles.cluster == 2 and any("by default" in r for r in on.reasons)
    assert _plan(**{**PAIR, "m": 4096, "n": 28672}).tiles.cluster == 2
    sk = _plan(**{**PAIR, "m": 4096, "n": 28672}, streamk=132)  # stream-K plans of 256-token tiles too
    assert sk.tiles.cluster == 2 and any("stream-K in clusters of 2 blocks (from M 1024" in r for r in sk.reasons)
    for kw in (dict(m=PAIR_CLUSTER_MIN_M - 1), dict(bt=128), dict(m=768, bt=192), dict(streamk=131), dict(m=128),
               dict(m=768, streamk=132), dict(bt=128, streamk=132)):
        p = _plan(**{**PAIR, **kw})
        assert p.tiles.cluster == 0 and not any("cluster" in r for r in p.reasons), kw  # (silently not by default)
    assert _plan(**PAIR, n=8320).tiles.cluster == 0  # 65 channel tiles: no pairs


@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_pair_rewrite_independent_of_row_scale(act):
    """The pairs change the same lines of the kernel with or without per-token output scales (Plan.row_scale, the
    widened W4A8 path, which takes the default pairs from M 1024): the rewrite touches the copies, the releases and
    the block -> tile map, never the epilogue that applies the row scales."""
    import difflib

    def lines(cluster: int, row_scale: bool):
        with knobs.override({PAIR_CLUSTER_KNOB: cluster}):
            p = _plan(**PAIR, k=1024, act=act)
        p = replace(p, row_scale=True) if row_scale else p
        return api.source(p).replace(p.kernel_name, "KERNEL").splitlines()

    def changed(a, b):
        return [ln for ln in difflib.unified_diff(a, b, lineterm="", n=0) if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]

    plain = changed(lines(0, False), lines(2, False))
    scaled = changed(lines(0, True), lines(2, True))
    assert plain and plain == scaled
    assert "load_f32(GS + t0)" in "\n".join(lines(2, True)) and not any("GS" in ln for ln in scaled)


@pytest.mark.parametrize("early", [False, True])
def test_streamk_pair_source(early, set_knobs):
    """Stream-K in pairs (asked for: cluster=2 with streamk): the schedule's units are the block pairs and its tiles
    pairs of channel tiles, each block its half; the producer's copy in turn by the global stage count; both blocks'
    slots released except the last STAGES stages of the run; the split tiles' halves with their own counters and
    slots; the early ring composes with it."""
    if early:
        set_knobs({EARLY_KNOB: True})
    p = _plan(**{**PAIR, "m": 4096}, n=28672, streamk=132, cluster=2)
    assert (p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) and p.grid == (1, 132, 1)
            and re.search(r"c2(p\d+)?k132", p.kernel_name))
    src = api.source(p)
    assert "static constexpr int P = 66, katoms = 128;" in src and "tiles_y = N / (2 * cfg::BC);" in src
    for unpaired in ("run_start(blockIdx.y)", "next(blockIdx.y,", "(int)blockIdx.y + 1", "CNT + (tile - sk.dp_tiles)"):
        assert unpaired not in src, unpaired  # (the schedule's unit is the pair, blockIdx.y >> 1)
    assert src.count("StreamK(M, N).next(blockIdx.y >> 1, ") == (3 if early else 2)
    assert "n0 += (blockIdx.y & 1) * BC;  // this block's channel tile of the pair" in src
    assert ("n0 += (blockIdx.y & 1) * BC;\n" in src) == early  # (the early ring's next tile too)
    assert ("if (it % 2 == (blockIdx.y & 1))" in src
            and "tma_load_2d_multicast(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0" in src)
    assert "it0 + kt - 1 + STAGES < total_stages" in src and src.count("mbar_arrive_peer(empty, ") == 2
    assert "int* counter = CNT + 2 * (tile - sk.dp_tiles) + (blockIdx.y & 1);" in src
    assert "(size_t)(2 * bj + (blockIdx.y & 1)) * SPLIT_FLOATS" in src and "cluster_sync();" in src
    assert "mbar_arrive(empty)" not in src and "tma_load_2d(x0 + s * X_BYTES" not in src


# ----------------------------------------------------------------------------- the stmatrix staging
def test_stmatrix_knob_off_keeps_the_16_bit_stores(set_knobs):
    """The forms stage their output tile with stmatrix .trans where the profile declares stmatrix (the default;
    its lane addresses: test_register_a_emulation.py); register_a.stmatrix false: the 16-bit shared stores."""
    assert humming.plan("w4a16", 1024, 4096, 14336, profile=H200).tiles.stsm  # the default
    set_knobs({STSM_KNOB: False})
    p = humming.plan("w4a16", 1024, 4096, 14336, profile=H200)
    src = api.source(p)
    assert not p.tiles.stsm and "sts_u16(o, " in src and "stmatrix" not in src


def test_stmatrix_helpers_need_the_declaration():
    from humming.devices.nvidia.wgmma import stmatrix_helpers

    with pytest.raises(ValueError, match="stmatrix"):
        stmatrix_helpers(api.resolve_profile("nvidia-l40s"))


# ----------------------------------------------------------------------------- refusals of the options
STREAMK_CASES = [({**SK, "tma": False}, "producer warpgroup"),
                 ({**SK, "tail": 92}, "one or the other"),
                 ({**SK, "streamk": 70000}, "1..65535"),
                 (dict(m=64, bt=64, n=28672, small=True, streamk=132), "stream-K is an option of the two-warpgroup form")]
TAIL_CASES = [({**TAIL, "tail": 225}, "between 1 and the 224 tiles"),
              ({**TAIL, "k": 8192 + 64 * 2}, "must be a multiple of 4"),
              ({**TAIL, "tma": False}, "producer warpgroup"),
              ({**TAIL, "bt": 64, "m": 64, "small": True}, "option of the two-warpgroup form"),
              ({**TAIL, "bt": 48, "m": 48}, r"token tiles of 64\.\.256"),
              ({**TAIL, "bt": 136, "m": 136}, r"token tiles of 64\.\.256 \(a multiple of 16\)")]
PAIR_CASES = [({**PAIR, "cluster": 4}, "take 2 blocks"),
              ({**PAIR, "cluster": 2, "streamk": 131}, "even block count"),
              ({**PAIR, "cluster": 2, "m": 128, "bt": 128, "tail": 92, "n": 28672}, "exclude tail"),
              ({**PAIR, "cluster": 2, "n": 8320}, "do not pair up"),
              (dict(m=1024, n=2048, k=4096, small=False, cluster=4, profile=None), "take 2 blocks, not 4")]
OCC_CASES = [({**OCC, "occupancy": 4}, re.escape("occupancy (blocks per SM of the small form) is 5..8")),
             ({**OCC, "occupancy": 9}, re.escape("is 5..8 or 0")),
             ({**OCC, "occupancy": 7, "m": 128, "bt": 128, "stages": 4}, "token tiles up to 64"),
             ({**OCC, "occupancy": 6, "cluster": 2}, "excludes the multicast cluster"),
             ({**OCC, "occupancy": 0, "prefetch": 13}, re.escape("prefetch (weight atoms in flight per lane) is 1..12")),
             (dict(m=1024, n=4096, small=False, occupancy=7), "options of the small-M form")]
CLUSTER = dict(m=16, bt=16, stages=8, n=2048, k=4096, small=True, tma=True, fold=0, profile=None)
CLUSTER_CASES = [({**CLUSTER, "cluster": 3}, "2 or 4 blocks, not 3"),
                 (dict(m=16, bt=16, stages=8, n=2048, k=4096, small=True, tma=False, cluster=2, profile=None),
                  "TMA activation stages"),
                 ({**CLUSTER, "m": 128, "bt": 128, "stages": 6, "cluster": 4},
                  r"the 6 activation stages must be a multiple of 4"),
                 ({**CLUSTER, "cluster": 4, "n": 1152}, r"the 18 slabs of 64 channels \(N=1152\) must be a multiple of 4")]
REFUSALS = ([("streamk", *c) for c in STREAMK_CASES] + [("tail", *c) for c in TAIL_CASES]
            + [("pair", *c) for c in PAIR_CASES] + [("occupancy", *c) for c in OCC_CASES]
            + [("cluster", *c) for c in CLUSTER_CASES])


@pytest.mark.parametrize("option,kwargs,words", REFUSALS,
                         ids=[f"{o}-{i}" for o in ("streamk", "tail", "pair", "occupancy", "cluster")
                              for i in range(sum(1 for r in REFUSALS if r[0] == o))])
def test_option_refusals(option, kwargs, words):
    """Each option is refused with a clear error where it does not apply (and the two-warpgroup form takes the small
    form's options, and clusters other than pairs, never)."""
    with pytest.raises(ShapeError, match=words):
        _plan(**kwargs)


def test_cluster_refusals_of_the_profile():
    """Only 2 or 4 blocks in a small form's cluster, and only where the profile declares cluster_multicast."""
    caps = _caps()
    assert CLUSTER_SIZES == (2, 4)
    without = replace(caps, memory=replace(caps.memory, cluster_multicast=False))
    with pytest.raises(UnsupportedOnDevice, match="does not declare cluster_multicast"):
        _plan(**{**CLUSTER, "cluster": 2}, caps=without)
