"""Activation-quantization kernels on a real GPU, bit for bit against the reference on the same device (fresh
random data with outliers, ties, zero rows, large and small magnitudes; outputs poisoned with two different
sentinels so that every byte must be written)."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.actquant import quantize_activation_cuda
from humming.core.quant import formats
from humming.core.quant.quantize import scale_storage_dtype

pytestmark = pytest.mark.gpu

MODES = [
    "w8a8-int8",                                   # dynamic per-token int8, f32 scales
    "w8a8-fp8",                                    # dynamic per-token e4m3
    "w8a8-int8[act_scale=static_tensor]",          # static per-tensor int8 (calibrated on x)
    "w8a8-fp8-tensor",                             # static per-tensor e4m3
    "w4a4-nvfp4",                                  # e2m1 per 16, ue4m3 + fp32 global
    "w4a4-mxfp4",                                  # e2m1 per 32, ue8m0
    "mxfp8",                                       # e4m3 per 32, ue8m0
    "w8a8-fp8-block",                              # e4m3 per 128, f32
    "mxfp6",                                       # e2m3 per 32, ue8m0
    "w4a8-int8[act_scale_format=f16]",             # per-token int8 with f16 scales (rounded up)
    "w8a8-fp8[act_scale_format=bf16]",             # per-token e4m3 with bf16 scales
]
MS = [1, 7, 128, 1000]
KS = [256, 4096]
DTYPES = [torch.float16, torch.bfloat16]
# None: the current device's profile (H200: hardware e4m3 cvt, software e2m1); nvidia-a100: every float format
# through the software encoder, compiled for the live GPU
PROFILES = [None, "nvidia-a100"]


def _ties(fmt, n: int, device) -> torch.Tensor:
    """A row whose amax is fmt.max (so a per-token or per-group f32/ue8m0 scale is exactly 1) and whose other
    values are exact midpoints between neighbouring codes (round-half-even decides every one)."""
    f = formats.get(fmt)
    if f.kind == "int":
        mids = torch.arange(f.min, f.max, dtype=torch.float32) + 0.5
    else:
        pos = torch.tensor(f._positive_table, dtype=torch.float32)
        mids = (pos[1:] + pos[:-1]) / 2
        mids = torch.cat([mids, -mids])
    row = mids[torch.arange(n) % mids.numel()].to(device)
    row[:: max(1, n // 16)] = float(f.max)  # every group of 16+ holds the maximum
    return row


def _fresh(m: int, k: int, dtype, scheme, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    big = 3e4 if dtype == torch.float16 else 1e30
    x = torch.randn(m, k, generator=g, device="cuda") * torch.exp(torch.randn(m, 1, generator=g, device="cuda") * 3)
    outliers = torch.rand(m, k, generator=g, device="cuda") < 0.002
    x = torch.where(outliers, x * 500.0, x)
    if m > 1:
        x[1] = 0.0                                              # a zero row (scale 1)
    if m > 2:
        x[2] = _ties(humming.schemes.get(scheme).act, k, "cuda")
    if m > 3:
        x[3] *= 1e-7                                            # f16 subnormals
    if m > 4:
        x[4] = torch.randn(k, generator=g, device="cuda") * big  # near the top of the range
    if m > 5:
        x[5, : k // 2] = 0.0                                     # zero groups inside a row
    return x.clamp(-6e4, 6e4).to(dtype) if dtype == torch.float16 else x.to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def _assert_equal(got, ref, what=""):
    assert got.format == ref.format and got.scale_format == ref.scale_format and got.mode == ref.mode
    assert got.group_size == ref.group_size and got.dtype == ref.dtype
    assert got.codes.shape == ref.codes.shape and got.codes.dtype == ref.codes.dtype
    bad = (got.codes != ref.codes).nonzero()
    assert bad.numel() == 0, f"{what}: {bad.shape[0]} codes differ, first at {bad[:4].tolist()}"
    assert got.scales.shape == ref.scales.shape and got.scales.dtype == ref.scales.dtype, what
    assert torch.equal(_bits(got.scales), _bits(ref.scales)), f"{what}: scales differ"
    if ref.global_scale is None:
        assert got.global_scale is None
    else:
        assert torch.equal(_bits(got.global_scale), _bits(ref.global_scale)), f"{what}: global scale differs"


def _outputs(x, scheme, sentinel: int):
    sch = humming.schemes.get(scheme)
    a = sch.act_scale
    k = x.shape[-1]
    lead = tuple(x.shape[:-1])
    shape = () if a.mode == "static_tensor" else lead + ((1,) if a.mode == "dynamic_token" else (k // a.group_size,))
    codes = torch.full(x.shape, sentinel, dtype=torch.uint8, device=x.device)
    scales = torch.empty(shape, dtype=scale_storage_dtype(a.format), device=x.device)
    _bits(scales).fill_(sentinel)
    gs = None
    if a.global_scale:
        gs = torch.empty((), dtype=torch.float32, device=x.device)
        _bits(gs).fill_(sentinel)
    return codes, scales, gs


def _run_poisoned(x, scheme, ref, what, profile=None, **kw):
    for sentinel in (0xA5, 0x5A):  # an unwritten byte keeps its sentinel in one of the two runs
        out = _outputs(x, scheme, sentinel)
        got = quantize_activation_cuda(x, scheme, profile=profile, out=out, **kw)
        torch.cuda.synchronize()
        assert got.codes.data_ptr() == out[0].data_ptr()
        _assert_equal(got, ref, f"{what} sentinel {sentinel:#x}")


@pytest.mark.parametrize("profile", PROFILES, ids=["device", "a100-software"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", MODES)
def test_bit_exact_against_reference(scheme, dtype, profile):
    seed = 0
    for k in KS:
        for m in MS:
            seed += 1
            x = _fresh(m, k, dtype, scheme, seed)
            ref = humming.quantize_activation(x, scheme)
            what = f"{scheme} {dtype} M={m} K={k} profile={profile}"
            got = quantize_activation_cuda(x, scheme, profile=profile)
            torch.cuda.synchronize()
            _assert_equal(got, ref, what)
            _run_poisoned(x, scheme, ref, what, profile=profile)


@pytest.mark.parametrize("scheme,kw", [
    ("w8a8-fp8-tensor", {"scale": 0.0371}),
    ("w8a8-int8[act_scale=static_tensor]", {"scale": 0.5}),
    ("w8a8-fp8-tensor", {"scale": "device"}),
    ("w4a4-nvfp4", {"global_scale": 0.00123}),
    ("w4a4-nvfp4", {"global_scale": "device"}),
    ("w4a4-nvfp4", {"global_scale": 0.0}),
])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f16", "bf16"])
def test_given_static_and_global_scales(scheme, kw, dtype):
    x = _fresh(64, 2048, dtype, scheme, 99)
    kw = {key: (torch.tensor(0.02, device="cuda") if v == "device" else v) for key, v in kw.items()}
    ref = humming.quantize_activation(x, scheme, **kw)
    got = quantize_activation_cuda(x, scheme, **kw)
    torch.cuda.synchronize()
    _assert_equal(got, ref, f"{scheme} {kw}")
    _run_poisoned(x, scheme, ref, f"{scheme} {kw}", **kw)


@pytest.mark.parametrize("scheme", ["w8a8-int8", "w8a8-fp8", "w4a4-nvfp4", "w8a8-fp8-tensor", "mxfp8"])
@pytest.mark.parametrize("shape,offset", [((3, 5, 4096), 0), ((33, 4100), 0), ((9, 4097), 0), ((16, 16384), 0),
                                          ((7, 4096), 1), ((5, 256), 4)])
def test_shapes_load_widths_and_alignment(scheme, shape, offset):
    k = shape[-1]
    sch = humming.schemes.get(scheme)
    if sch.act_scale.mode == "dynamic_group" and k % sch.act_scale.group_size:
        pytest.skip(f"K={k} is not a multiple of the group size (the reference refuses it too)")
    n = 1
    for d in shape:
        n *= d
    buf = _fresh(1, n + 8, torch.bfloat16, scheme, 7).reshape(-1)
    x = buf[offset:offset + n].view(shape)  # offset elements: 2-byte steps off 16-byte alignment
    ref = humming.quantize_activation(x, scheme)
    _run_poisoned(x, scheme, ref, f"{scheme} {shape} offset {offset}")


@pytest.mark.parametrize("scheme", ["w8a8-int8", "w8a8-fp8", "w4a4-nvfp4", "w4a4-mxfp4", "w8a8-fp8-tensor"])
def test_float32_inputs(scheme):
    x = _fresh(37, 1024, torch.float32, scheme, 11)
    ref = humming.quantize_activation(x, scheme)
    _run_poisoned(x, scheme, ref, f"{scheme} f32")


@pytest.mark.parametrize("scheme", ["w8a8-int8", "w8a8-fp8", "w4a4-nvfp4", "w4a4-mxfp4", "w8a8-fp8-tensor", "mxfp6"])
@pytest.mark.parametrize("profile", PROFILES, ids=["device", "a100-software"])
def test_nan_and_inf_inputs_follow_the_reference(scheme, profile):
    x = _fresh(16, 512, torch.bfloat16, scheme, 13)
    x[6, 17] = float("nan")
    x[7, 3] = float("inf")
    x[8, 100] = -float("inf")
    x[9, 40] = -float("nan")
    ref = humming.quantize_activation(x, scheme)
    got = quantize_activation_cuda(x, scheme, profile=profile)
    torch.cuda.synchronize()
    _assert_equal(got, ref, f"{scheme} NaN/inf")


@pytest.mark.parametrize("scheme", ["w4a4-nvfp4", "w8a8-fp8-tensor", "w8a8-int8"])
def test_capturable_in_a_cuda_graph(scheme):
    """No host synchronisation on the path: it must record into a CUDA graph (after a warm-up compile)."""
    x = _fresh(128, 4096, torch.float16, scheme, 21)
    quantize_activation_cuda(x, scheme)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = quantize_activation_cuda(x, scheme)
    x.copy_(_fresh(128, 4096, torch.float16, scheme, 22))
    graph.replay()
    torch.cuda.synchronize()
    _assert_equal(got, humming.quantize_activation(x, scheme), f"{scheme} graph replay")


def test_wna16_scheme_returns_x_and_cpu_falls_back():
    x = torch.randn(4, 256, device="cuda", dtype=torch.float16)
    assert quantize_activation_cuda(x, "w4a16") is x
    xc = x.cpu()
    _assert_equal(quantize_activation_cuda(xc, "w4a4-nvfp4"), humming.quantize_activation(xc, "w4a4-nvfp4"), "cpu")
