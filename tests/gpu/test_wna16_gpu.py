"""WnA16 kernels on a real GPU against the reference (fresh random data, poisoned outputs)."""
import os

import pytest
import torch

import humming
from humming import api

from .conftest import rel_error, run_forced_plans

pytestmark = pytest.mark.gpu

SCHEMES = [
    "w4a16", "w4a16-zp", "w8a16", "w8a16-zp", "w3a16", "w2a16", "w2a16-zp", "w1a16", "w1a16-ternary",
    "w4a16-fp4", "w8a16-fp8", "w4a16-nvfp4", "w4a16-mxfp4", "mxint4",
]
GROUPS = [("w4a16", 32), ("w4a16", 64), ("w4a16", 256), ("w4a16-zp", 64), ("w8a16", 128), ("w4a16", None)]
# HUMMING_GPU_MS narrows the M sweep for a quick device run (e.g. 1,7,16 after a decode-kernel change)
MS = [int(v) for v in os.environ.get("HUMMING_GPU_MS", "1,7,16,33,128,1024").split(",")]
SHAPES = [(256, 1024), (4096, 2048)]
TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}


def _weight(scheme, n, k, dtype, group=None, act_order=False, bias=False):
    w = torch.randn(n, k, device="cuda") * 0.05
    sch = humming.schemes.get(scheme) if isinstance(scheme, str) else scheme
    if group is not None:
        sch = sch.with_(group_size=group)
    b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
    return humming.quantize(w, sch, act_order=act_order or None, bias=b)


def _check(qw, m, dtype, profile=None):
    n, k = qw.shape
    api.warmup(qw, dtype, MS, profile=profile)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    out = humming.gemm(x, qw, profile=profile)
    torch.cuda.synchronize()
    assert out.shape == (m, n) and out.dtype == dtype
    assert not torch.isnan(out).any(), "output not fully written (NaN poison left)"
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    err = rel_error(out, ref)
    assert err <= TOL[dtype], f"relative error {err:.2e} > {TOL[dtype]:.0e}"
    return err


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_schemes(scheme, dtype):
    for n, k in SHAPES:
        qw = _weight(scheme, n, k, dtype)
        for m in MS:
            _check(qw, m, dtype)


