"""The register-A W4A8 family (humming.core.families.register_a8; sm_90a, int4 weights widened in registers to
e4m3 / s8 as wgmma's A operand) against humming.reference_gemm over its variants: the path from M 128, the narrow
form with the producer warpgroup or lock-step and its weight rings, the wide form (token halves / quarters,
rasterized, clusters, PDL chains, tiles fitted to 192 or 128 tokens, stream-K, the staggered start, converter
warps) and direct accumulation for per-channel scales. Outputs are NaN-poisoned before each launch, data is fresh
random per case, and every case checks the plan that ran."""
import itertools

import pytest
import torch

import humming
from humming import GemmOptions, api
from humming.core.families.register_a8.planner import (
    CHAIN_KNOB,
    CLUSTER_KNOB,
    DIRECT_S8_KNOB,
    MIN_M_KNOB,
    NARROW_PF_KNOB,
    PATH,
    PDL_RS8_KNOB,
    PRODUCER_KNOB,
    RASTER_KNOB,
    STAGGER_CHAINS_KNOB,
    STREAMK_KNOB,
    WIDE_FROM_KNOB,
    WIDE_KNOB,
    WIDENED_KNOB,
)
from humming.core.registry import family_of
from humming.devices.current import runs_here

from .conftest import biased_weight, graph_replay_error, launch_spec, layers_of, rel_error

pytestmark = pytest.mark.gpu

SHAPES = [(1024, 4096), (4096, 2048)]  # (N, K)
MS = (128, 200, 1024)
TOL = 5e-3
CASES = [("w4a8-fp8", 128), ("w4a8-fp8", None), ("w4a8-int8", 128), ("w4a8-int8", None)]  # None: per channel
CASE_IDS = [f"{n}-{'g128' if g else 'channel'}" for n, g in CASES]
NATIVE = GemmOptions(act_widen=False)  # the native 8-bit kernels, not the widened weight-only path
FAST = GemmOptions(act_widen=False, fast_accum=True)
F16, BF16 = torch.float16, torch.bfloat16


def _require_wgmma(a_type):
    caps = api.resolve_profile(None)
    if not caps.find_mma(family="wgmma", a_type=a_type):
        pytest.skip(f"{caps.name} declares no wgmma {a_type} (the register-A W4A8 kernel needs an sm_90a device)")
    if not runs_here(caps):
        pytest.skip(f"the live GPU is not {caps.name}'s own target")
    return caps


def _scheme(name, group):
    sch = humming.schemes.get(name)
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _gemm(qw, m: int, k: int, dtype, options=NATIVE):
    """``humming.gemm`` with ``options`` on fresh random activations [m, k] of ``dtype``, synchronized: (x, out)."""
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    out = humming.gemm(x, qw, options=options)
    torch.cuda.synchronize()
    return x, out


def _replay_error(qw, x, bias=None) -> float:
    return graph_replay_error(lambda s: humming.gemm(s, qw, options=NATIVE), x,
                              lambda x2: humming.reference_gemm(x2, qw, bias=bias, out_dtype=torch.float32))


