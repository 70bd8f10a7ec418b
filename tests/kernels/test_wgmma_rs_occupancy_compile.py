"""CPU: the small register-A wgmma form's occupancy option (TileConfig.occupancy): planned with its reasons and
refused with a clear error where it does not apply; the kernel's launch bounds carry the block budget, every stage
waits for its own wgmma group (no wgmma_wait<1> left in the main loop), the weight ring has the requested depth, and
it compiles for sm_90a without spills (where the budget allows it) and without serialized wgmmas; a tuned entry
carrying the option comes back as the same plan."""
import re

import pytest

import humming
from humming import api
from humming.core.common.layout import layout_for
from humming.core.compile.compiler import compile_cuda
from humming.core.families.register_a.planner import OCCUPANCY_PF, plan_wna16_wgmma_rs, small_ring
from humming.core.tuning import entries as tuning
from humming.devices import get_backend
from humming.errors import ShapeError

H200 = "nvidia-h200"


def _layout(group=128, n=4096, k=8192, name="w4a16"):
    sch = humming.schemes.get(name)
    sch = sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)
    return layout_for(sch, n, k, "f16", caps=api.resolve_profile(H200))


def _plan(m=16, fold=0, occupancy=7, prefetch=0, stages=8, splits=2, group=128, bt=None, cluster=0, name="w4a16"):
    caps = api.resolve_profile(H200)
    return plan_wna16_wgmma_rs(caps, _layout(group, name=name), m, "f16", scheme=name, bt=bt, splits=splits,
                               stages=stages, fold=fold, small=True, tma=True, cluster=cluster, occupancy=occupancy,
                               prefetch=prefetch)


def test_small_ring_takes_the_option():
    caps = api.resolve_profile(H200)
    assert small_ring(caps, 16, 8) == (7, 4)  # the form's own rule
    assert small_ring(caps, 16, 8, occupancy=7) == (OCCUPANCY_PF, 7)
    assert small_ring(caps, 32, 8, occupancy=6, prefetch=5) == (5, 6)
    assert small_ring(caps, 16, 8, prefetch=4) == (4, 4)


@pytest.mark.parametrize("fold,occupancy,prefetch,m", [(0, 7, 0, 16), (0, 8, 0, 16), (0, 7, 4, 32), (1, 6, 0, 16),
                                                       (0, 6, 0, 48)])
def test_occupancy_kernel_source_and_plan(fold, occupancy, prefetch, m):
    p = _plan(m=m, fold=fold, occupancy=occupancy, prefetch=prefetch)
    src = api.source(p)
    assert p.tiles.occupancy == occupancy and p.kernel_name.endswith(p.kernel_name[-10:])
    assert f"o{occupancy}" in p.kernel_name and (f"p{prefetch}" in p.kernel_name) == bool(prefetch)
    assert f"__launch_bounds__(cfg::THREADS, {occupancy})" in src
    assert f"constexpr int PF = {prefetch or OCCUPANCY_PF}, R = PF + 1;" in src
    main_loop = src[src.index("for (int kb = 0;"):src.index("// all wgmmas and copies done")]
    assert "wgmma_wait<1>" not in main_loop and "this stage's group has finished" in main_loop
    assert any(f"occupancy {occupancy}: registers budgeted for {occupancy} blocks per SM" in r for r in p.reasons)


@pytest.mark.parametrize("fold,occupancy,m", [(0, 7, 16), (0, 8, 16), (0, 7, 32), (0, 8, 32), (0, 6, 48)])
def test_occupancy_kernels_compile_without_spills(fold, occupancy, m, compiled_without_spills):
    p = _plan(m=m, fold=fold, occupancy=occupancy)
    mod = compiled_without_spills(p, api.resolve_profile(H200))
    assert not re.search(r"C75\d\d", mod.log), mod.log  # no serialized wgmmas
    regs = int(re.search(r"Used (\d+) registers", mod.log).group(1))
    assert regs <= 65536 // (occupancy * 128)


def test_occupancy_fold_kernel_is_not_serialized():
    """fold=1 at 6-7 blocks per SM (80 / 72 registers) may spill a few bytes, but its wgmmas are not serialized."""
    caps = api.resolve_profile(H200)
    route = get_backend(caps).compile_route(caps)
    p = _plan(fold=1, occupancy=7)
    mod = compile_cuda(api.source(p), [p.kernel_name], route.arch, options=(*route.options, "--ptxas-options=-v"),
                       cache=False)
    assert not re.search(r"C75\d\d", mod.log), mod.log


