"""The register-A W4A16 family (humming.core.families.register_a; sm_90a, int4 weights dequantized in registers as
wgmma's A operand) through humming.gemm against humming.reference_gemm, on a GPU whose profile declares wgmma
f16/bf16 (H100/H200/H20): the two-warpgroup form (groups, per-channel scales, zero points, bias, rasterized), the
small-M form (split-K, fold, wide and fitted token tiles, the default rule and the knobs that switch it off), both
pair orders of the prepared weights, TMA activation copies and the producer warpgroup, the stmatrix staging, the
weight ring depth, and the default plans (fitted tiles, stream-K, pairs, per-token scales, a shipped entry); the
forced plan options are in test_register_a_options_gpu.py. Outputs are NaN-poisoned before each launch (conftest),
data is fresh random per case, and every case checks the kernel that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.register_a.planner import (
    PATH,
    fitted_token_tile,
    plan_wna16_wgmma_rs,
)
from humming.core.registry import family_of, select
from humming.core.tuning import entries as tuning
from humming.devices.current import runs_here
from humming.errors import ShapeError

from .conftest import graph_replay_error, layers_of, rel_error, run_forced_plans

pytestmark = pytest.mark.gpu

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
TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
DTYPES = [torch.float16, torch.bfloat16]
DTYPE_IDS = ["f16", "bf16"]


# ----------------------------------------------------------------------------- helpers (also used by other files)
def _require_wgmma(dtype):
    caps = api.resolve_profile(None)
    act = "f16" if dtype == torch.float16 else "bf16"
    if not caps.find_mma(family="wgmma", a_type=act):
        pytest.skip(f"{caps.name} declares no wgmma {act} (the register-A wgmma kernel needs an sm_90a device)")
    if not runs_here(caps):
        pytest.skip(f"the live GPU is not {caps.name}'s own target")
    return caps


def _act(dtype) -> str:
    return "f16" if dtype == torch.float16 else "bf16"


def _scheme(name, group):
    sch = humming.schemes.get(name)
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _case_id(name, group) -> str:
    return f"{name}-{'g' + str(group) if group else 'channel'}"


def _biased_layer(name, group, dtype, n: int = 1024, k: int = 4096):
    """A quantized n x k layer of the scheme with a bias (seeded per scheme), and the bias."""
    torch.manual_seed(n + (group or 1) + len(name))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    return humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias), bias


def _small_handle(qw, dtype):
    """The handle of the weights prepared for ``dtype`` on this GPU (default options): the one layer
    (humming.core.runtime.layer.Layer) humming.gemm runs every M of them on, each M with the family the registry
    chose (the small register-A form, the two-warpgroup form, the stream kernel ...)."""
    return api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))


def _layer(qw, dtype):
    """The prepared layer of ``qw`` for ``dtype`` (default options) that humming.gemm runs on."""
    return api._registry[_small_handle(qw, dtype)]


def _layout(prep, m: int):
    """The weight layout the layer's plan for M reads (every WnA16 plan of one layer reads the same one, and the
    layer packs the weights once per layout: ``prep.packed``)."""
    return prep.plan_for(m).layout


def _two_warpgroup(p) -> bool:
    """The register-A family's two-warpgroup (prefill) form: 128 channels a block (the small form: 64-channel
    slabs)."""
    return family_of(p).name == "register_a" and p.path == PATH and p.tiles.bn == 128


def _plans_that_ran(qw, m):
    return [lay.launches[m].plan for lay in layers_of(qw) if m in lay.launches]


# ----------------------------------------------------------------------------- the two-warpgroup form
SHAPES = [(1024, 4096), (4096, 2048)]  # (N, K)
MS = (128, 200, 1024)
CASES = [("w4a16", 128), ("w4a16", None), ("w4a16-zp", 128), ("w4a16-zp", None),  # None: per-channel scales
         ("w4a16", 64), ("w4a16-zp", 256)]


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", CASES, ids=[_case_id(n, g) for n, g in CASES])
def test_wgmma_rs_w4a16(name, group, dtype, n, k, set_knobs):
    """From M 128 (register_a.min_m 128, every group it runs): the register-A family's two-warpgroup form, on the
    same packed weights as the layer's mma.sync-kernel plan (M 4, run first: the stream kernel)."""
    _require_wgmma(dtype)
    set_knobs({MIN_M_KNOB: 128, ANY_GROUP: True})
    torch.manual_seed(n + k + (group or 1) + len(name))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    x4 = torch.randn(4, k, device="cuda", dtype=dtype)
    out4 = humming.gemm(x4, qw)
    prep = _layer(qw, dtype)
    assert family_of(prep.launches[4].plan).name == "mma_wna16", prep.launches[4].plan.explain()
    assert rel_error(out4, humming.reference_gemm(x4, qw, bias=bias, out_dtype=torch.float32)) <= TOL[dtype]
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert layers_of(qw, dtype) == [prep]  # one prepared layer runs every M
        p = prep.launches[m].plan
        assert _two_warpgroup(p), ("the register-A wgmma kernel was judged not eligible", p.explain())
        assert select(prep.problem(m), prep.caps).family.name == "register_a", p.explain()
        # one copy of the prepared weights: the stream plan's and the register-A plan's
        assert prep.launches[m].packed is prep.launches[4].packed and len(prep.packed) == 1
        assert p.path == PATH and p.kernel_name.startswith("hm_wna16_wgmmars_"), p.explain()
        assert humming.plan(_scheme(name, group), m, n, k, act=_act(dtype)).path == PATH
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= TOL[dtype], (m, err, p.explain())


