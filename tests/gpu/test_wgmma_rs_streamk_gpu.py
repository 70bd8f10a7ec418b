"""The two-warpgroup register-A form's stream-K option (TileConfig.streamk: persistent blocks take whole tiles in
waves, then split the left-over tiles' k atoms evenly; a split tile's partials added by the block that completes it)
against the reference: token tiles of 128 and 256 (one or three per channel tile), groups, per-channel scales, zero
points, bias, f16 and bf16; block counts that leave whole waves and a few tiles, only split tiles, or fewer left-over
atoms than blocks (blocks without any); rasterized and launch-order tiles; repeated launches (the per-tile counters
reset themselves) and CUDA-graph replay. Outputs are NaN-poisoned before each launch (conftest), data is fresh random
per case, and every case checks that the stream-K kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import RASTER, plan_wna16_wgmma_rs

from .conftest import forced_repeats_and_replay, run_forced_plans
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu

# (scheme, group, token tile, persistent blocks, K): N = 1024 (8 channel tiles)
CONFIGS = [("w4a16", 128, 128, 3, 4096), ("w4a16", None, 128, 132, 4096), ("w4a16-zp", 128, 256, 5, 4096),
           ("w4a16-zp", None, 128, 7, 2048), ("w4a16", 64, 256, 132, 2048), ("w4a16-zp", 256, 128, 11, 4096),
           ("w4a16", 128, 128, 7, 256)]  # the last: 1 tile of 4 atoms left for 7 blocks (3 without any)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(str(v) for v in c) for c in CONFIGS])
def test_streamk_plans_match_reference(cfg, dtype):
    name, group, bt, blocks, k = cfg
    _require_wgmma(dtype)
    torch.manual_seed(bt + 13 * blocks + k)
    n = 1024
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = "f16" if dtype == torch.float16 else "bf16"

    def plans_for(prep, base, m):
        p = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="", bt=bt, small=False, streamk=blocks)
        assert p.tiles.streamk == blocks and f"k{blocks}" in p.kernel_name and p.grid == (1, blocks, 1)
        assert "struct StreamK" in api.source(p)
        yield p

    ms = (bt // 2 + 1, bt, 2 * bt + 5)  # the last: three token tiles, the last one partly past M
    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


def wide_layer_streamk(m: int, bt: int):
    """A fresh W4A16 layer of 28672 x 2048 (224 channel tiles), its prepared f16 handle and the two-warpgroup plan at M
    with ``bt``-token tiles and stream-K over one block per SM: (weights, handle, plan, profile)."""
    caps = _require_wgmma(torch.float16)
    torch.manual_seed(m)
    qw = humming.quantize(torch.randn(28672, 2048, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    p = plan_wna16_wgmma_rs(caps, api._registry[handle].packed.layout, m, "f16", scheme="", bt=bt, small=False,
                            streamk=caps.limits.sms)
    return qw, handle, p, caps


@pytest.mark.parametrize("m", [128, 1100])
def test_streamk_repeats_and_graph_replay(m):
    """A wide layer (224 channel tiles on 132 blocks: one wave, 92 tiles split; at M=1100 five token tiles, raster
    groups) launched 20 times in a row, then CUDA-graph replay with fresh activations."""
    dtype = torch.float16
    qw, handle, p, caps = wide_layer_streamk(m, 128 if m == 128 else 256)
    k = 2048
    assert p.tiles.raster == RASTER and p.grid == (1, caps.limits.sms, 1)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    forced_repeats_and_replay(qw, handle, p, x, TOL[dtype])


# shapes where the default rule (planner_wgmma_rs.streamk_default) takes stream-K or not, through humming.gemm:
# (N, K, M, stream-K expected): 96 tiles of 256 tokens (0.73 a SM, 73% full), 512 (3.9 a SM), 128 (0.97: plain),
# 60 (0.45: below what was measured, plain); M 513 / 700 run the two-warpgroup form (its threshold since 2026-12-01)
DEFAULTS = [(4096, 2048, 768, True), (8192, 1024, 2048, True), (4096, 2048, 1024, False), (2560, 1024, 700, False),
            (8192, 512, 513, True)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("case", DEFAULTS, ids=["x".join(str(v) for v in c[:3]) for c in DEFAULTS])
def test_default_plans_through_gemm(case, dtype, monkeypatch):
    """humming.gemm without tuning entries (HUMMING_TUNE=0): from M 513 the register-A prefill handle runs the
    two-warpgroup form, stream-K where the rule says so; checked against the reference, repeated launches and graph
    replay."""
    from .conftest import graph_replay_error, rel_error

    monkeypatch.setenv("HUMMING_TUNE", "0")
    monkeypatch.delenv("HUMMING_WGMMA_RS_STREAMK", raising=False)
    monkeypatch.setenv("HUMMING_WGMMA_RS_ROUNDS", "0")  # the stream-K rule alone (the finer tiles: test_wgmma_rs_fitted_gpu)
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
    ran = [api._registry[h].plans[m] for h in qw.__dict__["_humming_prepared"].values()
           if isinstance(h, int) and h >= 0 and m in api._registry[h].plans]
    assert ran and ran[-1].path == "wgmma-rs" and ran[-1].tiles.bn == 128, [p.kernel_name for p in ran]
    assert bool(ran[-1].tiles.streamk) == streamk, ran[-1].explain()
    assert graph_replay_error(lambda a: humming.gemm(a, qw), x, ref_of) <= TOL[dtype]


def test_default_streamk_with_per_token_scales(monkeypatch):
    """W4A8-FP8 with groups of 64 widened at M 2048 (DEFAULT_M_RANGES: 4-bit layouts other than the register-A W4A8
    kernel's) runs the two-warpgroup form's default plan with per-token scales in the epilogue: with stream-K there
    (8192 channels: 512 tiles, 3.9 a SM), the split tiles' partials are added before the row scales."""
    from humming.core.common import act_widen as widen

    from .conftest import rel_error

    monkeypatch.setenv("HUMMING_TUNE", "0")
    monkeypatch.delenv(widen.ENV, raising=False)
    n, k, m = 8192, 1024, 2048
    _require_wgmma(torch.float16)
    torch.manual_seed(5)
    sch = humming.schemes.get("w4a8-fp8[group_size=64]")
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch)
    p = humming.plan(sch, m, n, k)
    assert p.reasons[0].startswith("widened") and p.row_scale and p.tiles.streamk, p.explain()
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert "_humming_weight_only" in qw.__dict__ and not torch.isnan(out).any()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 1e-3
    ran = [p for prep in api._registry for mm, p in prep.plans.items()
           if (mm, p.n, p.k) == (m, n, k) and p.row_scale and p.path == "wgmma-rs"]
    assert ran and all(p.tiles.streamk for p in ran), [p.kernel_name for p in ran]


