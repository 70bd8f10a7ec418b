"""W4A16 on the small-M form of the register-A wgmma kernel (the default for M 17-1023, and 9-16 on narrow layers:
one warpgroup per 64-channel slab, a token tile of up to 128 in one wgmma m64nBTk16, split-K with the fixed-order
fix-up, on the stream kernel's prepared weights) against the reference, on a GPU whose profile declares wgmma
f16/bf16. Outputs are NaN-poisoned before each launch (conftest), data is fresh random per case, and every case
checks that this kernel ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import FIT_ENV, PATH, fitted_token_tile, plan_wna16_wgmma_rs
from humming.core.tuning import entries as tuning
from humming.errors import ShapeError

from .conftest import rel_error
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu

SHAPES = [(512, 4096), (4096, 2048), (192, 1024)]  # (N, K); 192: N a multiple of 64, not of 128
MS = (9, 16, 17, 33, 48, 64)
CASES = [("w4a16", 128), ("w4a16", None), ("w4a16-zp", 128), ("w4a16-zp", None), ("w4a16", 64), ("w4a16", 256)]


def _small_handle(qw, dtype):
    """The handle humming.gemm used: the mma.sync/stream one, whose plan for M is the small register-A form."""
    return api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g' + str(g) if g else 'channel'}" for n, g in CASES])
def test_wgmma_rs_small(name, group, dtype, n, k):
    _require_wgmma(dtype)
    torch.manual_seed(n + k + (group or 1) + len(name))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        handle = _small_handle(qw, dtype)
        p = api._registry[handle].launches[m].plan
        assert p.path == PATH and p.tiles.bm < 128 and p.kernel_name.startswith("hm_wna16_wgmmars_"), p.explain()
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
    prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, "f16", scheme="w4a16", splits=splits)
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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g' + str(g) if g else 'channel'}" for n, g in CASES])
def test_wgmma_rs_small_fold(name, group, dtype):
    """The fold options (1: scale per group in fp32; 2: the raw codes into the wgmma, zero point from the activation
    sums of an all-ones A, and scale per group in fp32), forced with several stage counts and splits."""
    _require_wgmma(dtype)
    torch.manual_seed(len(name) + (group or 3))
    n, k = 512, 4096
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = "f16" if dtype == torch.float16 else "bf16"
    ran = 0
    for m in (9, 16, 24, 32):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        humming.gemm(x, qw)
        handle = _small_handle(qw, dtype)
        prep = api._registry[handle]
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        for fold, stages, splits in ((1, 8, 4), (2, 8, 4), (1, 4, 2), (2, 6, 8), (2, 4, 1)):
            if fold == 2 and group is None:  # refused: one sum over a whole split loses precision
                with pytest.raises(ShapeError, match="fold=2 needs"):
                    plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme=name, fold=fold)
                continue
            prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme=name, splits=splits,
                                                stages=stages, fold=fold)
            prep.launches.pop(m, None)
            out = humming.gemm(x, qw)
            torch.cuda.synchronize()
            p = api._registry[handle].launches[m].plan
            assert p.tiles.fold == fold and p.splits == splits, p.explain()
            assert not torch.isnan(out).any(), ("output not fully written", p.explain())
            err = rel_error(out, ref)
            assert err <= TOL[dtype], (m, fold, stages, splits, err, p.explain())
            ran += 1
        prep.plans.pop(m, None)
        prep.launches.pop(m, None)
    assert ran


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES[:4], ids=[f"{n}-{'g' + str(g) if g else 'channel'}" for n, g in CASES[:4]])
def test_wgmma_rs_small_wide_tiles(name, group, dtype, monkeypatch):
    """The small form with token tiles of 64-128 at prefill sizes (several token tiles, rows past M in the last one),
    as the tuner times it for M 65-1023 (the tiles as forced: the fit to M switched off)."""
    _require_wgmma(dtype)
    monkeypatch.setenv(FIT_ENV, "0")
    torch.manual_seed(len(name) + (group or 5) + 11)
    n, k = 1024, 2048
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    act = "f16" if dtype == torch.float16 else "bf16"
    for m in (65, 128, 200, 300):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        for bt, stages, splits in ((128, 4, 4), (64, 6, 2), (96, 4, 1), (128, 6, 1)):
            prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme=name, bt=bt,
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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES[:4], ids=[f"{n}-{'g' + str(g) if g else 'channel'}" for n, g in CASES[:4]])
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
    entry = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, 128, "f16", scheme="w4a16", bt=128, small=False)
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


def test_wgmma_rs_small_default_and_switches(monkeypatch):
    """M 17-512 take the small form by default (M 128-512 instead of the dequant-smem wgmma kernel), M 9-16 on a
    narrow layer too; from M 513 the two-warpgroup form (its own handle); HUMMING_WGMMA_RS=0 or HUMMING_WGMMA_WNA16=0
    keep the mma.sync kernels."""
    _require_wgmma(torch.float16)
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, "w4a16")
    handle = _small_handle(qw, torch.float16)
    for m in (12, 40, 128, 512, 700):
        x = torch.randn(m, 2048, device="cuda", dtype=torch.float16)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert (m in api._registry[handle].launches) == (m <= 512)
        ran = [api._registry[h].launches[m].plan for h in qw.__dict__["_humming_prepared"].values()
               if isinstance(h, int) and h >= 0 and m in api._registry[h].launches]
        assert len(ran) == 1 and ran[0].path == PATH and ran[0].tiles.bn == (64 if m <= 512 else 128)
        assert humming.plan("w4a16", m, 1024, 2048).kernel_name == ran[0].kernel_name
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16]
    for env in ("HUMMING_WGMMA_RS", "HUMMING_WGMMA_WNA16"):
        monkeypatch.setenv(env, "0")
        assert humming.plan("w4a16", 40, 1024, 2048).path != PATH
        monkeypatch.delenv(env)