# ----------------------------------------------------------------------------- the path and the narrow form
@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=CASE_IDS)
def test_wgmma_rs8_w4a8(name, group, dtype, n, k, set_knobs):
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    set_knobs({MIN_M_KNOB: 128})
    torch.manual_seed(n + k + (group or 1) + len(name) + (dtype == BF16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in MS:
        x, out = _gemm(qw, m, k, dtype)
        p = launch_spec(qw, dtype, m).plan
        assert p.path == PATH, p.explain()
        act = "f16" if dtype == F16 else "bf16"
        assert humming.plan(_scheme(name, group), m, n, k, act=act, options=NATIVE).path == PATH
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= TOL, (m, err, p.explain())


def test_wgmma_rs8_default_from_m_128():
    """With the knobs' defaults: M 100 keeps the shared-memory wgmma kernel (the wgmma_8bit family), M 128 takes this
    one (the register_a8 family), both on the one layer prepared with these options."""
    _require_wgmma("e4m3")
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, "w4a8-fp8")
    humming.gemm(torch.randn(100, 2048, device="cuda", dtype=F16), qw, options=NATIVE)
    below = launch_spec(qw, F16, 100).plan
    assert family_of(below).name == "wgmma_8bit" and below.path != PATH, below.explain()
    x = torch.randn(128, 2048, device="cuda", dtype=F16)
    out = humming.gemm(x, qw, options=NATIVE)
    torch.cuda.synchronize()
    p = launch_spec(qw, F16, 128).plan
    assert family_of(p).name == "register_a8" and p.path == PATH, p.explain()
    assert len(layers_of(qw, F16)) == 1
    assert not torch.isnan(out).any()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL


def _run_checked(qw, bias, dtype, k: int, ms, expected) -> None:
    """Run the register-A W4A8 kernel at each M on fresh activations: its plan is this path and passes
    ``expected(plan)``, the output is fully written and matches the reference; then CUDA-graph replay of the last M."""
    for m in ms:
        x, out = _gemm(qw, m, k, dtype)
        spec = launch_spec(qw, dtype, m)
        assert spec.plan.path == PATH and expected(spec.plan), spec.plan.explain()
        assert spec.xmap is not None and not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, spec.plan.explain())
    assert _replay_error(qw, x, bias) <= TOL


@pytest.mark.parametrize("chain", [128, 64], ids=["one-partial", "two-halves"])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=CASE_IDS)
def test_wgmma_rs8_producer_warpgroup(name, group, dtype, chain, set_knobs):
    """register_a8.producer: a producer warpgroup brings the activation codes in by TMA tensor copies and the
    consumers release slots by mbarrier (384 threads), with a partial last token tile and graph replay; one
    128-token chain per stage or two 64-token halves into two partials (register_a8.chain 64)."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    set_knobs({MIN_M_KNOB: 128, PRODUCER_KNOB: True, WIDE_KNOB: 128, CHAIN_KNOB: chain})
    # int8 per channel: one 128-token chain is its default int32 sums (RegisterA8Tiles.direct); two halves: promoted
    direct = int(name == "w4a8-int8" and group is None and chain == 128)
    if name == "w4a8-int8" and group is None and chain == 64:
        set_knobs({DIRECT_S8_KNOB: False})
    n, k = 1024, 4096
    torch.manual_seed(n + (group or 1) + len(name) + (dtype == BF16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    _run_checked(qw, bias, dtype, k, (128, 300, 1100), lambda p: p.tiles.option("bulk") == 2 and p.threads == 384
                 and p.tiles.bm == 128 and p.instruction.shape[1] == chain and p.tiles.option("direct") == direct)


# ----------------------------------------------------------------------------- the wide form
def _wide_case(set_knobs, name, group, dtype, chain: int, raster: int, seed: int, **more):
    """The wide form forced (with the knobs ``more`` too) and a fresh random [768, 33 x 128] weight with a bias:
    (weight, bias, K). K of 33 stages: the slot ring wraps unevenly."""
    set_knobs({MIN_M_KNOB: 128, WIDE_KNOB: 256, CHAIN_KNOB: chain, RASTER_KNOB: raster, **more})
    n, k = 768, 33 * 128
    torch.manual_seed(seed + (group or 1) + len(name) + (dtype == BF16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    return humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias), bias, k


@pytest.mark.parametrize("chain,raster", [(128, 0), (64, 0), (64, 3)], ids=["halves", "quarters", "quarters-raster3"])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=CASE_IDS)
def test_wgmma_rs8_wide_form(name, group, dtype, chain, raster, set_knobs):
    """register_a8.token_tile 256: the wide form (256 tokens per block, each widened fragment used for two token
    halves, or four quarters with two partials (register_a8.chain 64), codes and group scales by bulk copy into the
    slot) on partial and whole token tiles, K of 33 stages (the slot ring wraps unevenly), a bias, and graph replay;
    blocks in launch order or rasterized in groups of 3 token tiles (M 777: groups of 3 and 1). Int8 with per-channel
    scales in halves: the default int32 sums across stages (RegisterA8Tiles.direct; an odd stage count)."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    # int8 per channel: the halves are its default exact int32 sums (RegisterA8Tiles.direct), the quarters the promoted form
    direct = int(name == "w4a8-int8" and group is None and chain == 128)
    qw, bias, k = _wide_case(set_knobs, name, group, dtype, chain, raster, 3 * 768,
                             **({} if direct or chain == 128 else {DIRECT_S8_KNOB: False}))
    _run_checked(qw, bias, dtype, k, (128, 300, 512, 777),
                 lambda p: p.tiles.bm == 256 and p.threads == 384 and p.instruction.shape[1] == chain
                 and p.tiles.option("raster") == raster and p.tiles.option("direct") == direct)


