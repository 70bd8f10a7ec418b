"""CPU: the register-A W4A16 kernels (both forms and their variants: TMA or cp.async copies, producer warpgroup,
staggered start, rasterization, ring depths, fitted tiles, occupancy, stream-K, tail, clusters, pairs, stmatrix)
compile with NVRTC for sm_90a: the register-A wgmma form in the PTX, the variant's instructions and kernel text, no
spills and no serialized wgmmas (ptxas C75xx) where the plans run them."""
import itertools
import re
from dataclasses import replace

import pytest
from test_register_a_plans import (
    EARLY_KNOB,
    OCC,
    PAIR,
    PAIR_CLUSTER_KNOB,
    RASTER_KNOB,
    RING_KNOB,
    SK,
    STAGGER_KNOB,
    STSM_KNOB,
    TAIL,
    TMA_KNOB,
    WS_KNOB,
    _caps,
    _layout,
    _plan,
    _scheme,
)

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.register_a.planner import (
    DEEP_RING_PF,
    PATH,
    RING_2WG,
    WIDE_TILE_PF,
    fitted_token_tile,
    plan_wna16_wgmma_rs,
    small_default,
    small_ring,
)
from humming.core.tuning import knobs
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

H200 = "nvidia-h200"
PTXAS_V = ("--ptxas-options=-v",)
TMA_COPY = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
RS_FORM = r"m64n\d+k16\.f32\.\w+\.\w+ \{[^}]*\}, \{%r\d+, ?%r\d+, ?%r\d+, ?%r\d+\}, %rd\d+, p, 1, 1, 0;"


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


_MODULES: dict = {}


def _compile(p, caps=None, arch="sm_90a", options=PTXAS_V, cache=False):
    """The NVRTC module of the plan's kernel (ptxas verbose). A kernel is compiled once per pytest run: plans of
    one kernel name whose sources differ only in comment lines (the plan's M, N and scheme name) share the module."""
    src = api.source(p, caps or _caps())
    code = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith("//"))
    key = (p.kernel_name, code, arch, tuple(options))
    if key not in _MODULES:
        _MODULES[key] = compile_cuda(src, [p.kernel_name], arch, options=options, cache=cache)
    return _MODULES[key]


def _compiled_without_spills(p, caps):
    """The module of the plan's kernel for the profile's target; skips where the installed NVRTC is too old for it,
    and asserts that ptxas reported no spill stores."""
    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    mod = _compile(p, caps, route.arch, (*route.options, *PTXAS_V))
    spills = _spills(mod.log)
    assert spills and max(spills) == 0, mod.log
    return mod


def _spills(log: str) -> list[int]:
    return [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]


def _copy_instruction(p) -> str:
    """The instruction that brings the activation stages in: a TMA tensor copy (tiles.bulk, the default where the
    profile declares tma) or every thread's cp.async."""
    return TMA_COPY if p.tiles.bulk else "cp.async.cg.shared.global"


# ----------------------------------------------------------------------------- the two-warpgroup form
CASES = [("f16", 256, "w4a16", 128), ("bf16", 128, "w4a16", 128), ("f16", 128, "w4a16", None),
         ("bf16", 256, "w4a16-zp", 128), ("f16", 256, "w4a16-zp", None), ("bf16", 256, "w4a16", None)]