@pytest.mark.parametrize("m", [129, 200, 384])
def test_wide_layer_takes_the_two_warpgroup_form_below_min_m(m):
    """register_a.wave_min_m: a layer whose 256-token tiles number at least one per SM (17408 output features: 136
    tiles of 128 channels) runs the two-warpgroup form below register_a.min_m, by the rules, correctly."""
    caps = _require_wgmma(torch.float16)
    n = 128 * max(136, caps.limits.sms)
    torch.manual_seed(m)
    qw = humming.quantize(torch.randn(n, 1024, device="cuda") * 0.05, "w4a16")
    x = torch.randn(m, 1024, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    p = _layer(qw, torch.float16).launches[m].plan
    assert _two_warpgroup(p) and "register_a.wave_min_m" in p.reasons[-1], p.explain()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16]


def test_wgmma_rs_default_from_m_1024():
    """With the knobs' defaults: M 256 (below register_a.min_m) does not run the two-warpgroup form, M 1024 does."""
    _require_wgmma(torch.float16)
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, "w4a16")
    humming.gemm(torch.randn(256, 2048, device="cuda", dtype=torch.float16), qw)
    prep = _layer(qw, torch.float16)
    assert not _two_warpgroup(prep.launches[256].plan), prep.launches[256].plan.explain()  # M < register_a.min_m
    x = torch.randn(1024, 2048, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    assert _two_warpgroup(prep.launches[1024].plan), prep.launches[1024].plan.explain()
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    assert rel_error(out, ref) <= TOL[torch.float16]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", [("w4a16", 128), ("w4a16-zp", None)], ids=["g128", "zp-channel"])
def test_wgmma_rs_two_warpgroup_rasterized(name, group, dtype, set_knobs):
    """register_a.raster 3: the two-warpgroup form takes its tiles in groups of 3 token tiles (M 1100 with 256- or
    128-token tiles: groups that do and do not divide the grid's token tiles), every output written and right."""
    _require_wgmma(dtype)
    set_knobs({RASTER_KNOB: 3})
    n, k = 1024, 2048
    torch.manual_seed(11 + (group or 1) + len(name) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in (1024, 1100):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        p = _layer(qw, dtype).launches[m].plan
        assert p.path == PATH and p.tiles.bn == 128 and p.tiles.option("raster") == 3, p.explain()
        assert not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL[dtype], (m, err, p.explain())


# ----------------------------------------------------------------------------- the small-M form
SMALL_SHAPES = [(512, 4096), (4096, 2048), (192, 1024)]  # (N, K); 192: N a multiple of 64, not of 128
SMALL_MS = (9, 16, 17, 33, 48, 64)
SMALL_CASES = [("w4a16", 128), ("w4a16", None), ("w4a16-zp", 128), ("w4a16-zp", None), ("w4a16", 64),
               ("w4a16", 256)]


@pytest.mark.parametrize("n,k", SMALL_SHAPES, ids=[f"{n}x{k}" for n, k in SMALL_SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", SMALL_CASES, ids=[_case_id(n, g) for n, g in SMALL_CASES])
def test_wgmma_rs_small(name, group, dtype, n, k):
    """The small form, the default for M 17-1023 (and 9-16 on narrow layers): one warpgroup per 64-channel slab, a
    token tile of up to 128 in one wgmma m64nBTk16, split-K with the fixed-order fix-up, on the stream kernel's
    prepared weights (the layer's one packed copy)."""
    _require_wgmma(dtype)
    torch.manual_seed(n + k + (group or 1) + len(name))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in SMALL_MS:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        handle = _small_handle(qw, dtype)
        p = api._registry[handle].launches[m].plan
        assert p.path == PATH and p.tiles.bm < 128 and p.kernel_name.startswith("hm_wna16_wgmmars_"), p.explain()
        assert len(api._registry[handle].packed) == 1  # the stream kernel's packed weights
        assert out.shape == (m, n) and not torch.isnan(out).any(), ("output not fully written", p.explain())
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= TOL[dtype], (m, err, p.explain())


@pytest.mark.parametrize("splits", [1, 2, 8])
def test_wgmma_rs_small_forced_splits_and_graph(splits):
    """Every split count the fix-up handles (1: no fix-up), and CUDA-graph replay with new activations."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(splits)
    qw = humming.quantize(torch.randn(1024, 4096, device="cuda") * 0.05, "w4a16")
    m = 24
    x = torch.randn(m, 4096, device="cuda", dtype=dtype)
    humming.gemm(x, qw)
    handle = _small_handle(qw, dtype)
    prep = api._registry[handle]
    prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, _layout(prep, m), m, "f16", scheme="w4a16", splits=splits)
    prep.launches.pop(m, None)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert api._registry[handle].launches[m].plan.splits == splits
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]
    static = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gout = humming.gemm(static, qw)
    x2 = torch.randn_like(x)
    static.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(gout, humming.reference_gemm(x2, qw, out_dtype=torch.float32)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", SMALL_CASES, ids=[_case_id(n, g) for n, g in SMALL_CASES])
def test_wgmma_rs_small_fold(name, group, dtype):
    """The fold options (1: scale per group in fp32; 2: the raw codes into the wgmma, zero point from the activation
    sums of an all-ones A, and scale per group in fp32), forced with several stage counts and splits."""
    _require_wgmma(dtype)
    torch.manual_seed(len(name) + (group or 3))
    n, k = 512, 4096
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = _act(dtype)
    ran = 0
    for m in (9, 16, 24, 32):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        humming.gemm(x, qw)
        handle = _small_handle(qw, dtype)
        prep = api._registry[handle]
        layout = _layout(prep, m)
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        for fold, stages, splits in ((1, 8, 4), (2, 8, 4), (1, 4, 2), (2, 6, 8), (2, 4, 1)):
            if fold == 2 and group is None:  # refused: one sum over a whole split loses precision
                with pytest.raises(ShapeError, match="fold=2 needs"):
                    plan_wna16_wgmma_rs(prep.caps, layout, m, act, scheme=name, fold=fold)
                continue
            prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, layout, m, act, scheme=name, splits=splits,
                                                stages=stages, fold=fold)
            prep.launches.pop(m, None)
            out = humming.gemm(x, qw)
            torch.cuda.synchronize()
            p = api._registry[handle].launches[m].plan
            assert p.tiles.option("fold") == fold and p.splits == splits, p.explain()
            assert not torch.isnan(out).any(), ("output not fully written", p.explain())
            err = rel_error(out, ref)
            assert err <= TOL[dtype], (m, fold, stages, splits, err, p.explain())
            ran += 1
        prep.plans.pop(m, None)
        prep.launches.pop(m, None)
    assert ran


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", SMALL_CASES[:4], ids=[_case_id(n, g) for n, g in SMALL_CASES[:4]])
def test_wgmma_rs_small_wide_tiles(name, group, dtype, set_knobs):
    """The small form with token tiles of 64-128 at prefill sizes (several token tiles, rows past M in the last one),
    as the tuner times it for M 65-1023 (the tiles as forced: wgmma.fit_token_tile false)."""
    _require_wgmma(dtype)
    set_knobs({FIT_KNOB: False})
    torch.manual_seed(len(name) + (group or 5) + 11)
    n, k = 1024, 2048
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    act = _act(dtype)
    for m in (65, 128, 200, 300):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        for bt, stages, splits in ((128, 4, 4), (64, 6, 2), (96, 4, 1), (128, 6, 1)):
            prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, _layout(prep, m), m, act, scheme=name, bt=bt,
                                                splits=splits, stages=stages, small=True)
            prep.launches.pop(m, None)
            out = api.gemm_prepared(x, handle)
            torch.cuda.synchronize()
            p = prep.launches[m].plan
            assert p.tiles.bn == 64 and p.tiles.bm == bt and p.grid[0] == -(-m // bt), p.explain()
            assert not torch.isnan(out).any(), ("output not fully written", p.explain())
            err = rel_error(out, ref)
            assert err <= TOL[dtype], (m, bt, stages, splits, err, p.explain())
        prep.plans.pop(m, None)
        prep.launches.pop(m, None)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", SMALL_CASES[:4], ids=[_case_id(n, g) for n, g in SMALL_CASES[:4]])
def test_wgmma_rs_small_fitted_tiles(name, group, dtype):
    """The default plans of M 65-300 take token tiles fitted to M (80, 96, 112, 128; two tiles of 112 at 200): every
    output row written and right."""
    _require_wgmma(dtype)
    torch.manual_seed(len(name) + (group or 5) + 23)
    n, k = 1024, 2048
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    handle = _small_handle(qw, dtype)
    for m in (65, 80, 100, 127, 200, 300):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        p = api._registry[handle].launches[m].plan
        assert p.path == PATH and p.tiles.bn == 64 and p.tiles.bm == fitted_token_tile(m, 128), p.explain()
        assert not torch.isnan(out).any(), ("output not fully written", p.explain())
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        assert rel_error(out, ref) <= TOL[dtype], (m, p.explain())


def test_wgmma_rs_two_warpgroup_entry_below_128(monkeypatch, tmp_path):
    """A tuned entry of the two-warpgroup form for bucket 65-128 runs M 97-127 (one 128-token tile, the rows past M
    zero-filled by the tensor copy and never stored) and leaves M 65-96 to the small form; graph replay agrees."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(97)
    n, k = 1024, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    handle = _small_handle(qw, dtype)
    prep = api._registry[handle]
    entry = plan_wna16_wgmma_rs(prep.caps, _layout(prep, 128), 128, "f16", scheme="w4a16", bt=128, small=False)
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(tmp_path / "tune.json"))
    tuning.clear_memory()
    tuning.record(entry, 1.0, scheme="w4a16", device="test")
    tuning.clear_memory()
    prep.plans.clear()
    prep.launches.clear()
    try:
        for m in (97, 113, 127, 80):
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            out = humming.gemm(x, qw)
            torch.cuda.synchronize()
            p = prep.launches[m].plan
            assert p.tiles.bn == (128 if m > 96 else 64), p.explain()
            assert not torch.isnan(out).any(), ("output not fully written", p.explain())
            ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
            assert rel_error(out, ref) <= TOL[dtype], (m, p.explain())
            graph = torch.cuda.CUDAGraph()
            y = torch.empty_like(out)
            with torch.cuda.graph(graph):
                y.copy_(humming.gemm(x, qw))
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            assert rel_error(y, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype], m
    finally:
        tuning.clear_memory()
        prep.plans.clear()
        prep.launches.clear()


def test_wgmma_rs_small_default_and_switches():
    """M 17-512 take the small form by default (M 128-512 instead of the dequant-smem wgmma kernel), M 9-16 on a
    narrow layer too (the mma.sync family's rules); from M 513 the two-warpgroup form (the register_a family); one
    prepared layer runs them all; register_a.min_m null or wgmma_wna16.enabled false keep the mma.sync kernels."""
    from humming.core.tuning import knobs

    _require_wgmma(torch.float16)
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, "w4a16")
    prep = _layer(qw, torch.float16)
    for m in (12, 40, 128, 512, 700):
        x = torch.randn(m, 2048, device="cuda", dtype=torch.float16)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert select(prep.problem(m), prep.caps).family.name == ("mma_wna16" if m <= 512 else "register_a")
        ran = _plans_that_ran(qw, m)
        assert len(ran) == 1 and ran[0].path == PATH and ran[0].tiles.bn == (64 if m <= 512 else 128)
        assert ran[0] is prep.launches[m].plan
        assert humming.plan("w4a16", m, 1024, 2048).kernel_name == ran[0].kernel_name
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16]
    for off in ({MIN_M_KNOB: None}, {WNA16_KNOB: False}):
        with knobs.override(off):
            assert humming.plan("w4a16", 40, 1024, 2048).path != PATH


# ----------------------------------------------------------------------------- both pair orders of the weights
def _wgmma_here():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the register-A wgmma kernels run on sm_90a")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w4a16[group_size=-1]"])
def test_tile_major_weights_through_every_kernel(scheme, dtype):
    """Tile-major weights (what this profile gets for int4 with the register-A kernels' groups) through the stream
    kernel, the small and two-warpgroup register-A forms and the mma.sync tile kernel (forced, as register_a.min_m
    null or a tuned tile entry would run it)."""
    _wgmma_here()
    torch.manual_seed(hash((scheme, str(dtype), "order")) % 2**31)
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, scheme)
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    assert _layout(prep, 1).tile_major
    paths = set()
    for m in (1, 5, 16, 40, 128, 1024):  # stream, small register-A form, two-warpgroup form
        x = torch.randn(m, 2048, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        paths.add(humming.plan(scheme, m, 1024, 2048, act=_act(dtype)).path)
        assert prep.launches[m].plan.path == humming.plan(scheme, m, 1024, 2048, act=_act(dtype)).path, m
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype], m
    assert {"stream", "wgmma-rs"} <= paths
    # every kernel read the one tile-major packed copy
    assert len({id(s.packed) for s in prep.launches.values()}) == 1 and len(prep.packed) == 1
    assert prep.launches[1].packed.layout.tile_major

    def tile_plans(prep, base, m):  # the mma.sync tile kernel on the same (tile-major) prepared weights
        p = plan_wna16(prep.caps, base.layout, m, base.act, scheme=base.scheme, path="tile")
        assert p.layout.tile_major and "lds_32(base + A_BYTES" in api.source(p, prep.caps)
        yield p
    assert run_forced_plans(qw, dtype, (3, 16, 33, 128), tile_plans, TOL[dtype]) == 4


