"""The two-warpgroup register-A form in clusters of two blocks (TileConfig.cluster = 2, humming.core.families.register_a.pair_cluster:
each activation stage read from L2 once and multicast into both blocks' slots) against the reference: token tiles of
128, 160 and 256, groups, per-channel scales, zero points, bias, f16 and bf16, rasterized and in launch order;
repeated launches and CUDA-graph replay on a wide layer. Outputs are NaN-poisoned before each launch (conftest), data
is fresh random per case, and every case checks that the cluster kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import plan_wna16_wgmma_rs

from .conftest import forced_repeats_and_replay, run_forced_plans
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu

# (scheme, group, token tile)
CONFIGS = [("w4a16", 128, 128), ("w4a16", None, 256), ("w4a16-zp", 128, 256), ("w4a16-zp", 64, 160)]


def _plan(prep, m, bt, act):
    return plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="", bt=bt, small=False, cluster=2)


@pytest.mark.parametrize("raster", ["1", "0"], ids=["raster", "launch-order"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(str(v) for v in c) for c in CONFIGS])
def test_pair_plans_match_reference(cfg, dtype, raster, monkeypatch):
    name, group, bt = cfg
    _require_wgmma(dtype)
    if raster == "0":
        monkeypatch.setenv("HUMMING_WGMMA_RS_RASTER", "0")
    torch.manual_seed(bt + (group or 3))
    n, k = 1024, 4096
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = "f16" if dtype == torch.float16 else "bf16"

    def plans_for(prep, base, m):
        p = _plan(prep, m, bt, act)
        assert p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) and "c2" in p.kernel_name
        yield p

    ms = (bt // 2 + 1, bt, 2 * bt + 5)  # the last: three token tiles, the last one partly past M
    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


def test_pair_repeats_and_graph_replay():
    """28672 x 2048 (224 channel tiles, 112 pairs) at M=128, launched 20 times in a row (the EMPTY and FULL phases
    of both blocks must line up every launch), then CUDA-graph replay with fresh activations."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(112)
    n, k = 28672, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    p = _plan(prep, 128, 128, "f16")
    assert p.tiles.cluster == 2
    forced_repeats_and_replay(qw, handle, p, torch.randn(128, k, device="cuda", dtype=dtype), TOL[dtype])


# (scheme, N, K, M): the default rule's pairs through humming.gemm (HUMMING_TUNE=0): W4A16 8192 x 1024 at M=1024 (256
# tiles of 256 tokens: no stream-K, pairs), W4A8-FP8 with groups of 64 widened at M=1024 and M=2048 (the per-token
# scales in the paired kernel's epilogue), bf16 W4A16 with zero points at M=1024
DEFAULT_CASES = [("w4a16", 8192, 1024, 1024, torch.float16), ("w4a8-fp8[group_size=64]", 8192, 1024, 1024, torch.float16),
                 ("w4a8-fp8[group_size=64]", 4096, 1024, 2048, torch.float16), ("w4a16-zp", 8192, 2048, 1024, torch.bfloat16)]


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=["-".join(str(v) for v in c[:4]) for c in DEFAULT_CASES])
def test_default_pairs_through_gemm(case, monkeypatch):
    """From M 1024 the two-warpgroup form's plain plans of 256-token tiles run in pairs by default
    (planner_wgmma_rs.PAIR_CLUSTER_MIN_M): humming.gemm on fresh data three times (the phases of both blocks line up
    every launch), graph replay, against the reference; the paired kernel is the one that ran."""
    from .conftest import graph_replay_error, rel_error

    monkeypatch.setenv("HUMMING_TUNE", "0")
    monkeypatch.delenv("HUMMING_WGMMA_RS_CLUSTER", raising=False)
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
    ran = [p for prep in api._registry for mm, p in prep.plans.items()
           if (mm, p.n, p.k) == (m, n, k) and p.path == "wgmma-rs"]
    assert ran and all(p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1) for p in ran), [p.kernel_name for p in ran]
    assert graph_replay_error(lambda a: humming.gemm(a, qw), x, ref_of) <= tol


# (scheme, group, dtype, N, K, M, token tile, persistent blocks): stream-K in pairs (asked for; units of two blocks):
# 28672 x 2048 M=128 on 66 pairs (112 pair tiles: one wave, 46 split), three token tiles (one partly past M) on 5 pairs
# (two waves, two tiles split), fewer left-over atoms than pairs (1024 x 256 on 3 pairs: one tile of 4 atoms left),
# 256-token tiles with zero points in bf16 (256 pair tiles: three waves, 58 split)
STREAMK_PAIRS = [("w4a16", 128, torch.float16, 28672, 2048, 128, 128, 132),
                 ("w4a16", 128, torch.float16, 1024, 4096, 261, 128, 10),
                 ("w4a16", None, torch.float16, 1024, 256, 128, 128, 6),
                 ("w4a16-zp", 128, torch.bfloat16, 8192, 1024, 2048, 256, 132)]


@pytest.mark.parametrize("case", STREAMK_PAIRS, ids=["-".join(str(v) for v in c[3:]) + f"-{c[0]}" for c in STREAMK_PAIRS])
def test_streamk_pairs_match_reference(case):
    """Stream-K in pairs (TileConfig.cluster = 2 with streamk; generator_wgmma_rs_streamk.pair_rewrite): both blocks
    of a pair run the same segments, each its channel tile; the split tiles' halves handed over with their own
    counters. Against the reference, then 20 launches in a row (counters and both blocks' phases) and graph replay."""
    name, group, dtype, n, k, m, bt, blocks = case
    caps = _require_wgmma(dtype)
    torch.manual_seed(n + k + m + blocks)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = "f16" if dtype == torch.float16 else "bf16"
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    p = plan_wna16_wgmma_rs(caps, prep.packed.layout, m, act, scheme="", bt=bt, small=False, streamk=blocks, cluster=2)
    assert p.tiles.cluster == 2 and p.tiles.streamk == blocks and p.cluster_dims == (1, 2, 1)
    forced_repeats_and_replay(qw, handle, p, torch.randn(m, k, device="cuda", dtype=dtype), TOL[dtype])
