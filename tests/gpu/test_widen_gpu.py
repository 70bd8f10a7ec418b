"""W8A8 / W4A8 with widened activations (humming.core.routes.widened_ranges): 8-bit codes widened exactly to f16/bf16,
the weight-only kernels (stream, tile, register-A small and prefill forms) with per-token scales in the epilogue,
against the reference (activation quantization included), with the output poisoned beforehand (conftest)."""
import pytest
import torch

import humming
from humming import api
from humming.core.registry import family_of
from humming.core.routes import widened_ranges as widen
from humming.devices.current import runs_here

from .conftest import graph_replay_error, launch_spec, rel_error

pytestmark = pytest.mark.gpu

SCHEMES = ["w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w4a8-int8", "w4a8-fp8", "w4a8-mxfp4",
           "w4a8-int8[act_order=true]", "w4a8-fp8[group_size=-1]"]
MS = (1, 7, 16, 33, 128, 1024)


def _widened_ran(qw, m: int, dtype=None) -> bool:
    """Whether M ran on ``qw`` through the widened route: its activations quantized and their codes widened to 16
    bits (the launch's input step "codes16"), on a weight-only kernel."""
    spec = launch_spec(qw, dtype, m)
    return spec.inputs == "codes16" and family_of(spec.plan).name in ("mma_wna16", "register_a")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("profile", [None, "nvidia-a100", "thead-zhenwu-810e"], ids=["here", "a100", "810e"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_widened(scheme, profile, dtype):
    every_m = humming.GemmOptions(act_widen=True)  # widened at every M
    n, k = 512, 2048
    torch.manual_seed(len(scheme) + (7 if profile else 0))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    sch = humming.schemes.get(scheme)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch, bias=bias)
    act = "bf16" if dtype == torch.bfloat16 else "f16"
    for m in MS:
        p = humming.plan(sch, m, n, k, profile=profile, act=act, options=every_m)
        assert p.reasons[0].startswith("widened") and p.row_scale == (sch.act_scale.mode == "dynamic_token"), p.explain()
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw, profile=profile, options=every_m)
        torch.cuda.synchronize()
        assert _widened_ran(qw, m, dtype), "the widened path did not run"
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        bound = 5e-3 if dtype == torch.bfloat16 else 1e-3
        assert err <= bound, f"{scheme} {profile} M={m}: relative error {err:.2e}\n{p.explain()}"


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w8a8-int8"])
def test_widened_graph_replay_and_3d(scheme):
    """CUDA-graph capture of quantize + widen + row-scaled kernel, replayed on fresh activations; [B, T, K] inputs.
    The default options (act_widen None, the measured M ranges): M=16 is widened everywhere."""
    n, k = 1024, 4096
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
    x = torch.randn(16, k, device="cuda", dtype=torch.float16)
    humming.gemm(x, qw)  # compile outside the capture
    err = graph_replay_error(lambda a: humming.gemm(a, qw), x,
                             lambda a: humming.reference_gemm(a, qw, out_dtype=torch.float32))
    assert err <= 1e-3, f"graph replay: {err:.2e}"
    x3 = torch.randn(2, 3, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x3, qw)
    ref = humming.reference_gemm(x3.reshape(-1, k), qw, out_dtype=torch.float32).reshape(2, 3, n)
    assert out.shape == (2, 3, n) and rel_error(out, ref) <= 1e-3


def test_default_rule_keeps_native_kernels_outside_the_ranges():
    """With the default options (act_widen None): W4A8 at M=1 widened; at an M outside DEFAULT_M_RANGES the native
    8-bit kernel runs."""
    caps = api.resolve_profile(None)
    n, k = 512, 2048
    ranges = widen.m_ranges(caps, humming.schemes.get("w4a8-fp8"), n, k)  # the ranges of this N (and K)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a8-fp8")
    humming.gemm(torch.randn(1, k, device="cuda", dtype=torch.float16), qw)
    assert _widened_ran(qw, 1)
    m = next(m for m in range(2, 8192) if not any(lo <= m <= hi for lo, hi in ranges))
    qw2 = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a8-fp8")
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw2)
    assert not _widened_ran(qw2, m), f"the native kernel should run at M={m}"
    assert rel_error(out, humming.reference_gemm(x, qw2, out_dtype=torch.float32)) <= 5e-3


@pytest.mark.parametrize("m,widened", [(150, True), (200, False), (300, False), (380, False)])
def test_padded_native_tiles_go_widened(m, widened):
    """With the default options (act_widen None), int4 W4A8 on an 8192-channel layer: the M whose native register-A token tiles would hold
    under 65% tokens (150: two 128-token tiles) run the widened path (fitted W4A16 tiles), the others the native
    kernel (300: two tiles of 192, fitted); both right against the reference."""
    caps = api.resolve_profile(None)
    if not runs_here(caps) or not caps.find_mma(family="wgmma", a_type="e4m3"):
        pytest.skip(f"{caps.name}: the register-A W4A8 kernel needs an sm_90a device")
    n, k = 8192, 1024
    assert widen.applies(caps, humming.schemes.get("w4a8-fp8"), m, n, k) == widened
    torch.manual_seed(m)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a8-fp8")
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    assert _widened_ran(qw, m) == widened
    assert not torch.isnan(out).any()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 5e-3


@pytest.mark.parametrize("k", [7, 2048, 28672])
@pytest.mark.parametrize("codes_as", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w8a8-fp8[weight=e5m2,act=e5m2]"])
def test_wide_codes_bit_exact(scheme, codes_as, k):
    """The quantization kernel writing 16-bit code values: bit for bit the reference's codes, widened by torch."""
    from humming.actquant import quantize_activation_cuda

    sch = humming.schemes.get(scheme)
    x = torch.randn(5, k, device="cuda", dtype=torch.float16) * 3
    x[:, 1::7] *= 1e-4  # tiny values: e4m3 / e5m2 subnormal codes
    qa = quantize_activation_cuda(x, sch, codes_as=codes_as)
    torch.cuda.synchronize()
    ref = humming.quantize_activation(x, sch)
    want = ref.codes.view(widen.CODE_DTYPES[ref.format]).to(codes_as)
    assert qa.codes.dtype == codes_as and torch.equal(qa.codes.view(torch.int16), want.view(torch.int16))
    assert torch.equal(qa.scales, ref.scales)