def test_step_major_weights_through_the_register_a_kernels(set_knobs):
    """Step-major weights (groups of 512, which the register-A kernels do not take by default) through both forms
    with register_a.min_m 128 and every group."""
    _wgmma_here()
    set_knobs({MIN_M_KNOB: 128, ANY_GROUP: True})
    torch.manual_seed(21)
    qw = humming.quantize(torch.randn(1024, 4096, device="cuda") * 0.05, "w4a16[group_size=512]")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    assert not _layout(prep, 16).tile_major
    for m in (16, 128, 1024):
        p = humming.plan("w4a16[group_size=512]", m, 1024, 4096)
        assert p.path == "wgmma-rs" and "load_g32(p + ks * 128)" in api.source(p), (m, p.kernel_name)
        x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        spec = prep.launches[m]
        assert spec.plan.path == "wgmma-rs" and spec.plan.kernel_name == p.kernel_name, spec.plan.explain()
        assert not spec.packed.layout.tile_major and len(prep.packed) == 1
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16], m


# ----------------------------------------------------------------------------- TMA activation copies
TMA_CASES = [("w4a16", 128), ("w4a16", None), ("w4a16-zp", 128), ("w4a16", 256)]


def _force_tma(qw, x, **options):
    """Make humming.gemm run the register-A plan with TMA copies and these options at x's M on the prepared layer
    it uses (one for every M: the small form's and the two-warpgroup form's plans read the same packed weights)."""
    handle = api.prepared(qw, x.dtype, x.device)
    prep = api._registry[handle]
    m = x.shape[0]
    prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, _layout(prep, m), m, _act(x.dtype), scheme="w4a16", tma=True,
                                        **options)
    prep.launches.pop(m, None)
    return handle


