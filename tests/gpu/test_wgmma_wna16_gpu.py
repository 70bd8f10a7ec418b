"""W4A16 on the wgmma kernel (sm_90a, int4 dequantized into shared memory; the default on sm_90a; the tuning knob
wgmma_wna16.enabled false turns it off) against the reference, on a GPU whose profile declares wgmma f16/bf16
(H100/H200/H20). Outputs are NaN-poisoned before each launch (conftest), and every case checks that the wgmma kernel
really ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.registry import family_of
from humming.core.tuning import knobs
from humming.devices.current import runs_here

from .conftest import layers_of, ran_plan, rel_error

WNA16_KNOB = "wgmma_wna16.enabled"  # WnA16 from M 128 on the wgmma kernels (false: the mma.sync kernels)


@pytest.fixture(autouse=True)
def _dequant_smem_kernel(set_knobs):
    """These tests are about the dequant-smem wgmma kernel; from M = 513 the register-A kernel is the default
    (tests/gpu/test_register_a_gpu.py and the register-A compile tests), so it is switched off here (the knob
    register_a.min_m null)."""
    set_knobs({"register_a.min_m": None})


pytestmark = pytest.mark.gpu

SHAPES = [(512, 2048), (1024, 4096)]
MS = (128, 200, 1024)
GROUPS = [128, 32, None]  # None: per-channel scales (fp32, in the epilogue)
TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}


def _require_wgmma(dtype=torch.float16):
    caps = api.resolve_profile(None)
    act = "f16" if dtype == torch.float16 else "bf16"
    if not caps.find_mma(family="wgmma", a_type=act):
        pytest.skip(f"{caps.name} declares no wgmma {act} (the wgmma WnA16 kernel needs an sm_90a device)")
    if not runs_here(caps):
        pytest.skip(f"the live GPU is not {caps.name}'s own target")
    return caps


def _scheme(group):
    sch = humming.schemes.get("w4a16")
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _wgmma_plan(qw, dtype, m):
    """The plan that ran M on ``qw`` (``dtype`` activations), checked to be the wgmma WnA16 family's."""
    p = ran_plan(qw, m, dtype)
    assert family_of(p).name == "wgmma_dequant", f"not the wgmma WnA16 kernel: {p.explain()}"
    return p


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("group", GROUPS, ids=["g128", "g32", "channel"])
def test_wgmma_w4a16(group, dtype, n, k, set_knobs):
    _require_wgmma(dtype)
    set_knobs({WNA16_KNOB: True})
    torch.manual_seed(n + k + (group or 1))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(group), bias=bias)
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        p = _wgmma_plan(qw, dtype, m)
        assert p.family == "wgmma" and p.kernel_name.startswith("hm_wna16_wgmma_"), p.explain()
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= TOL[dtype], f"group {group} {dtype} M={m} N={n} K={k} BN={p.tiles.bn}: relative error {err:.2e}"


@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_both_tile_widths(bn, dtype, set_knobs):
    """BN=128 and BN=256 forced through the launcher (the planner picks one per shape)."""
    caps = _require_wgmma(dtype)
    from humming.core.families.wgmma_dequant.planner import plan_wna16_wgmma

    set_knobs({WNA16_KNOB: True})
    n, k, m = 1024, 2048, 300
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    humming.gemm(x, qw)
    prep = layers_of(qw, dtype)[0]  # the one layer of these weights for dtype
    act = "f16" if dtype == torch.float16 else "bf16"
    forced = plan_wna16_wgmma(caps, _wgmma_plan(qw, dtype, m).layout, m, act, scheme="w4a16", bn=bn)
    prep.plans[m], _ = forced, prep.launches.pop(m, None)  # forced for M; the layer plans it again
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert prep.launches[m].plan is forced and _wgmma_plan(qw, dtype, m).tiles.bn == bn
    assert not torch.isnan(out).any()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_wgmma_matches_mma_sync_tile_kernel(dtype, set_knobs):
    """Same weights and activations through both WnA16 kernels: the same dequantized values and fp32 sums, so
    the results agree closely (summation order differs)."""
    _require_wgmma(dtype)
    n, k, m = 1024, 4096, 512
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    # the same weights as a second object (same tensors, prepared apart): a prepared layer keeps the kernel it
    # chose for each M on its first call
    qw_legacy = qw.with_scheme(qw.scheme)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    with knobs.override({WNA16_KNOB: False}):
        legacy = humming.gemm(x, qw_legacy)
    p = ran_plan(qw_legacy, m, dtype)
    assert family_of(p).name == "mma_wna16" and p.family == "mma_sync", p.explain()  # the mma.sync tile kernel ran
    set_knobs({WNA16_KNOB: True})
    new = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert _wgmma_plan(qw, dtype, m).family == "wgmma"
    assert not torch.isnan(new).any() and not torch.isnan(legacy).any()
    assert rel_error(new, legacy) <= (1e-3 if dtype == torch.float16 else 4e-3)


def test_act_order_and_leading_dims(set_knobs):
    _require_wgmma()
    set_knobs({WNA16_KNOB: True})
    n, k = 512, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16", act_order=True)
    assert qw.g_idx is not None
    x = torch.randn(2, 100, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert out.shape == (2, 100, n) and not torch.isnan(out).any()
    assert _wgmma_plan(qw, torch.float16, 200).family == "wgmma"
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 1e-3


def test_small_m_and_other_schemes_stay_on_mma_sync(set_knobs):
    _require_wgmma()
    set_knobs({WNA16_KNOB: True})
    n, k = 512, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    out = humming.gemm(torch.randn(64, k, device="cuda", dtype=torch.float16), qw)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    assert family_of(ran_plan(qw, 64)).name == "mma_wna16"
    zp = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16-zp")
    x = torch.randn(256, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, zp)
    torch.cuda.synchronize()
    assert family_of(ran_plan(zp, 256)).name == "mma_wna16"  # zero points: not the wgmma WnA16 kernel
    assert rel_error(out, humming.reference_gemm(x, zp, out_dtype=torch.float32)) <= 1e-3


def test_cuda_graph_replay(set_knobs):
    _require_wgmma()
    set_knobs({WNA16_KNOB: True})
    qw = humming.quantize(torch.randn(1024, 4096, device="cuda") * 0.05, "w4a16")
    x = torch.randn(256, 4096, device="cuda", dtype=torch.float16)
    eager = humming.gemm(x, qw)
    _wgmma_plan(qw, torch.float16, 256)
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = humming.gemm(static_x, qw)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, eager)