@pytest.mark.parametrize("act,bt,name,group", CASES, ids=[f"{a}-bt{b}-{n}-g{g}" for a, b, n, g in CASES])
def test_compiles_with_register_a_wgmma(act, bt, name, group):
    _need_sm90a()
    caps = _caps()
    p = _plan(n=1024, k=4096, act=act, name=name, group=group, bt=bt)
    assert p.family == "wgmma" and p.path == PATH and p.tiles.bm == bt and p.tiles.bn == 128
    assert p.threads == (384 if p.tiles.bulk == 2 else 256)  # the producer warpgroup where tma + setmaxnreg
    assert p.splits == 1 and p.smem_bytes <= caps.limits.smem_per_block_kb * 1024
    assert p.kernel_name.startswith(f"hm_wna16_wgmmars_int4_{act}_m{bt}n128k64")
    mod = _compile(p, caps)
    ptx = mod.ptx
    forms = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+) \{[^}]*\}, (\{[^}]*\})?",
                       ptx)
    assert forms and {f[:4] for f in forms} == {(f"m64n{bt}k16", "f32", act, act)}
    # the RS form: A is a brace list of four 32-bit registers, then the B descriptor, scale-d, 1, 1, trans-b 0
    rs = re.findall(RS_FORM, ptx)
    assert len(rs) == len(forms) > 0
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 1",
                "wgmma.wait_group.sync.aligned 0", "fence.proxy.async.shared::cta", _copy_instruction(p),
                "ld.global.nc.L1::no_allocate.v4.u32", "lop3.b32", "st.global.v4.u32",
                # the epilogue's staging: stmatrix where declared (the default), else 16-bit shared stores
                "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" if p.tiles.stsm else "st.shared.u16"):
        assert ins in ptx, ins
    assert p.tiles.stsm == int(caps.memory.stmatrix)
    assert "ldmatrix" not in ptx and "mma.sync" not in ptx and "tcgen05" not in ptx
    log = mod.log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = _spills(log)
    assert regs and max(regs) <= 255, log
    assert spills and max(spills) == 0, log
    assert "serialized" not in log, log  # C7513/C7515: ptxas would serialize the wgmmas


WGMMA_PROFILES = [c.name for c in list_profiles(include_abstract=False) if c.find_mma(family="wgmma", a_type="f16")]


def test_every_profile_declaring_wgmma_compiles_it():
    """Rule of the HAL: the kernel follows the declaration (H100, H200, H20), not a device name."""
    _need_sm90a()
    assert {"nvidia-h100", "nvidia-h200", "nvidia-h20"} <= set(WGMMA_PROFILES)
    for name in WGMMA_PROFILES:
        p = _plan(m=512, n=2048, k=2048, act="bf16", name="w4a16-zp", profile=name, caps=_caps(name))
        _, mod = api.compile_plan(p, _caps(name))
        assert f"wgmma.mma_async.sync.aligned.m64n{p.tiles.bm}k16.f32.bf16.bf16" in mod.ptx


@pytest.mark.parametrize("form", ["small", "prefill"])
def test_activation_copies_tma_and_cp_async(form):
    """Both ways of bringing the activations in compile without spills for both forms: TMA by default where the
    profile declares tma and mbarrier (one tensor copy per stage, mbarrier waits, the map a __grid_constant__
    parameter; no per-thread cp.async), register_a.tma false or tma=False the cp.async copies; a profile without
    tma gets cp.async by default and a clear refusal when TMA is asked for."""
    _need_sm90a()
    caps = _caps()
    lay = _layout(_scheme("w4a16", 128), 2048, 4096, profile=None)
    small = form == "small"
    m = 64 if small else 1024
    stages = 4 if small else None  # the default rule's stages at 64 tokens
    default = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", small=small, stages=stages)
    with knobs.override({TMA_KNOB: False}):
        off = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", small=small, stages=stages)
    # (the two-warpgroup form's default TMA variant has a producer warpgroup: bulk 2, see the test below)
    assert default.tiles.bulk == (1 if small else 2) and off.tiles.bulk == 0 and default.kernel_name != off.kernel_name
    assert "TMA tensor-copy" in default.explain() and "cp.async activation" in off.explain()
    for p, copy, absent in ((default, TMA_COPY, "cp.async.cg"), (off, "cp.async.cg.shared.global", "cp.async.bulk")):
        src = api.source(p, caps)
        assert ("__grid_constant__ TmaMap XMAP" in src) == bool(p.tiles.bulk)
        mod = _compile(p, caps)
        assert copy in mod.ptx and absent not in mod.ptx
        if p.tiles.bulk:
            assert "mbarrier.try_wait.parity.shared::cta.b64" in mod.ptx and "mbarrier.arrive.expect_tx" in mod.ptx
        assert max(_spills(mod.log)) == 0, mod.log
        assert not re.search(r"C751\d", mod.log), mod.log
    no_tma = replace(caps, memory=replace(caps.memory, tma=False))
    assert plan_wna16_wgmma_rs(no_tma, lay, m, "f16", scheme="w4a16", small=small).tiles.bulk == 0
    with pytest.raises(UnsupportedOnDevice, match="does not declare tma"):
        plan_wna16_wgmma_rs(no_tma, lay, m, "f16", scheme="w4a16", small=small, tma=True)
    assert api.tma_boxes(default) == ((m, 4096, default.tiles.bm, 64, 2), None) and api.tma_boxes(off) == (None, None)