def _check_tma(qw, x, bias, handle, dtype):
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    spec = api._registry[handle].launches[x.shape[0]]
    assert spec.plan.tiles.option("bulk") in (1, 2) and spec.xmap is not None, spec.plan.explain()
    assert "TMA tensor-copy" in spec.plan.explain()
    assert not torch.isnan(out).any(), ("output not fully written", spec.plan.explain())
    err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
    assert err <= TOL[dtype], (x.shape[0], err, spec.plan.explain())


TMA_SMALL = [(9, 16, 1, 0), (16, 16, 4, 1), (24, 32, 2, 0), (33, 48, 1, 0), (64, 64, 2, 0), (100, 128, 1, 0),
             (200, 128, 2, 0), (300, 64, 4, 0)]  # (M, token tile, splits, fold)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", TMA_CASES, ids=[_case_id(n, g) for n, g in TMA_CASES])
def test_small_form_tma(name, group, dtype):
    """The small form's activation stages by TMA tensor copies (one thread per stage, a map with 128-byte swizzle as
    a __grid_constant__ parameter, an mbarrier per slot): token tiles 16-128, split-K, fold, partial token tiles
    (rows past M must arrive as zeros)."""
    _require_wgmma(dtype)
    k = 4096
    qw, bias = _biased_layer(name, group, dtype, k=k)
    for m, bt, splits, fold in TMA_SMALL:
        if fold and (group is None or name.endswith("zp")):
            fold = 0  # (fold=1 with zero tables spills at 16 tokens: not a configuration the planner picks)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        stages = 8 if bt <= 32 else 4 if bt <= 64 else 6
        handle = _force_tma(qw, x, bt=bt, splits=splits, stages=stages, fold=fold)
        _check_tma(qw, x, bias, handle, dtype)