@pytest.mark.parametrize("chain,raster", [(64, 4), (128, 0), (64, 3)], ids=["quarters", "halves-launch", "quarters-raster3"])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=CASE_IDS)
def test_wgmma_rs8_wide_cluster(name, group, dtype, chain, raster, set_knobs):
    """register_a8.cluster 2: the wide form in clusters of two blocks (adjacent channel tiles) that take turns
    multicasting each activation stage into both blocks' slots, on partial and whole token tiles, K of 33 stages (an
    odd count: the copier alternates unevenly and the slot ring wraps), a bias and graph replay."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    if not api.resolve_profile(None).memory.cluster_multicast:
        pytest.skip("the profile declares no cluster_multicast")
    qw, bias, k = _wide_case(set_knobs, name, group, dtype, chain, raster, 5 * 768 + chain,
                             **{CLUSTER_KNOB: 2, STREAMK_KNOB: 0})
    _run_checked(qw, bias, dtype, k, (128, 300, 777, 1024),
                 lambda p: p.tiles.bm == 256 and p.tiles.option("cluster") == 2 and p.cluster_dims == (1, 2, 1)
                 and p.instruction.shape[1] == chain and p.tiles.option("raster") == raster and not p.tiles.option("streamk"))


@pytest.mark.parametrize("name", ["w4a8-fp8", "w4a8-int8"])
def test_wgmma_rs8_wide_pdl_chain(name, set_knobs):
    """The wide form launched with PDL behind its activation quantizer (register_a8.pdl; griddepcontrol declared), in
    a chain y2 = gemm(gemm(x, w1), w2) repeated on fresh inputs without synchronizing: each GEMM's producer copies
    weights before the quantizer has finished, and the next quantizer reads the previous GEMM's output. Every output
    is checked against the reference (the second on the first's actual output), then the chain is captured in a CUDA
    graph and replayed on new activations."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    qw2, bias, k = _wide_case(set_knobs, name, 128, F16, 64, 4, 4242, **{PDL_RS8_KNOB: True})
    qw1 = humming.quantize(torch.randn(k, k, device="cuda") * 0.03, _scheme(name, 128))
    outs = []
    for m in (300, 777, 512, 777):
        x = torch.randn(m, k, device="cuda", dtype=F16)
        y1 = humming.gemm(x, qw1, options=NATIVE)
        outs.append((x, y1, humming.gemm(y1, qw2, options=NATIVE)))
    for qw, m in ((qw1, 777), (qw2, 777)):
        spec = launch_spec(qw, F16, m)
        assert spec.plan.path == PATH and spec.plan.tiles.bm == 256 and spec.pdl, spec.plan.explain()
    torch.cuda.synchronize()
    for x, y1, y2 in outs:
        assert not torch.isnan(y1).any() and not torch.isnan(y2).any()
        assert rel_error(y1, humming.reference_gemm(x, qw1, out_dtype=torch.float32)) <= TOL
        assert rel_error(y2, humming.reference_gemm(y1, qw2, bias=bias, out_dtype=torch.float32)) <= TOL
    static = outs[-1][0].clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g1 = humming.gemm(static, qw1, options=NATIVE)
        g2 = humming.gemm(g1, qw2, options=NATIVE)
    static.copy_(torch.randn_like(static))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_error(g1, humming.reference_gemm(static, qw1, out_dtype=torch.float32)) <= TOL
    assert rel_error(g2, humming.reference_gemm(g1, qw2, bias=bias, out_dtype=torch.float32)) <= TOL


FITTED = [("w4a8-fp8", 128, F16, ""), ("w4a8-int8", None, BF16, ""),
          ("w4a8-fp8", None, BF16, "5"), ("w4a8-int8", 128, F16, "7")]


@pytest.mark.parametrize("name,group,dtype,streamk", FITTED,
                         ids=[f"{n}-{'g128' if g else 'channel'}-{'bf16' if d == BF16 else 'f16'}-sk{s or 0}"
                              for n, g, d, s in FITTED])
def test_wgmma_rs8_wide_fitted_192(name, group, dtype, streamk, set_knobs):
    """The wide form with its tile fitted to M in 64-token chains: M 257-384 and 513-576 run tiles of 192 tokens (three
    chains, the partials alternating across the stage), plain and with stream-K (register_a8.streamk B); K of 33
    stages (the slot ring wraps unevenly), bias, every output written and right, then CUDA-graph replay."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    set_knobs({MIN_M_KNOB: 128, STREAMK_KNOB: int(streamk or 0)})
    n, k = 8192, 33 * 128  # 64 channel tiles: the wide form's blocks fill the SMs (register_a8.planner.token_tile)
    torch.manual_seed(n + (group or 1) + len(name) + len(streamk))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in (300, 384, 513):
        x, out = _gemm(qw, m, k, dtype)
        p = launch_spec(qw, dtype, m).plan
        assert p.path == PATH and p.tiles.bm == 192 and p.instruction.shape[1] == 64, p.explain()
        assert p.tiles.option("streamk") == (min(int(streamk), -(-m // 256) * 64 * 33) if streamk else 0), p.explain()
        assert not torch.isnan(out).any(), (m, "output not fully written")
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
    assert _replay_error(qw, x, bias) <= TOL


# ----------------------------------------------------------------------------- stream-K
# (scheme, group, persistent blocks, chain, raster, N, K); M in STREAMK_MS: tiles = ceil(M / 256) x N / 128
STREAMK_CONFIGS = [("w4a8-fp8", 128, 5, 64, 4, 768, 33 * 128),     # 6 / 12 / 24 tiles on 5 blocks: waves, then splits
                   ("w4a8-fp8", None, 132, 64, 4, 1024, 4096),      # fewer tiles than blocks: every tile split
                   ("w4a8-int8", 128, 7, 128, 0, 768, 2048),        # chains of 128 tokens, launch order
                   ("w4a8-int8", None, 11, 64, 3, 1024, 4096),
                   ("w4a8-fp8", 128, 13, 64, 0, 256, 256)]          # 2 atoms per tile: at M=300 8 atoms, so 8 blocks
STREAMK_MS = (300, 777, 1024)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", STREAMK_CONFIGS, ids=["-".join(str(v) for v in c) for c in STREAMK_CONFIGS])
def test_streamk_matches_reference(cfg, dtype, set_knobs):
    """Stream-K (persistent blocks take whole 256-token tiles in waves, then split the left-over tiles' k atoms
    evenly; a split tile's partials added by the block that completes it): block counts that leave whole waves and a
    few tiles, only split tiles, or fewer left-over atoms than blocks (blocks without any); token tiles partly past
    M; repeated launches (the per-tile counters reset themselves) and CUDA-graph replay."""
    name, group, blocks, chain, raster, n, k = cfg
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    set_knobs({MIN_M_KNOB: 128, WIDE_KNOB: 256, CHAIN_KNOB: chain, RASTER_KNOB: raster, STREAMK_KNOB: blocks})
    torch.manual_seed(n + k + blocks + (group or 1) + (dtype == BF16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in STREAMK_MS:
        x, out = _gemm(qw, m, k, dtype)
        spec = launch_spec(qw, dtype, m)
        p = spec.plan
        planned = min(blocks, -(-m // 256) * (n // 128) * (k // 128))  # no more blocks than k atoms
        assert p.path == PATH and p.tiles.option("streamk") == planned and p.grid == (1, planned, 1), p.explain()
        assert p.tiles.bm == 256 and p.instruction.shape[1] == chain and p.tiles.option("raster") == raster
        assert "streamk_segment" in api.source(p) and f"k{planned}" in p.kernel_name
        assert not torch.isnan(out).any(), (m, "output not fully written")
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
    # the last M again 10 times (counters reset themselves), then CUDA-graph replay on fresh activations
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
    for _ in range(10):
        assert rel_error(humming.gemm(x, qw, options=NATIVE), ref) <= TOL
    assert _replay_error(qw, x, bias) <= TOL


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
def test_streamk_default_rule_through_gemm(scheme):
    """With the knobs' defaults: 8192 channels at M=768 give 192 wide tiles (1.45 a SM, rounds 73% full): stream-K
    over one block per SM by default; at M=4096 (1024 tiles, 97% full) not; 4096 channels at M=768 run the wide form
    (96 tiles: one round, where 128-token tiles take two) without stream-K; a narrow layer (8 channel tiles) at M=512
    neither. Checked against the reference."""
    caps = _require_wgmma("e4m3" if scheme.endswith("fp8") else "s8")
    torch.manual_seed(len(scheme))
    for n, k, m, expect, bt in ((8192, 1024, 768, True, 256), (8192, 1024, 4096, False, 256),
                                (4096, 1024, 768, False, 256), (1024, 2048, 512, False, 128)):
        qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
        x, out = _gemm(qw, m, k, F16)
        p = launch_spec(qw, F16, m).plan
        assert bool(p.tiles.option("streamk")) == expect and (not expect or p.tiles.option("streamk") == caps.limits.sms), p.explain()
        assert p.tiles.bm == bt, p.explain()
        assert not torch.isnan(out).any()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL, p.explain()


# ----------------------------------------------------------------------------- direct accumulation
def _layer(qw, dtype, fast: bool):
    """The layer prepared for ``dtype`` with the fast-accumulation options (FAST) or the native ones (NATIVE): keys of
    ``_humming_prepared`` are (dtype, device, profile, options)."""
    options = FAST if fast else NATIVE
    found = [api._registry[h] for key, h in qw.__dict__["_humming_prepared"].items()
             if key[0] == dtype and key[3] == options]
    assert len(found) == 1, (dtype, options, list(qw.__dict__["_humming_prepared"]))
    return found[0]


def _spec(qw, dtype, m: int, fast: bool):
    """The launch spec of M on the layer prepared with the fast-accumulation options or the native ones."""
    return _layer(qw, dtype, fast).launches[m]


def _direct_and_promoted(qw, m: int, k: int, dtype, set_knobs, fast: bool = True,
                         tokens: int = 256) -> tuple[float, float, torch.Tensor, torch.Tensor]:
    """(relative error of the direct-accumulation kernel, of the promoted kernel, their outputs) on the same fresh
    activations. ``fast``: the direct form by GemmOptions.fast_accum (e4m3; the promoted form without it, on another
    prepared handle); else by the knob register_a8.direct_int8 (int8; the same handle re-planned with it off). The
    direct plan's token tile is ``tokens``."""
    if not fast:
        set_knobs({DIRECT_S8_KNOB: True})
    x, out = _gemm(qw, m, k, dtype, FAST if fast else NATIVE)
    p = _spec(qw, dtype, m, fast).plan
    assert p.path == PATH and p.tiles.option("direct") == 1 and p.tiles.bm == tokens, p.explain()
    assert not torch.isnan(out).any()
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    if not fast:  # the same prepared layer: its launches were planned with the knob on
        set_knobs({DIRECT_S8_KNOB: False})
        for lay in layers_of(qw):
            lay.plans.clear()
            lay.launches.clear()
    promoted = humming.gemm(x, qw, options=NATIVE)
    torch.cuda.synchronize()
    assert _spec(qw, dtype, m, False).plan.tiles.option("direct") == 0
    return rel_error(out, ref), rel_error(promoted, ref), out, promoted


@pytest.mark.parametrize("k", [4096, 384])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
def test_fast_accumulation_matches_reference(dtype, k, set_knobs):
    """e4m3 with per-channel scales under GemmOptions.fast_accum (the wgmmas accumulate across every stage, the
    channel scale in the epilogue; groups of 128 keep the promoted loop): K 4096 (an even stage count) and 384 (odd),
    M 512 and 470 (rows past M); the promoted form on the same activations for comparison (~2x its error at K=4096)."""
    group = None
    _require_wgmma("e4m3")
    set_knobs({WIDE_FROM_KNOB: 256})
    n = 2048
    qw = biased_weight(_scheme("w4a8-fp8", group), n, k, dtype, n + k + (group or 1) + (dtype == BF16))
    for m in (512, 470):
        fast, promoted, _, _ = _direct_and_promoted(qw, m, k, dtype, set_knobs)
        assert fast <= TOL, (m, fast, promoted)
        print(f"K={k} M={m} {dtype}: fast {fast:.2e}, promoted {promoted:.2e}")


@pytest.mark.parametrize("k", [4096, 384])
@pytest.mark.parametrize("dtype", [F16, BF16], ids=["f16", "bf16"])
def test_int8_per_channel_int32_sums(dtype, k, set_knobs):
    """Int8 activations with per-channel scales (the default: register_a8.direct_int8 true): the int32 sums over
    every stage, exact, against the reference and the promoted kernel (which rounds each stage's partial into fp32):
    the same outputs up to the fp32 rounding of the promotion."""
    _require_wgmma("s8")
    set_knobs({WIDE_FROM_KNOB: 256})
    n = 2048
    qw = biased_weight(_scheme("w4a8-int8", None), n, k, dtype, n + k + 5 + (dtype == BF16))
    for m in (512, 470):
        direct, promoted, out, other = _direct_and_promoted(qw, m, k, dtype, set_knobs, fast=False)
        assert direct <= TOL and rel_error(out, other) <= 2e-3, (m, direct, promoted)
        print(f"int8 K={k} M={m} {dtype}: direct {direct:.2e}, promoted {promoted:.2e}")


@pytest.mark.parametrize("k", [4096, 384])
@pytest.mark.parametrize("form", ["narrow", "fitted"])
@pytest.mark.parametrize("name", ["w4a8-int8", "w4a8-fp8"])
def test_direct_accumulation_in_narrow_and_fitted_tiles(name, form, k, set_knobs):
    """The narrow form (128 tokens, one 128-token chain a stage; M 128 / 200 / 470) and the wide form's tiles fitted
    to M (128 / 192 tokens in 64-token chains, forced from M 128; M 128 / 150 / 300, and 470 in 256-token tiles)
    accumulating across stages: int8 by default, e4m3 with GemmOptions.fast_accum; against the reference and the
    promoted form on the same activations."""
    _require_wgmma("s8" if name == "w4a8-int8" else "e4m3")
    if form == "fitted":
        set_knobs({WIDE_FROM_KNOB: 128})
    n, dtype = 2048, F16
    qw = biased_weight(_scheme(name, None), n, k, dtype, n + k + len(form) + len(name))
    tiles = {"narrow": {128: 128, 200: 128, 470: 128}, "fitted": {128: 128, 150: 192, 300: 192, 470: 256}}[form]
    for m, bm in tiles.items():
        direct, promoted, out, other = _direct_and_promoted(qw, m, k, dtype, set_knobs, fast=name != "w4a8-int8",
                                                            tokens=bm)
        assert direct <= TOL, (m, direct, promoted)
        if name == "w4a8-int8":
            assert rel_error(out, other) <= 2e-3, (m, direct, promoted)
        print(f"{name} {form} K={k} M={m}: direct {direct:.2e}, promoted {promoted:.2e}")


# ----------------------------------------------------------------------------- rings, stagger, wide at 128, converters
def _variants():
    """(variant id, scheme, group, dtype, K, knobs, seed, {M: the plan's tile attributes}) of the variants checked
    alike: M 2048 channels, a bias in the weight."""
    n, out = 2048, []
    g3 = [("w4a8-fp8", 128), ("w4a8-int8", 128), ("w4a8-fp8", None)]
    for (name, group), dtype, ring in itertools.product(g3, (F16, BF16), (2, 4)):
        # the narrow form's weight ring; 37 stages: not a multiple of the ring (3 or 5); 200: a tile partly past M
        k = 128 * 37
        want = {"bm": 128, "prefetch": ring}
        out.append(("ring", name, group, dtype, k, {NARROW_PF_KNOB: ring},
                    n + k + ring + (group or 1) + len(name) + (dtype == BF16), {128: want, 200: want}))
    for (name, group), dtype, streamk, behind in itertools.product([("w4a8-fp8", 128), ("w4a8-fp8", None)],
                                                                   (F16, BF16), (0, 132), (1, 2, 3)):
        # warpgroup 1 of the wide form 1, 2 or 3 chains behind warpgroup 0, plain and as stream-K
        k = 4096
        want = {"bm": 256, "streamk": streamk, "stagger": behind}
        out.append((f"stagger{behind}", name, group, dtype, k,
                    {WIDE_FROM_KNOB: 256, STREAMK_KNOB: streamk, STAGGER_CHAINS_KNOB: behind},
                    n + k + streamk + (group or 1) + 7 * behind + (dtype == BF16), {512: want, 470: want}))
    for (name, group), dtype, streamk in itertools.product(g3, (F16, BF16), (0, 132)):
        # the wide form at a 128-token tile (M 128) and fitted to 192 (M 160), plain and as stream-K
        k = 4096
        out.append(("wide128", name, group, dtype, k, {WIDE_FROM_KNOB: 128, STREAMK_KNOB: streamk},
                    n + k + streamk + (group or 1) + len(name) + (dtype == BF16),
                    {128: {"bm": 128, "bulk": 2, "wide": 1, "streamk": streamk},
                     160: {"bm": 192, "bulk": 2, "wide": 0, "streamk": streamk}}))
    for (name, group), dtype, k, slots in itertools.product([("w4a8-fp8", 128), ("w4a8-fp8", None), ("w4a8-int8", 128)],
                                                            (F16, BF16), (4096, 384), (1, 2)):
        # converter warps widening into 1 or 2 slots; K 4096 (every slot and phase many times) and 384 (3 stages)
        want = {"bm": 256, "widened": slots}
        out.append((f"widened{slots}", name, group, dtype, k,
                    {WIDE_FROM_KNOB: 256, STREAMK_KNOB: 0, WIDENED_KNOB: slots},
                    n + k + (group or 1) + 7 * slots + (dtype == BF16) + len(name), {512: want, 470: want}))
    return out


VARIANTS = _variants()


@pytest.mark.parametrize("variant,name,group,dtype,k,knob_values,seed,expect", VARIANTS,
                         ids=[f"{v[0]}-{v[1].split('-')[1]}-{'g128' if v[2] else 'channel'}-"
                              f"{'bf16' if v[3] == BF16 else 'f16'}-k{v[4]}-"
                              f"{'-'.join(f'{x}' for x in v[5].values())}" for v in VARIANTS])
def test_variant_matches_reference(variant, name, group, dtype, k, knob_values, seed, expect, set_knobs):
    """The narrow form's weight rings (register_a8.narrow_prefetch 2 / 4; the default 6 runs above), the staggered
    start (register_a8.stagger_chains), the wide form at 128 tokens (register_a8.wide_from 128) and converter warps
    (register_a8.widened_slots): the plan each M runs, a fully written output and the reference."""
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    set_knobs(knob_values)
    qw = biased_weight(_scheme(name, group), 2048, k, dtype, seed)
    for m, want in expect.items():
        x, out = _gemm(qw, m, k, dtype)
        p = launch_spec(qw, dtype, m).plan
        assert p.path == PATH and {a: getattr(p.tiles, a) for a in want} == want, (variant, m, p.explain())
        assert not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