@pytest.mark.parametrize("scheme,group", GROUPS)
def test_group_sizes(scheme, group):
    sch = humming.schemes.get(scheme)
    if group is None:
        sch = sch.with_(granularity="channel", group_size=None)
    qw = _weight(sch, 512, 2048, torch.float16, group=group if group else None)
    for m in (1, 33, 128):
        _check(qw, m, torch.float16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_block_weight_scales(dtype):
    """DeepSeek-V3's 128x128-block FP8 weights with 16-bit activations: the block scales become every channel's
    group scales when prepared (N 320: a partial last block)."""
    qw = _weight(humming.schemes.get("w8a8-fp8-block", act=None), 320, 1024, dtype)
    for m in (1, 33, 128):
        _check(qw, m, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("weight", ["uint1", "uint3", "int5", "int6", "int7"])
def test_other_integer_widths(weight, dtype):
    """int1..int8 (containers of 1, 2, 4 and 8 bits) with and without zero points."""
    base = "w2a16-zp" if weight.startswith("u") else "w4a16"
    qw = _weight(humming.schemes.get(base).with_(weight=weight), 512, 2048, dtype)
    for m in (1, 16, 128):
        _check(qw, m, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_bias_and_act_order(dtype):
    qw = _weight("w4a16", 512, 2048, dtype, act_order=True, bias=True)
    assert qw.g_idx is not None
    for m in (1, 16, 200):
        _check(qw, m, dtype)


def test_leading_dims_and_noncontiguous():
    qw = _weight("w4a16", 256, 1024, torch.float16)
    x = torch.randn(3, 5, 2048, device="cuda", dtype=torch.float16)[..., ::2]
    out = humming.gemm(x, qw)
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    assert out.shape == (3, 5, 256)
    assert rel_error(out, ref) <= 1e-3


@pytest.mark.parametrize("profile", ["nvidia-t4", "nvidia-a100", "nvidia-l40s", "nvidia-a10"])
def test_other_profiles_run_here(profile):
    """Kernels planned for older profiles (their instruction spellings, tiles and copy paths) run on this GPU."""
    dtype = torch.float16
    qw = _weight("w4a16", 512, 2048, dtype)
    for m in (1, 33, 128):
        _check(qw, m, dtype, profile=profile)
    p = api.plan("w4a16", 16, 512, 2048, profile=profile)
    src = api.source(p)
    if profile == "nvidia-t4":
        assert "m16n8k8" in src and "cp.async.cg" not in src
    else:
        assert "m16n8k16" in src and "cp.async.cg" in src


def test_cuda_graph_replay_matches_eager():
    qw = _weight("w4a16", 1024, 4096, torch.float16)
    x = torch.randn(16, 4096, device="cuda", dtype=torch.float16)
    eager = humming.gemm(x, qw)  # warms up: compile, workspace
    static_x = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = humming.gemm(static_x, qw)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, eager)
    static_x.copy_(torch.randn_like(x))
    graph.replay()
    ref = humming.reference_gemm(static_x, qw, out_dtype=torch.float32)
    assert rel_error(static_out, ref) <= 1e-3


def test_torch_compile_fullgraph():
    lin = torch.nn.Linear(2048, 512, bias=True).cuda().half()
    qlin = humming.nn.QuantLinear.from_linear(lin, "w4a16")
    model = torch.nn.Sequential(qlin, torch.nn.ReLU())
    x = torch.randn(8, 2048, device="cuda", dtype=torch.float16)
    eager = model(x)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@pytest.mark.parametrize("scheme,dtype", [("w4a4-nvfp4", torch.bfloat16), ("w4a4-nvfp4", torch.float16),
                                          ("w4a4-mxfp4", torch.bfloat16), ("mxfp8", torch.bfloat16),
                                          ("mxfp6", torch.bfloat16)])
def test_upconvert_paths(scheme, dtype):
    """NVFP4/MX activations where no block-scaled MMA is declared (Hopper): quantized as the reference does,
    widened exactly to bf16, multiplied by the WnA16 kernel, global scale in the epilogue."""
    from humming.core.common.paths import choose_path

    assert choose_path(humming.device.current_profile(), humming.schemes.get(scheme)).path == "upconvert"
    qw = _weight(scheme, 512, 2048, dtype)
    for m in (1, 16, 128):
        x = torch.randn(m, 2048, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= 5e-3, f"{scheme} M={m}: relative error {err:.2e}"


def test_empty_batch():
    qw = _weight("w4a16", 256, 1024, torch.float16)
    assert humming.gemm(torch.empty(0, 1024, device="cuda", dtype=torch.float16), qw).shape == (0, 256)
    qw8 = humming.quantize(torch.randn(256, 1024, device="cuda"), "w8a8-int8")
    assert humming.gemm(torch.empty(3, 0, 1024, device="cuda", dtype=torch.float16), qw8).shape == (3, 0, 256)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w8a16", "w4a16[group_size=-1]", "w4a16[group_size=32]"])
def test_stream_variants(scheme, dtype):
    """The stream path's tuner options (x_ring: activations in the register ring; fold: raw codes into the MMA,
    zero point and scale per atom in fp32), forced one by one, against the reference."""
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.errors import ShapeError

    qw = _weight(humming.schemes.get(scheme), 512, 4096, dtype)

    def plans(prep, base, m):
        # the stream kernel's own plan for M (the layer may run M=16 on the register-A small form: other tiles)
        t = plan_wna16(prep.caps, base.layout, m, base.act, scheme=base.scheme, path="stream").tiles
        for x_ring, fold, splits in ((1, 0, 1), (0, 1, 1), (1, 1, 2), (0, 1, 4), (1, 2, 1), (1, 2, 2)):
            try:
                yield plan_wna16(prep.caps, base.layout, m, base.act, scheme=base.scheme, path="stream",
                                 splits=splits, tiles=MmaWnA16Tiles(t.bm, 64, t.bk, 2, 1, 1, t.warps_k, x_ring, fold))
            except ShapeError:  # e.g. fold with groups of 32, or a split that does not divide the atoms
                continue
    assert run_forced_plans(qw, dtype, (1, 7, 16), plans, TOL[dtype])
