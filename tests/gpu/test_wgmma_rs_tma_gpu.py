"""The register-A wgmma W4A16 kernels with their activation stages brought in by TMA tensor copies (tiles.bulk = 1:
one thread per stage, a cuTensorMapEncodeTiled map with 128-byte swizzle passed as a __grid_constant__ parameter,
an mbarrier per slot) against the reference: the small-M form (token tiles 16-128, split-K, fold) and the two-warpgroup
prefill form, partial token tiles (rows past M must arrive as zeros), both activation types, alternating activation
tensors (the map is re-encoded when the address changes) and CUDA-graph replay. Outputs are NaN-poisoned (conftest)."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import TMA_ENV, plan_wna16_wgmma_rs

from .conftest import graph_replay_error, rel_error
from .test_wgmma_rs_gpu import TOL, _biased_layer, _require_wgmma

pytestmark = pytest.mark.gpu

CASES = [("w4a16", 128), ("w4a16", None), ("w4a16-zp", 128), ("w4a16", 256)]


def _force(qw, x, **options):
    """Make humming.gemm run the register-A plan with these options at x's M on the handle it uses there: below
    M 1024 the mma.sync handle (whose plan is the small form), from 1024 the register-A handle (both read the same
    prepared weights)."""
    handle = api.prepared(qw, x.dtype, x.device)
    if x.shape[0] >= 1024:
        humming.gemm(x, qw)
        handle = next(h for key, h in qw.__dict__["_humming_prepared"].items()
                      if key[0] == "wna16-wgmma-rs" and key[1] == x.dtype)
    prep = api._registry[handle]
    m = x.shape[0]
    act = "f16" if x.dtype == torch.float16 else "bf16"
    prep.plans[m] = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="w4a16", tma=True, **options)
    prep.launches.pop(m, None)
    return handle


def _check(qw, x, bias, handle, dtype):
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    spec = api._registry[handle].launches[x.shape[0]]
    assert spec.plan.tiles.bulk in (1, 2) and spec.xmap is not None, spec.plan.explain()
    assert "TMA tensor-copy" in spec.plan.explain()
    assert not torch.isnan(out).any(), ("output not fully written", spec.plan.explain())
    err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
    assert err <= TOL[dtype], (x.shape[0], err, spec.plan.explain())


SMALL = [(9, 16, 1, 0), (16, 16, 4, 1), (24, 32, 2, 0), (33, 48, 1, 0), (64, 64, 2, 0), (100, 128, 1, 0),
         (200, 128, 2, 0), (300, 64, 4, 0)]  # (M, token tile, splits, fold)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g' + str(g) if g else 'channel'}" for n, g in CASES])
def test_small_form_tma(name, group, dtype):
    _require_wgmma(dtype)
    k = 4096
    qw, bias = _biased_layer(name, group, dtype, k=k)
    for m, bt, splits, fold in SMALL:
        if fold and (group is None or name.endswith("zp")):
            fold = 0  # (fold=1 with zero tables spills at 16 tokens: not a configuration the planner picks)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        stages = 8 if bt <= 32 else 4 if bt <= 64 else 6
        handle = _force(qw, x, bt=bt, splits=splits, stages=stages, fold=fold)
        _check(qw, x, bias, handle, dtype)


@pytest.mark.parametrize("bt", [128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_prefill_form_tma(bt, dtype):
    """The two-warpgroup form (128 channels x 128/256 tokens), with a partial last token tile."""
    _require_wgmma(dtype)
    n, k = 2048, 4096
    torch.manual_seed(bt)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16-zp", bias=bias)
    for m in (1024, 1100):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        handle = _force(qw, x, bt=bt, small=False)
        _check(qw, x, bias, handle, dtype)


def test_tma_map_follows_the_activations_and_graph_replay():
    """Two activation tensors in turn (the map is re-encoded for each address), then CUDA-graph replay of a captured
    call with new activations copied into the captured buffer."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(7)
    qw = humming.quantize(torch.randn(1024, 4096, device="cuda") * 0.05, "w4a16")
    m = 40
    xs = [torch.randn(m, 4096, device="cuda", dtype=dtype) for _ in range(2)]
    handle = _force(qw, xs[0], bt=48, splits=2, stages=6)
    for x in xs + xs:
        _check(qw, x, None, handle, dtype)
    err = graph_replay_error(lambda s: humming.gemm(s, qw), xs[0],
                             lambda x: humming.reference_gemm(x, qw, out_dtype=torch.float32))
    assert err <= TOL[dtype]


def test_tma_by_environment(monkeypatch):
    """HUMMING_WGMMA_RS_TMA=1 makes the default plans of both forms use the tensor copies."""
    dtype = torch.float16
    _require_wgmma(dtype)
    monkeypatch.setenv(TMA_ENV, "1")
    torch.manual_seed(11)
    qw = humming.quantize(torch.randn(2048, 4096, device="cuda") * 0.05, "w4a16")
    for m in (32, 128, 1024):
        x = torch.randn(m, 4096, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]
    plans = [s.plan for h in qw.__dict__["_humming_prepared"].values() for s in api._registry[h].launches.values()]
    assert {p.m for p in plans if p.path == "wgmma-rs" and p.tiles.bulk} == {32, 128, 1024}, [p.kernel_name for p in plans]


@pytest.mark.parametrize("bt", [128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_prefill_form_producer_warpgroup(bt, dtype, monkeypatch):
    """HUMMING_WGMMA_RS_WS=1: the two-warpgroup form with a producer warpgroup issuing the tensor copies and mbarrier
    slot releases instead of a block barrier per stage (384 threads, setmaxnreg), with a partial last token tile."""
    _require_wgmma(dtype)
    monkeypatch.setenv("HUMMING_WGMMA_RS_WS", "1")
    n, k = 2048, 4096
    torch.manual_seed(bt + 1)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16-zp", bias=bias)
    for m in (1024, 1100):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        handle = _force(qw, x, bt=bt, small=False)
        assert api._registry[handle].plans[m].tiles.bulk == 2 and api._registry[handle].plans[m].threads == 384
        _check(qw, x, bias, handle, dtype)