def test_prefill_form_producer_warpgroup(set_knobs):
    """The two-warpgroup form's default where the profile declares tma and setmaxnreg: a producer warpgroup (384
    threads) issues the tensor copies; no block barrier in the main loop (named barrier 1 for the consumers' epilogue);
    register_a.producer false keeps thread 0's copies and the per-stage barrier. Both compile without spills at 256
    tokens."""
    _need_sm90a()
    set_knobs({PAIR_CLUSTER_KNOB: 0})  # (the unpaired form; pairs: test_variant_kernels_compile_without_spills)
    caps = _caps()
    lay = _layout(_scheme("w4a16-zp", 128), 2048, 4096, "bf16", profile=None)
    ws = plan_wna16_wgmma_rs(caps, lay, 4096, "bf16", scheme="w4a16-zp", bt=256, small=False)
    with knobs.override({WS_KNOB: False}):
        plain = plan_wna16_wgmma_rs(caps, lay, 4096, "bf16", scheme="w4a16-zp", bt=256, small=False)
    assert (ws.tiles.bulk, ws.threads, plain.tiles.bulk, plain.threads) == (2, 384, 1, 256)
    assert any("producer warpgroup" in r for r in ws.reasons)
    src = api.source(ws, caps)
    loop = src[src.index("for (int kb = 0"):src.index("wgmma_wait<0>();\n  wgmma_fence_operand(acc);")]
    assert "__syncthreads" not in loop and "mbar_arrive(" in loop and "load_stage" not in loop
    assert "consumer_sync();" in src and "setmaxnreg_inc<232>();" in src
    # the producer thread sleeps between polls of a slot's release (its polling took the consumers' issue slots)
    assert "mbar_wait_polite(xbar0 + 8 * (STAGES + s)" in src and "__nanosleep(64);" in src
    assert "mbar_wait_polite" not in api.source(plain, caps)
    for p in (ws, plain):
        mod = _compile(p, caps)
        assert max(_spills(mod.log)) == 0, mod.log
        assert not re.search(r"C75\d\d", mod.log), mod.log
    assert "bar.sync 1, 256" in _compile(ws, caps).ptx


@pytest.mark.parametrize("stagger", [None, False], ids=["default", "off"])
def test_two_warpgroup_form_staggered_start(stagger, set_knobs):
    """The two-warpgroup form with its producer warpgroup starts warpgroup 1 one wgmma group behind warpgroup 0
    (RegisterATiles.stagger, named barrier 2: bar.arrive by warpgroup 0 after its first commit, bar.sync by warpgroup 1
    before its loop); wgmma.stagger false turns it off. It compiles without spills or serialized wgmmas; the small
    form never staggers."""
    if stagger is not None:
        set_knobs({STAGGER_KNOB: stagger})
    _need_sm90a()
    caps = _caps()
    lay = _layout("w4a16", 8192, 8192, profile=None)
    p = plan_wna16_wgmma_rs(caps, lay, 4096, "f16", scheme="w4a16")
    on = stagger is None
    assert p.tiles.bulk == 2 and p.tiles.stagger == int(on) and ("staggered start" in p.explain()) == on
    src = api.source(p, caps)
    assert ("if (wg == 1) consumer_turn_take();" in src) == on and ("consumer_turn_give();" in src) == on
    mod = _compile(p, caps)
    assert ("bar.arrive 2, 256" in mod.ptx) == on and ("bar.sync 2, 256" in mod.ptx) == on
    spills = _spills(mod.log)
    assert spills and max(spills) == 0 and "serialized" not in mod.log, mod.log
    small = plan_wna16_wgmma_rs(caps, lay, 32, "f16", scheme="w4a16")
    assert small.tiles.stagger == 0


