"""W4A8 on the register-A wgmma kernel (sm_90a; the default from M 128, HUMMING_WGMMA_W4A8_RS=0 never; int4 weights widened in registers
to e4m3 / s8 as wgmma's A operand) against the reference, on a GPU whose profile declares wgmma e4m3 / s8. Outputs
are NaN-poisoned before each launch, the data is fresh random per case, and every case checks that this kernel ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a8.planner import ENV, PATH

from .conftest import fresh_gemm, graph_replay_error, launch_spec, rel_error

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened

SHAPES = [(1024, 4096), (4096, 2048)]  # (N, K)
MS = (128, 200, 1024)
TOL = 5e-3
CASES = [("w4a8-fp8", 128), ("w4a8-fp8", None), ("w4a8-int8", 128), ("w4a8-int8", None)]  # None: per channel


def _require_wgmma(a_type):
    caps = api.resolve_profile(None)
    if not caps.find_mma(family="wgmma", a_type=a_type):
        pytest.skip(f"{caps.name} declares no wgmma {a_type} (the register-A W4A8 kernel needs an sm_90a device)")
    if not api._wgmma_runs_here(caps):
        pytest.skip(f"the live GPU is not {caps.name}'s own target")
    return caps


def _scheme(name, group):
    sch = humming.schemes.get(name)
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g128' if g else 'channel'}" for n, g in CASES])
def test_wgmma_rs8_w4a8(name, group, dtype, n, k, monkeypatch):
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("HUMMING_POISON_OUTPUT", "1")
    monkeypatch.setattr(api, "_POISON", True)
    torch.manual_seed(n + k + (group or 1) + len(name) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in MS:
        x, out = fresh_gemm(qw, m, k, dtype)
        p = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m).plan
        assert p.path == PATH, p.explain()
        act = "f16" if dtype == torch.float16 else "bf16"
        assert humming.plan(_scheme(name, group), m, n, k, act=act).path == PATH
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= TOL, (m, err, p.explain())


def test_wgmma_rs8_default_from_m_128(monkeypatch):
    """Without HUMMING_WGMMA_W4A8_RS: M 100 keeps the shared-memory wgmma kernel, M 128 takes this one."""
    _require_wgmma("e4m3")
    monkeypatch.delenv(ENV, raising=False)
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, "w4a8-fp8")
    humming.gemm(torch.randn(100, 2048, device="cuda", dtype=torch.float16), qw)
    assert not any(key[0] == "w4a8-wgmma-rs8" for key in qw.__dict__["_humming_prepared"])
    x = torch.randn(128, 2048, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert any(key[0] == "w4a8-wgmma-rs8" for key in qw.__dict__["_humming_prepared"])
    assert not torch.isnan(out).any()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL


@pytest.mark.parametrize("chain", [128, 64], ids=["one-partial", "two-halves"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g128' if g else 'channel'}" for n, g in CASES])
def test_wgmma_rs8_producer_warpgroup(name, group, dtype, chain, monkeypatch):
    """HUMMING_WGMMA_W4A8_RS_WS=1: a producer warpgroup brings the activation codes in by TMA tensor copies and the
    consumers release slots by mbarrier (384 threads), with a partial last token tile and graph replay; one
    128-token chain per stage or two 64-token halves into two partials (HUMMING_WGMMA_W4A8_RS_CHAIN=64)."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_WS", "1")
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_BT", "128")
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CHAIN", str(chain))
    # int8 per channel: one 128-token chain is its default int32 sums (TileConfig.direct); two halves: promoted
    direct = int(name == "w4a8-int8" and group is None and chain == 128)
    if name == "w4a8-int8" and group is None and chain == 64:
        monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_DIRECT", "0")
    n, k = 1024, 4096
    torch.manual_seed(n + (group or 1) + len(name) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    _run_checked(qw, bias, dtype, k, (128, 300, 1100), lambda p: p.tiles.bulk == 2 and p.threads == 384
                 and p.tiles.bm == 128 and p.instruction.shape[1] == chain and p.tiles.direct == direct)


@pytest.mark.parametrize("chain,raster", [(128, 0), (64, 0), (64, 3)], ids=["halves", "quarters", "quarters-raster3"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g128' if g else 'channel'}" for n, g in CASES])
def test_wgmma_rs8_wide_form(name, group, dtype, chain, raster, monkeypatch):
    """HUMMING_WGMMA_W4A8_RS_BT=256: the wide form (256 tokens per block, each widened fragment used for two token
    halves, or four quarters with two partials (HUMMING_WGMMA_W4A8_RS_CHAIN=64), codes and group scales by bulk copy
    into the slot) on partial and whole token tiles, K of 33 stages (the slot ring wraps unevenly), a bias, and graph
    replay; blocks in launch order or rasterized in groups of 3 token tiles (M 777: groups of 3 and 1). Int8 with
    per-channel scales in halves: the default int32 sums across stages (TileConfig.direct; an odd stage count)."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    # int8 per channel: the halves are its default exact int32 sums (TileConfig.direct), the quarters the promoted form
    direct = int(name == "w4a8-int8" and group is None and chain == 128)
    qw, bias, k = _wide_case(monkeypatch, name, group, dtype, chain, raster, 3 * 768,
                             **({} if direct or chain == 128 else {"HUMMING_WGMMA_W4A8_RS_DIRECT": "0"}))
    _run_checked(qw, bias, dtype, k, (128, 300, 512, 777),
                 lambda p: p.tiles.bm == 256 and p.threads == 384 and p.instruction.shape[1] == chain
                 and p.tiles.raster == raster and p.tiles.direct == direct)


def _wide_case(monkeypatch, name, group, dtype, chain: int, raster: int, seed: int, **env):
    """The wide form forced (with ``env`` set too), outputs poisoned, and a fresh random [768, 33 x 128] weight with a
    bias: (weight, bias, K). K of 33 stages: the slot ring wraps unevenly."""
    for var, value in {ENV: "1", "HUMMING_WGMMA_W4A8_RS_BT": "256", "HUMMING_WGMMA_W4A8_RS_CHAIN": str(chain),
                       "HUMMING_WGMMA_W4A8_RS_RASTER": str(raster), "HUMMING_POISON_OUTPUT": "1", **env}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(api, "_POISON", True)
    n, k = 768, 33 * 128
    torch.manual_seed(seed + (group or 1) + len(name) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    return humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias), bias, k


def _run_checked(qw, bias, dtype, k: int, ms, expected) -> None:
    """Run the register-A W4A8 kernel at each M on fresh activations: its plan is this path and passes
    ``expected(plan)``, the output is fully written and matches the reference; then CUDA-graph replay of the last M."""
    for m in ms:
        x, out = fresh_gemm(qw, m, k, dtype)
        spec = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m)
        assert spec.plan.path == PATH and expected(spec.plan), spec.plan.explain()
        assert spec.xmap is not None and not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, spec.plan.explain())
    err = graph_replay_error(lambda s: humming.gemm(s, qw), x,
                             lambda x2: humming.reference_gemm(x2, qw, bias=bias, out_dtype=torch.float32))
    assert err <= TOL


@pytest.mark.parametrize("chain,raster", [(64, 4), (128, 0), (64, 3)], ids=["quarters", "halves-launch", "quarters-raster3"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g128' if g else 'channel'}" for n, g in CASES])
def test_wgmma_rs8_wide_cluster(name, group, dtype, chain, raster, monkeypatch):
    """HUMMING_WGMMA_W4A8_RS_CLUSTER=2: the wide form in clusters of two blocks (adjacent channel tiles) that take turns
    multicasting each activation stage into both blocks' slots, on partial and whole token tiles, K of 33 stages (an
    odd count: the copier alternates unevenly and the slot ring wraps), a bias and graph replay."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    if not api.resolve_profile(None).memory.cluster_multicast:
        pytest.skip("the profile declares no cluster_multicast")
    qw, bias, k = _wide_case(monkeypatch, name, group, dtype, chain, raster, 5 * 768 + chain,
                             HUMMING_WGMMA_W4A8_RS_CLUSTER="2", HUMMING_WGMMA_W4A8_RS_STREAMK="0")
    _run_checked(qw, bias, dtype, k, (128, 300, 777, 1024),
                 lambda p: p.tiles.bm == 256 and p.tiles.cluster == 2 and p.cluster_dims == (1, 2, 1)
                 and p.instruction.shape[1] == chain and p.tiles.raster == raster and not p.tiles.streamk)


@pytest.mark.parametrize("name", ["w4a8-fp8", "w4a8-int8"])
def test_wgmma_rs8_wide_pdl_chain(name, monkeypatch):
    """The wide form launched with PDL behind its activation quantizer (HUMMING_WGMMA_W4A8_RS_PDL=1; griddepcontrol
    declared), in a chain y2 = gemm(gemm(x, w1), w2) repeated on fresh inputs without synchronizing: each GEMM's
    producer copies weights before the quantizer has finished, and the next quantizer reads the previous GEMM's
    output. Every output is checked against the reference (the second on the first's actual output), then the chain
    is captured in a CUDA graph and replayed on new activations."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    monkeypatch.delenv("HUMMING_PDL", raising=False)
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_PDL", "1")
    qw2, bias, k = _wide_case(monkeypatch, name, 128, torch.float16, 64, 4, 4242)
    qw1 = humming.quantize(torch.randn(k, k, device="cuda") * 0.03, _scheme(name, 128))
    outs = []
    for m in (300, 777, 512, 777):
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        y1 = humming.gemm(x, qw1)
        outs.append((x, y1, humming.gemm(y1, qw2)))
    for qw, m in ((qw1, 777), (qw2, 777)):
        spec = launch_spec(qw, "w4a8-wgmma-rs8", torch.float16, m)
        assert spec.plan.path == PATH and spec.plan.tiles.bm == 256 and spec.pdl, spec.plan.explain()
    torch.cuda.synchronize()
    for x, y1, y2 in outs:
        assert not torch.isnan(y1).any() and not torch.isnan(y2).any()
        assert rel_error(y1, humming.reference_gemm(x, qw1, out_dtype=torch.float32)) <= TOL
        assert rel_error(y2, humming.reference_gemm(y1, qw2, bias=bias, out_dtype=torch.float32)) <= TOL
    static = outs[-1][0].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g1 = humming.gemm(static, qw1)
        g2 = humming.gemm(g1, qw2)
    static.copy_(torch.randn_like(static))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(g1, humming.reference_gemm(static, qw1, out_dtype=torch.float32)) <= TOL
    assert rel_error(g2, humming.reference_gemm(g1, qw2, bias=bias, out_dtype=torch.float32)) <= TOL


FITTED = [("w4a8-fp8", 128, torch.float16, ""), ("w4a8-int8", None, torch.bfloat16, ""),
          ("w4a8-fp8", None, torch.bfloat16, "5"), ("w4a8-int8", 128, torch.float16, "7")]


@pytest.mark.parametrize("name,group,dtype,streamk", FITTED,
                         ids=[f"{n}-{'g128' if g else 'channel'}-{'bf16' if d == torch.bfloat16 else 'f16'}-sk{s or 0}"
                              for n, g, d, s in FITTED])
def test_wgmma_rs8_wide_fitted_192(name, group, dtype, streamk, monkeypatch):
    """The wide form with its tile fitted to M in 64-token chains: M 257-384 and 513-576 run tiles of 192 tokens (three
    chains, the partials alternating across the stage), plain and with stream-K (HUMMING_WGMMA_W4A8_RS_STREAMK=B);
    K of 33 stages (the slot ring wraps unevenly), bias, every output written and right, then CUDA-graph replay."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    for var in ("HUMMING_WGMMA_W4A8_RS_BT", "HUMMING_WGMMA_W4A8_RS_CHAIN", "HUMMING_WGMMA_RS_FIT_TILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_STREAMK", streamk or "0")
    monkeypatch.setenv("HUMMING_POISON_OUTPUT", "1")
    monkeypatch.setattr(api, "_POISON", True)
    n, k = 8192, 33 * 128  # 64 channel tiles: the wide form's blocks fill the SMs (planner_wgmma_rs8.token_tile)
    torch.manual_seed(n + (group or 1) + len(name) + len(streamk))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in (300, 384, 513):
        x, out = fresh_gemm(qw, m, k, dtype)
        p = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m).plan
        assert p.path == PATH and p.tiles.bm == 192 and p.instruction.shape[1] == 64, p.explain()
        assert p.tiles.streamk == (min(int(streamk), -(-m // 256) * 64 * 33) if streamk else 0), p.explain()
        assert not torch.isnan(out).any(), (m, "output not fully written")
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
    err = graph_replay_error(lambda s: humming.gemm(s, qw), x,
                             lambda x2: humming.reference_gemm(x2, qw, bias=bias, out_dtype=torch.float32))
    assert err <= TOL