# (N, K, M, token tile, persistent blocks): 28672 x 2048 M=128 on 132 blocks (tiles of two and three parts), 1024 x 4096
# M=261 on 7 blocks (whole waves then split tiles, a token tile partly past M), 1024 x 256 on 7 blocks (blocks without
# atoms), 8192 x 1024 M=2048 with 256-token tiles (3.9 tiles a block: segment after segment)
EARLY_CASES = [(28672, 2048, 128, 128, 132), (1024, 4096, 261, 128, 7), (1024, 256, 128, 128, 7),
               (8192, 1024, 2048, 256, 132)]


@pytest.mark.parametrize("case", EARLY_CASES, ids=["x".join(str(v) for v in c) for c in EARLY_CASES])
def test_early_ring_equals_default(case, monkeypatch):
    """The early ring (TileConfig.early, HUMMING_WGMMA_RS_SK_EARLY=1: the next segment's first weight atoms loaded
    before a segment's epilogue) only moves loads: its output equals the default stream-K kernel's bit for bit, matches
    the reference, and survives 20 launches in a row and graph replay."""
    from humming.core.families.register_a.planner import EARLY_ENV

    from .conftest import rel_error

    n, k, m, bt, blocks = case
    caps = _require_wgmma(torch.float16)
    torch.manual_seed(n + k + m + blocks)
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16", bias=bias)
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    plans = {}
    for early in ("1", "0"):
        monkeypatch.setenv(EARLY_ENV, early)
        plans[early] = plan_wna16_wgmma_rs(caps, prep.packed.layout, m, "f16", scheme="", bt=bt, small=False,
                                           streamk=blocks)
    assert plans["1"].tiles.early == 1 and plans["0"].tiles.early == 0
    assert "ring_ready" in api.source(plans["1"]) and "ring_ready" not in api.source(plans["0"])
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    outs = {}
    for early, p in plans.items():
        prep.plans[m], _ = p, prep.launches.pop(m, None)
        outs[early] = api.gemm_prepared(x, handle)
        torch.cuda.synchronize()
        assert not torch.isnan(outs[early]).any(), (p.kernel_name, "output not fully written")
    assert rel_error(outs["1"], humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16]
    assert torch.equal(outs["1"], outs["0"])  # the same loads, earlier: the same sums
    prep.plans.pop(m, None)
    prep.launches.pop(m, None)
    forced_repeats_and_replay(qw, handle, plans["1"], torch.randn(m, k, device="cuda", dtype=torch.float16),
                              TOL[torch.float16])