def test_two_warpgroup_form_rasterized(set_knobs):
    """register_a.raster: the two-warpgroup form takes its tiles in groups of token tiles (the block -> tile
    statements shared with the register-A W4A8 kernel, whose test evaluates them), compiles without spills; the
    small form (split-K over the grid's z) never rasterizes, and its generator refuses a plan that asks."""
    from humming.core.common.wgmma import TILE_IN_LAUNCH_ORDER, TILE_RASTERIZED

    _need_sm90a()
    set_knobs({PAIR_CLUSTER_KNOB: 0})  # (the unpaired form's block -> tile map; pairs map their own)
    with knobs.override({RASTER_KNOB: 3}):
        p = _plan(m=4096, n=8192, k=4096, profile=H200)
    assert p.tiles.bn == 128 and p.tiles.raster == 3 and "rasterized in groups of 3" in p.explain()
    src = api.source(p, _caps())
    assert TILE_RASTERIZED in src and TILE_IN_LAUNCH_ORDER not in src and "constexpr int RASTER = 3;" in src
    mod = _compile(p)
    spills = _spills(mod.log)
    assert spills and max(spills) == 0, mod.log
    small = _plan(m=64, n=8192, k=4096, bt=64)
    assert small.tiles.raster == 0
    with pytest.raises(ValueError, match="rasterization"):
        api.source(replace(small, tiles=replace(small.tiles, raster=3)), _caps())
    with knobs.override({RASTER_KNOB: 0}):
        p0 = _plan(m=4096, n=8192, k=4096)
    assert p0.tiles.raster == 0 and TILE_IN_LAUNCH_ORDER in api.source(p0, _caps())
    # (an invalid value of the knob: test_register_a_plans.py::test_bad_knob_values_are_refused)


# ----------------------------------------------------------------------------- the small-M form
SMALL_CASES = [("f16", 16, 8, 1, "w4a16", 128), ("bf16", 32, 8, 1, "w4a16", 128), ("bf16", 32, 8, 0, "w4a16-zp", 128),
               ("f16", 64, 4, 0, "w4a16", None), ("f16", 128, 6, 0, "w4a16", 128), ("bf16", 16, 6, 2, "w4a16", 64),
               ("f16", 32, 4, 0, "w4a16-zp", 256)]


@pytest.mark.parametrize("act,bt,stages,fold,name,group", SMALL_CASES,
                         ids=[f"{a}-bt{b}-s{s}-f{f}-{n}-g{g}" for a, b, s, f, n, g in SMALL_CASES])