@pytest.mark.parametrize("kwargs,words", [
    (dict(occupancy=4), "occupancy (blocks per SM of the small form) is 5..8"),
    (dict(occupancy=9), "is 5..8 or 0"),
    (dict(occupancy=7, m=128, bt=128, stages=4), "token tiles up to 64"),
    (dict(occupancy=6, cluster=2), "excludes the multicast cluster"),
    (dict(occupancy=0, prefetch=13), "prefetch (weight atoms in flight per lane) is 1..12"),
])
def test_occupancy_refusals(kwargs, words):
    with pytest.raises(ShapeError, match=re.escape(words)):
        _plan(**kwargs)


def test_two_warpgroup_form_refuses_the_option():
    caps = api.resolve_profile(H200)
    with pytest.raises(ShapeError, match="options of the small-M form"):
        plan_wna16_wgmma_rs(caps, _layout(), 1024, "f16", scheme="w4a16", small=False, occupancy=7)


def test_tuned_entry_with_occupancy_comes_back(tmp_path, monkeypatch):
    """A stored entry with occupancy / prefetch in its tiles forces that plan (the fields round-trip)."""
    import dataclasses

    p = _plan(m=16, fold=0, occupancy=7, prefetch=4)
    entry = {"tiles": dataclasses.asdict(p.tiles), "splits": p.splits, "path": p.path}
    tiles, splits, path = tuning._forced(entry)
    assert (tiles.occupancy, tiles.prefetch, splits, path) == (7, 4, 2, "wgmma-rs")


@pytest.mark.parametrize("n,k,m,splits,fold", [(24576, 8192, 16, 2, 1), (24576, 8192, 32, 2, 0), (57344, 8192, 16, 1, 1),
                                               (24576, 4096, 24, 2, 0)])
def test_wide_layers_take_the_option_by_default(n, k, m, splits, fold, monkeypatch):
    """Without a tuned entry, layers whose N/64 slabs fill the form's 4 blocks per SM take 7 blocks per SM with the
    splits that still all fit at once; narrower layers keep the form's own rule (more splits, 4 blocks per SM)."""
    from humming.core.families.register_a.planner import small_default

    caps = api.resolve_profile(H200)
    p = small_default(caps, _layout(n=n, k=k), m, "f16", "w4a16")
    assert (p.tiles.occupancy, p.splits, p.tiles.fold) == (7, splits, fold), p.explain()
    narrow = small_default(caps, _layout(n=8192, k=8192), m, "f16", "w4a16")
    assert narrow.tiles.occupancy == 0 and narrow.splits > 1
    widest = small_default(caps, _layout(n=65536, k=8192), m, "f16", "w4a16")  # 1024 slabs > 7 x 132 blocks
    assert widest.tiles.occupancy == 0


def test_default_needs_the_tma_copies(monkeypatch):
    """The default rule was measured with TMA activation copies: with cp.async (HUMMING_WGMMA_RS_TMA=0) the form's
    own rule plans."""
    from humming.core.families.register_a.planner import TMA_ENV, small_default

    monkeypatch.setenv(TMA_ENV, "0")
    p = small_default(api.resolve_profile(H200), _layout(n=24576, k=8192), 16, "f16", "w4a16")
    assert p.tiles.occupancy == 0 and not p.tiles.bulk


@pytest.mark.parametrize("m,bt,occupancy,late", [(16, 16, 7, True), (32, 32, 7, True), (16, 16, 0, False),
                                                 (64, 64, 0, True), (128, 128, 0, True)])
def test_block_barrier_after_the_wgmmas_where_measured_faster(m, bt, occupancy, late):
    """With TMA copies, at the occupancy option or from 64 tokens, the block barrier and the refill of the slot of
    kt - 2 follow the stage's wgmma issue; at 16-32 tokens with 4 blocks per SM they precede it."""
    p = _plan(m=m, bt=bt, fold=0, occupancy=occupancy, stages=4 if bt < 128 else 6, splits=2)
    loop = api.source(p)
    loop = loop[loop.index("for (int kb = 0;"):loop.index("// all wgmmas and copies done")]
    stage_barrier = "__syncthreads();             // everyone's"
    barrier, commit = loop.index(stage_barrier), loop.index("wgmma_commit();")
    assert (barrier > commit) == late
    assert loop.count(stage_barrier) == 1 and loop.count("load_stage(") == 1