@pytest.mark.parametrize("producer", [None, True], ids=["default", "producer-knob"])
@pytest.mark.parametrize("bt", [128, 256])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_prefill_form_tma(bt, dtype, producer, set_knobs):
    """The two-warpgroup form (128 channels x 128/256 tokens) with TMA copies, with a partial last token tile; with
    register_a.producer true: a producer warpgroup issuing the tensor copies and mbarrier slot releases instead of a
    block barrier per stage (384 threads, setmaxnreg)."""
    _require_wgmma(dtype)
    if producer:
        set_knobs({WS_KNOB: True})
    n, k = 2048, 4096
    torch.manual_seed(bt + (1 if producer else 0))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16-zp", bias=bias)
    for m in (1024, 1100):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        handle = _force_tma(qw, x, bt=bt, small=False)
        if producer:
            assert api._registry[handle].plans[m].tiles.option("bulk") == 2 and api._registry[handle].plans[m].threads == 384
        _check_tma(qw, x, bias, handle, dtype)


def test_tma_map_follows_the_activations_and_graph_replay():
    """Two activation tensors in turn (the map is re-encoded for each address), then CUDA-graph replay of a captured
    call with new activations copied into the captured buffer."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(7)
    qw = humming.quantize(torch.randn(1024, 4096, device="cuda") * 0.05, "w4a16")
    m = 40
    xs = [torch.randn(m, 4096, device="cuda", dtype=dtype) for _ in range(2)]
    handle = _force_tma(qw, xs[0], bt=48, splits=2, stages=6)
    for x in xs + xs:
        _check_tma(qw, x, None, handle, dtype)
    err = graph_replay_error(lambda s: humming.gemm(s, qw), xs[0],
                             lambda x: humming.reference_gemm(x, qw, out_dtype=torch.float32))
    assert err <= TOL[dtype]


def test_tma_by_knob(set_knobs):
    """register_a.tma true makes the default plans of both forms use the tensor copies."""
    dtype = torch.float16
    _require_wgmma(dtype)
    set_knobs({TMA_KNOB: True})
    torch.manual_seed(11)
    qw = humming.quantize(torch.randn(2048, 4096, device="cuda") * 0.05, "w4a16")
    for m in (32, 128, 1024):
        x = torch.randn(m, 4096, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]
    plans = [s.plan for h in qw.__dict__["_humming_prepared"].values() for s in api._registry[h].launches.values()]
    assert {p.m for p in plans if p.path == "wgmma-rs" and p.tiles.option("bulk")} == {32, 128, 1024}, [p.kernel_name for p in plans]


# ----------------------------------------------------------------------------- the stmatrix staging
@pytest.mark.parametrize("stsm", [True, False], ids=["stmatrix", "sts16"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name, m, n, k", [("w4a16", 16, 2048, 2048), ("w4a16", 64, 2048, 2048),
                                           ("w4a16-zp", 128, 2048, 2048), ("w4a16", 600, 2048, 2048),
                                           ("w4a16", 1024, 4096, 2048), ("w4a16-zp", 4096, 4096, 2048)])
def test_stmatrix_staging_matches_reference(name, m, n, k, dtype, stsm, set_knobs):
    """Both forms with the stmatrix staging (the default where stmatrix is declared) and without it
    (register_a.stmatrix false: the 16-bit shared stores): the small form (M 16, 64, 128), fitted tiles (M 600),
    plain tiles in pairs (M 1024), stream-K in pairs (M 4096), a bias, groups of 128 and zero points."""
    _require_wgmma(dtype)
    set_knobs({STSM_KNOB: stsm})
    torch.manual_seed(m + n)
    sch = _scheme(name, 128)
    p = humming.plan(sch, m, n, k, act=_act(dtype))
    assert p.path == "wgmma-rs" and p.tiles.option("stsm") == int(stsm), p.explain()
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch, bias=bias)
    for _ in range(2):  # fresh activations each time
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]


@pytest.mark.parametrize("scheme, m", [("w4a8-fp8", 4096), ("w4a8-fp8", 128), ("w4a8-int8", 1024)])
def test_stmatrix_staging_of_the_w4a8_forms(scheme, m, set_knobs):
    """The register-A W4A8 wide form (M 1024, 4096) and the widened path's W4A16 kernel with per-token scales (M 128)
    with the stmatrix staging, activation quantization included, against the reference (which quantizes the
    activations the same way)."""
    _require_wgmma(torch.float16)
    set_knobs({STSM_KNOB: True})
    torch.manual_seed(m)
    n, k = 2048, 2048
    p = humming.plan(scheme, m, n, k)  # the native register-A W4A8 kernel, or (M 128 here) the widened W4A16 one
    assert p.path in ("wgmma-rs8", "wgmma-rs") and p.tiles.option("stsm"), p.explain()  # with its per-token scales
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 5e-3


# ----------------------------------------------------------------------------- the weight ring depth
@pytest.mark.parametrize("ring", [5, 4])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name, group, m, n, k", [("w4a16", 128, 1024, 4096, 4096), ("w4a16", 128, 2048, 2048, 2944),
                                                  ("w4a16", 64, 1100, 1024, 2048), ("w4a16-zp", 128, 600, 1024, 2048)])
def test_ring_matches_reference(name, group, m, n, k, dtype, ring, set_knobs):
    """The two-warpgroup form with a weight ring of 5 atoms (the default, RING_2WG: with 6 activation stages a trip
    of 12 stages, every slot index and phase a constant of the unrolled stage) and of 4 (register_a.prefetch 4: the
    computed slots): plain tiles in pairs (M 1024, 2048), fitted tiles (M 600), a last tile partly past M (M 1100),
    K whose stage count is not a multiple of the trip, groups of 128 / 64 and zero points."""
    _require_wgmma(dtype)
    if ring != 5:
        set_knobs({RING_KNOB: ring})
    torch.manual_seed(m + n + k + group)
    sch = _scheme(name, group)
    p = humming.plan(sch, m, n, k, act=_act(dtype))
    assert p.path == "wgmma-rs" and p.tiles.bn == 128 and p.tiles.option("prefetch") == ring, p.explain()
    if ring == 5 and not p.tiles.option("streamk") and p.tiles.stages == 6:  # the constant slots
        assert "(u % STAGES)" in humming.api.source(p)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch)
    for _ in range(2):  # fresh activations each time
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]


# ----------------------------------------------------------------------------- default plans through humming.gemm
@pytest.mark.parametrize("m,rounds,want", [(600, False, (208, 132)), (1100, False, (224, 132)), (600, None, (160, 0)),
                                           (1100, None, (192, 0))],
                         ids=["600-rounds-off", "1100-rounds-off", "600-default", "1100-default"])
def test_default_plans_fit_through_gemm(m, rounds, want, monkeypatch, set_knobs):
    """humming.gemm without tuning entries: from M 513 the two-warpgroup form's default plan with its tile fitted, on
    8192 channels where 256-token tiles fill their rounds badly: stream-K over them (register_a.rounds_rules false;
    M=600: three tiles of 208, M=1100: five of 224), or one more token tile, plain (M=600: four of 160, M=1100: six of
    192); every output checked against the reference. The tiles expected are those of 132 SMs (H100 SXM, H200)."""
    dtype = torch.bfloat16
    caps = _require_wgmma(dtype)
    if caps.limits.sms != 132:
        pytest.skip(f"the expected tiles are those of a 132-SM part; {caps.name} declares {caps.limits.sms}")
    monkeypatch.setenv("HUMMING_TUNE", "0")
    if rounds is not None:
        set_knobs({ROUNDS_KNOB: rounds})
    torch.manual_seed(m + 1)
    n, k = 8192, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16-zp")
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    p = _layer(qw, dtype).launches[m].plan
    assert _two_warpgroup(p) and (p.tiles.bm, p.tiles.option("streamk")) == want, p.explain()
    assert rel_error(out, ref) <= TOL[dtype]


def test_shipped_entry_yields_to_streamk_through_gemm(monkeypatch):
    """The shipped 4096x14336 entry of bucket 257-512 (128-token tiles, measured at M=512) at M=300: its 3 tiles per
    channel tile would fill one round of the SMs badly, so stream-K over two 160-token tiles runs (rule (1) of
    register_a.planner's rounds rules); right against the reference, and in CUDA-graph replay. The entry is in
    nvidia-h200.json, so the GEMMs run with that profile (on an H200, or a GPU of its target and SM count: H100 SXM)."""
    dtype = torch.float16
    caps = _require_wgmma(dtype)
    profile = "nvidia-h200"
    h200 = api.resolve_profile(profile)
    if (caps.target.arch, caps.limits.sms) != (h200.target.arch, h200.limits.sms):
        pytest.skip(f"{caps.name} has not {profile}'s target and SM count (the shipped entry is {profile}'s)")
    monkeypatch.delenv("HUMMING_TUNE", raising=False)
    monkeypatch.delenv("HUMMING_TUNE_FILE", raising=False)
    torch.manual_seed(300)
    n, k, m = 4096, 14336, 300
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    ref_of = lambda a: humming.reference_gemm(a, qw, out_dtype=torch.float32)  # noqa: E731
    out = humming.gemm(x, qw, profile=profile)
    torch.cuda.synchronize()
    ran = _plans_that_ran(qw, m)
    assert ran and (ran[-1].tiles.bn, ran[-1].tiles.bm, ran[-1].tiles.option("streamk")) == (128, 160, 132), ran[-1].explain()
    assert "instead of the entry's 128-token tiles" in ran[-1].explain()
    assert not torch.isnan(out).any() and rel_error(out, ref_of(x)) <= TOL[dtype]
    assert graph_replay_error(lambda a: humming.gemm(a, qw, profile=profile), x, ref_of) <= TOL[dtype]


# shapes where the default rule (register_a.planner.streamk_default) takes stream-K or not, through humming.gemm:
# (N, K, M, stream-K expected): 96 tiles of 256 tokens (0.73 a SM, 73% full), 512 (3.9 a SM), 128 (0.97: plain),
# 60 (0.45: below what was measured, plain); M 513 / 700 run the two-warpgroup form (its threshold)
STREAMK_DEFAULTS = [(4096, 2048, 768, True), (8192, 1024, 2048, True), (4096, 2048, 1024, False),
                    (2560, 1024, 700, False), (8192, 512, 513, True)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("case", STREAMK_DEFAULTS, ids=["x".join(str(v) for v in c[:3]) for c in STREAMK_DEFAULTS])
def test_default_streamk_plans_through_gemm(case, dtype, monkeypatch, set_knobs):
    """humming.gemm without tuning entries (HUMMING_TUNE=0): from M 513 the register-A family runs the two-warpgroup
    form, stream-K where the rule says so (the stream-K rule alone: register_a.rounds_rules false; the
    finer tiles: test_default_plans_fit_through_gemm); checked against the reference, repeated launches and graph
    replay."""
    monkeypatch.setenv("HUMMING_TUNE", "0")
    set_knobs({ROUNDS_KNOB: False})
    n, k, m, streamk = case
    _require_wgmma(dtype)
    torch.manual_seed(n + k + m)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16", bias=bias)
    ref_of = lambda a: humming.reference_gemm(a, qw, out_dtype=torch.float32)  # noqa: E731
    for _ in range(3):  # fresh data each time; the per-tile counters reset themselves
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert out.shape == (m, n) and not torch.isnan(out).any()
        assert rel_error(out, ref_of(x)) <= TOL[dtype]
    ran = _plans_that_ran(qw, m)
    assert ran and ran[-1].path == "wgmma-rs" and ran[-1].tiles.bn == 128, [p.kernel_name for p in ran]
    assert bool(ran[-1].tiles.option("streamk")) == streamk, ran[-1].explain()
    assert graph_replay_error(lambda a: humming.gemm(a, qw), x, ref_of) <= TOL[dtype]


def test_default_streamk_with_per_token_scales(monkeypatch):
    """W4A8-FP8 with groups of 64 widened at M 2048 (DEFAULT_M_RANGES: 4-bit layouts other than the register-A W4A8
    kernel's; the default options) runs the two-warpgroup form's default plan with per-token scales in the epilogue:
    with stream-K there (8192 channels: 512 tiles, 3.9 a SM), the split tiles' partials are added before the row
    scales."""
    monkeypatch.setenv("HUMMING_TUNE", "0")
    n, k, m = 8192, 1024, 2048
    _require_wgmma(torch.float16)
    torch.manual_seed(5)
    sch = humming.schemes.get("w4a8-fp8[group_size=64]")
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch)
    p = humming.plan(sch, m, n, k)
    assert p.reasons[0].startswith("widened") and p.row_scale and p.tiles.option("streamk"), p.explain()
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 1e-3
    # the widened route: codes as 16-bit values into the W4A16 kernel, on the weights as a weight-only scheme
    specs = [lay.launches[m] for lay in layers_of(qw) if m in lay.launches]
    assert specs and all(s.inputs == "codes16" for s in specs), [s.plan.kernel_name for s in specs]
    assert all(lay._weight_only is not None for lay in layers_of(qw) if m in lay.launches)
    ran = [s.plan for s in specs if (s.plan.n, s.plan.k) == (n, k) and s.plan.row_scale and s.plan.path == "wgmma-rs"]
    assert ran and all(p.tiles.option("streamk") for p in ran), [p.kernel_name for p in ran]


# (scheme, N, K, M): the default rule's pairs through humming.gemm (HUMMING_TUNE=0): W4A16 8192 x 1024 at M=1024 (256
# tiles of 256 tokens: no stream-K, pairs), W4A8-FP8 with groups of 64 widened at M=1024 and M=2048 (the per-token
# scales in the paired kernel's epilogue), bf16 W4A16 with zero points at M=1024
DEFAULT_PAIRS = [("w4a16", 8192, 1024, 1024, torch.float16), ("w4a8-fp8[group_size=64]", 8192, 1024, 1024, torch.float16),
                 ("w4a8-fp8[group_size=64]", 4096, 1024, 2048, torch.float16),
                 ("w4a16-zp", 8192, 2048, 1024, torch.bfloat16)]


@pytest.mark.parametrize("case", DEFAULT_PAIRS, ids=["-".join(str(v) for v in c[:4]) for c in DEFAULT_PAIRS])
def test_default_pairs_through_gemm(case, monkeypatch):
    """From M 1024 the two-warpgroup form's plain plans of 256-token tiles run in pairs by default
    (register_a.planner.PAIR_CLUSTER_MIN_M; register_a.cluster unset): humming.gemm on fresh data three times (the
    phases of both blocks line up every launch), graph replay, against the reference; the paired kernel is the one
    that ran."""
    monkeypatch.setenv("HUMMING_TUNE", "0")
    name, n, k, m, dtype = case
    _require_wgmma(dtype)
    torch.manual_seed(n + k + m)
    bias = torch.randn(n, device="cuda", dtype=dtype) if name == "w4a16" else None
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get(name), bias=bias)
    tol = TOL[dtype] if name.startswith("w4a16") else 1e-3
    ref_of = lambda a: humming.reference_gemm(a, qw, out_dtype=torch.float32)  # noqa: E731
    for _ in range(3):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert out.shape == (m, n) and not torch.isnan(out).any()
        assert rel_error(out, ref_of(x)) <= tol
    ran = [p for p in _plans_that_ran(qw, m) if p.path == "wgmma-rs"]
    assert ran and all(p.tiles.option("cluster") == 2 and p.cluster_dims == (1, 2, 1) for p in ran), [p.kernel_name for p in ran]
    assert graph_replay_error(lambda a: humming.gemm(a, qw), x, ref_of) <= tol