def test_small_form_compiles(act, bt, stages, fold, name, group):
    """One warpgroup per 64-channel slab, m64nBTk16 with A from registers, split-K fix-up in the kernel (a launch
    argument decides), no spills, no serialized wgmmas (ptxas C7511-C7515) for the configurations the tuner ships."""
    _need_sm90a()
    caps = _caps()
    lay = _layout(_scheme(name, group), 2048, 4096, act, profile=None)
    p = plan_wna16_wgmma_rs(caps, lay, bt, act, scheme=name, bt=bt, stages=stages, fold=fold, small=True)
    assert (p.tiles.bn, p.tiles.bm, p.threads, p.tiles.fold) == (64, bt, 128, fold) and p.splits >= 1
    assert p.grid == (1, 2048 // 64, p.splits)
    mod = _compile(p, caps)
    ptx = mod.ptx
    forms = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.(\w+)\.(\w+) \{", ptx))
    assert forms == {(f"m64n{bt}k16", act, act)}, forms
    assert re.findall(RS_FORM, ptx)  # register A
    for ins in ("atom.global.add.s32", "ld.global.cg.v4.f32", "st.global.v4.f32", "membar.gl", _copy_instruction(p),
                "fence.proxy.async.shared::cta", "st.global.v4.u32"):
        assert ins in ptx, ins  # the split-K fix-up, the activation copies and the staged copy-out
    log = mod.log
    assert max(_spills(log)) == 0, log
    assert not re.search(r"C751\d", log), log


DEFAULT_LAYOUTS = ["w4a16", "w4a16-zp", "w4a16[group_size=-1]", "w4a16-zp[group_size=-1]", "w4a16[group_size=64]",
                   "w4a16[group_size=256]", "w4a16-zp[group_size=256]"]


def test_small_form_defaults_do_not_spill():
    """Every configuration small_default picks for the layouts the kernel runs (M 16, 32, 64, 128) compiles without
    spills or serialized wgmmas (fold=1 is left out where it would spill)."""
    _need_sm90a()
    caps = _caps()
    for name, m in itertools.product(DEFAULT_LAYOUTS, (16, 32, 64, 128)):
        p = small_default(caps, _layout(name, 4096, 4096, profile=None), m, "f16", name)
        mod = _compile(p, caps, cache=None)
        assert max(_spills(mod.log)) == 0, (name, m, mod.log)
        assert not re.search(r"C751\d", mod.log), (name, m, mod.log)


# ----------------------------------------------------------------------------- weight ring depth
def test_weight_ring_depth():
    """How many weight atoms each lane keeps in flight: the small form's ring follows its activation stages, and goes
    to DEEP_RING_PF atoms with registers for 2 blocks per SM where shared memory holds only 2 (128 tokens x 6
    stages); the two-warpgroup form keeps RING_2WG atoms at every M. The generated kernels say so and compile without
    spills."""
    caps = _caps()
    assert small_ring(caps, 128, 6) == (DEEP_RING_PF, 2)  # 97 KiB of stages: 2 blocks per SM
    assert small_ring(caps, 128, 4) == (2, 3) and small_ring(caps, 64, 4) == (3, 4) and small_ring(caps, 16, 8) == (7, 4)
    assert small_ring(caps, 128, 6, cluster=2) == (4, 2) and small_ring(caps, 16, 8, cluster=4) == (7, 3)
    _need_sm90a()
    lay = _layout(_scheme(), 8192, 8192, profile=None)
    deep = plan_wna16_wgmma_rs(caps, lay, 128, "f16", scheme="w4a16", bt=128, stages=6, small=True)
    assert f"{DEEP_RING_PF} atoms ahead" in deep.explain()
    below = plan_wna16_wgmma_rs(caps, lay, 256, "f16", scheme="w4a16", bt=128, small=False)
    at = plan_wna16_wgmma_rs(caps, lay, 1024, "f16", scheme="w4a16", bt=128, small=False)
    assert below.tiles.prefetch == at.tiles.prefetch == RING_2WG and re.search(rf"p{RING_2WG}m?_", below.kernel_name)
    for p, pf, bounds in ((deep, DEEP_RING_PF, "THREADS, 2"), (below, RING_2WG, "BLOCK_THREADS, 1"),
                          (at, RING_2WG, "BLOCK_THREADS, 1")):
        src = api.source(p, caps)
        assert f"constexpr int PF = {pf}, R = PF + 1;" in src and f"__launch_bounds__(cfg::{bounds})" in src
        mod = _compile(p, caps, cache=None)
        assert max(_spills(mod.log)) == 0, mod.log
        assert not re.search(r"C751\d", mod.log), mod.log


@pytest.mark.parametrize("m, n, k", [(1024, 4096, 14336), (1024, 8192, 8192), (600, 8192, 8192)])
@pytest.mark.parametrize("ring", [None, 5], ids=["default", "knob-5"])
def test_ring_of_five_makes_the_plain_form_s_slots_constants(m, n, k, ring, set_knobs):
    """The two-warpgroup form's ring of 5 atoms (RING_2WG, the default; also set by register_a.prefetch) with 6
    stages: the plain form's trip of 12 stages is two rounds of the activation slots, so its slot indices and phases
    are constants of the unrolled stage (stream-K keeps its running stage counter, another depth the computed slots:
    test_register_a_plans.py)."""
    if ring is not None:
        set_knobs({RING_KNOB: ring})
    p = humming.plan("w4a16", m, n, k, profile=H200)
    assert p.tiles.prefetch == 5 and p.tiles.stages == 6 and not p.tiles.streamk, p.explain()
    assert any("5 weight atoms in flight" in r and "constant" in r for r in p.reasons)
    src = api.source(p)
    assert "constexpr int PF = 5, R = PF + 1;" in src and "constexpr int U = 2 * R;" in src
    assert "mbar_wait(xbar0 + 8 * (u % STAGES), ((u / STAGES) & 1));" in src
    assert "((unsigned)kt % STAGES)" not in src and "((unsigned)kt / STAGES)" not in src
    api.compile_plan(p, H200)


# ----------------------------------------------------------------------------- the small form's multicast clusters
CLUSTER_COMPILE = [(16, 16, 8, 2, 1, "w4a16", "f16"), (16, 16, 8, 4, 1, "w4a16", "bf16"),
                   (48, 48, 4, 4, 0, "w4a16-zp", "f16"), (128, 128, 6, 2, 0, "w4a16", "f16"),
                   (100, 128, 4, 4, 0, "w4a16[group_size=-1]", "bf16")]


@pytest.mark.parametrize("m,bt,stages,cluster,fold,name,act", CLUSTER_COMPILE,
                         ids=[f"m{c[0]}-bt{c[1]}-s{c[2]}-c{c[3]}-f{c[4]}-{c[5]}-{c[6]}" for c in CLUSTER_COMPILE])
def test_cluster_form_compiles(m, bt, stages, cluster, fold, name, act):
    """Blocks of 2 or 4 adjacent 64-channel slabs share each activation stage through one multicast tensor copy: the
    PTX holds the multicast copy, the peer mbarrier arrivals and the cluster barrier, no block-wide barrier in the main
    loop; the launch carries the cluster shape."""
    _need_sm90a()
    caps = _caps()

    def plan(c):
        lay = _layout(name, 2048, 4096, act, profile=None)
        return plan_wna16_wgmma_rs(caps, lay, m, act, scheme=name, bt=bt, stages=stages, fold=fold, small=True,
                                   tma=True, cluster=c)

    p, plain = plan(cluster), plan(0)
    assert p.tiles.cluster == cluster and p.cluster_dims == (1, cluster, 1) and plain.cluster_dims is None
    assert p.kernel_name != plain.kernel_name and re.search(rf"bc{cluster}m?_", p.kernel_name)
    assert f"cluster {cluster} (cluster_multicast declared)" in p.explain()
    assert p.grid[1] % cluster == 0
    src = api.source(p, caps)
    assert f"constexpr int CLUSTER = {cluster};" in src
    mod = _compile(p, caps)
    ptx = mod.ptx
    for ins in ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster",
                "mapa.shared::cluster.u32", "mbarrier.arrive.shared::cluster.b64 _",
                "barrier.cluster.arrive.release.aligned", "barrier.cluster.wait.acquire.aligned", "%cluster_ctarank",
                "bar.sync 1, 128"):
        assert ins in ptx, ins
    # the per-stage release stays CTA-scoped: a cluster-scoped release adds a GPU-wide memory barrier per stage
    assert "mbarrier.arrive.release.cluster" not in ptx
    assert p.threads == 160 and plain.threads == 128  # a producer warp issues the copies
    # no plain (unicast) tensor copy, and fewer block barriers than the plain form (none per stage)
    assert "mbarrier::complete_tx::bytes [" not in ptx
    plain_ptx = _compile(plain, caps).ptx
    assert ptx.count("bar.sync") < plain_ptx.count("bar.sync"), (ptx.count("bar.sync"), plain_ptx.count("bar.sync"))
    assert max(_spills(mod.log)) == 0, mod.log
    assert not re.search(r"C751\d", mod.log), mod.log


# ----------------------------------------------------------------------------- every variant without spills
def _small_fitted(p, mod, caps, kw):
    assert f"m64n{kw['bt']}k16" in mod.ptx and "wgmma.mma_async" in mod.ptx


def _wide_tile_ring(p, mod, caps, kw):
    """Token tiles of 80 / 96 with 6 stages (3 blocks per SM) keep WIDE_TILE_PF weight atoms in flight (4 before)."""
    assert small_ring(caps, kw["bt"], 6) == (WIDE_TILE_PF, 3) and small_ring(caps, kw["bt"], 4) == (2, 3)
    assert f"{WIDE_TILE_PF} atoms ahead" in " ".join(p.reasons), p.reasons


def _two_warpgroup_fitted(p, mod, caps, kw):
    assert p.tiles.bm == kw["bt"] and p.tiles.bn == 128 and not p.tiles.streamk


def _occupancy_registers(p, mod, caps, kw):
    regs = int(re.search(r"Used (\d+) registers", mod.log).group(1))
    assert regs <= 65536 // (kw["occupancy"] * 128)


def _early(p, mod, caps, kw):
    assert p.tiles.early == 1


# (variant, planner arguments of test_register_a_plans._plan, knobs, the ptxas warnings that must not appear, check)
VARIANTS = (
    # small form, token tiles fitted to M (48-112 tokens)
    [("small-fitted", dict(m=bt, n=28672 if splits == 1 else 8192, bt=bt, stages=stages, splits=splits, small=True),
      {}, None, _small_fitted) for bt, stages, splits in [(48, 6, 4), (80, 6, 2), (96, 6, 2), (112, 6, 2), (80, 4, 1)]]
    # small form, the 6-atom ring of token tiles of 80 / 96 on every layout it takes
    + [("wide-tile-ring", dict(m=bt, name=name, group=group, bt=bt, stages=6, splits=2, small=True), {}, None,
        _wide_tile_ring) for bt in (80, 96) for name, group in [("w4a16", 128), ("w4a16-zp", 128), ("w4a16", None),
                                                                 ("w4a16-zp", 256)]]
    # two-warpgroup form at fitted token tiles (plain launch, the 6-atom ring below M 1024)
    + [("two-warpgroup-fitted", dict(m=bt, bt=bt, small=False), {}, r"C751\d", _two_warpgroup_fitted)
       for bt in (80, 144, 160, 192, 224, 240)]
    # the occupancy option (the registers within the block budget)
    + [("occupancy", {**OCC, "m": m, "fold": fold, "occupancy": occupancy}, {}, r"C75\d\d", _occupancy_registers)
       for fold, occupancy, m in [(0, 7, 16), (0, 8, 16), (0, 7, 32), (0, 8, 32), (0, 6, 48)]]
    + [("tail", {**TAIL, "m": m, "bt": bt, "tail": tail, "group": group, "name": name,
                 "n": 8192 if tail == 64 else 28672}, {}, r"C75\d\d", None)
       for m, bt, tail, group, name in [(128, 128, 92, 128, "w4a16"), (256, 256, 92, None, "w4a16-zp"),
                                        (128, 128, 64, 64, "w4a16-zp")]]
    + [("streamk", {**SK, "m": m, "bt": bt, "group": group, "name": name, "n": 8192}, {}, r"C75\d\d", None)
       for m, bt, group, name in [(128, 128, 128, "w4a16"), (4096, 256, None, "w4a16-zp"), (2048, 256, 64, "w4a16")]]
    + [("streamk-early-ring", {**SK, "m": m, "bt": bt, "n": 8192}, {EARLY_KNOB: True}, r"C75\d\d", _early)
       for m, bt in [(128, 128), (4096, 256)]]
    + [("pair", {**PAIR, "m": m, "bt": bt, "group": group, "name": name, "n": 28672, "cluster": 2}, {}, r"C75\d\d", None)
       for m, bt, group, name in [(1024, 256, 128, "w4a16"), (128, 128, None, "w4a16-zp")]]
    + [("streamk-pair", {**PAIR, "m": m, "bt": bt, "n": 28672, "streamk": 132, "cluster": 2}, {}, r"C75\d\d", None)
       for m, bt in [(4096, 256), (128, 128)]]
)


def _variant_id(v) -> str:
    kw = v[1]
    words = [v[0], f"m{kw['m']}"] + ([f"bt{kw['bt']}"] if "bt" in kw else [])
    words += [f"{kw['name']}-g{kw['group']}"] if "name" in kw else []
    words += [f"{short}{kw[key]}" for key, short in (("stages", "st"), ("splits", "sp"), ("fold", "f"),
                                                     ("occupancy", "o"), ("tail", "t")) if key in kw]
    return "-".join(words)


@pytest.mark.parametrize("variant,kwargs,knob_values,warnings,check", VARIANTS, ids=[_variant_id(v) for v in VARIANTS])
def test_variant_kernels_compile_without_spills(variant, kwargs, knob_values, warnings, check, set_knobs):
    """The variants' kernels compile for sm_90a without spills (and, where the variant runs them, without the
    serialized wgmmas of ptxas C7510-C7519 / C75xx)."""
    set_knobs(knob_values)
    caps = _caps()
    p = _plan(**kwargs)
    mod = _compiled_without_spills(p, caps)
    if warnings:
        assert not re.search(warnings, mod.log), mod.log
    if check:
        check(p, mod, caps, kwargs)


@pytest.mark.parametrize("m", [150, 300, 513])
def test_two_warpgroup_fitted_streamk_kernels_compile(m):
    """The two-warpgroup form with stream-K at fitted tiles (160 / 160 / 176 tokens): at most the 8-byte spill outside
    the main loop that ptxas leaves at some of these tiles (176 and 192 tokens), no serialized wgmmas."""
    caps = _caps()
    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    p = plan_wna16_wgmma_rs(caps, _layout(n=28672), m, "f16", scheme="w4a16", bt=256, small=False, streamk=132)
    assert p.tiles.bm == fitted_token_tile(m, 256) and p.tiles.streamk == 132
    mod = _compile(p, caps, route.arch, (*route.options, *PTXAS_V))
    spills = _spills(mod.log)
    assert spills and max(spills) <= 8 and not re.search(r"C751\d", mod.log), mod.log


def test_occupancy_fold_kernel_is_not_serialized():
    """fold=1 at 6-7 blocks per SM (80 / 72 registers) may spill a few bytes, but its wgmmas are not serialized."""
    caps = _caps()
    route = get_backend(caps).compile_route(caps)
    p = _plan(**{**OCC, "fold": 1, "occupancy": 7})
    mod = _compile(p, caps, route.arch, (*route.options, *PTXAS_V))
    assert not re.search(r"C75\d\d", mod.log), mod.log


# ----------------------------------------------------------------------------- the stmatrix staging of the W4A8 forms
@pytest.mark.parametrize("scheme, m, n", [("w4a8-fp8", 4096, 8192), ("w4a8-int8", 1024, 8192), ("w4a8-fp8", 128, 28672)])
def test_register_a_w4a8_forms_take_the_same_staging(scheme, m, n, set_knobs):
    """The W4A8 narrow and wide forms (not stream-K) stage through the same stmatrix text (common.wgmma's
    stmatrix_staging, whose lane addresses test_register_a_emulation.py checks) from the same fragment layout."""
    set_knobs({STSM_KNOB: True})
    p = humming.plan(scheme, m, n, 8192, profile=H200)
    assert p.path == "wgmma-rs8" and p.tiles.stsm and not p.tiles.streamk, p.explain()
    src = api.source(p)
    assert "sts_u16(o, " not in src and src.count("stmatrix_x4_trans(stsm_row + jp * 8 * OUT_LD * 2") == 1
    assert "facc[4 * j + 2 * h] * ts[2 * j] * cs[h] + bs[h]" in src
    api.compile_plan(p, H200)
    with knobs.override({STSM_KNOB: False}):
        assert "stmatrix" not in api.source(humming.plan(scheme, m, n, 8192, profile=H200))
