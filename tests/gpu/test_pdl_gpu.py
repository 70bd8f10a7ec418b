"""Programmatic dependent launch (griddepcontrol) of the stream kernel (M <= 8), the small register-A wgmma form
(M 16, 64), the two-warpgroup prefill form (M 1024: plain tiles in pairs; M 4096: stream-K in pairs), and the widened
W4A8 path (quantization kernel, then the GEMM): back-to-back GEMMs where each consumes the
previous one's output, eager and replayed from a CUDA graph, against the reference; the output poisoned (conftest)."""
import pytest
import torch

import humming
from humming import api
from humming.core.plan import PDL_KNOB
from humming.core.tuning import knobs

from .conftest import rel_error

pytestmark = pytest.mark.gpu


def _chain(n: int, k: int, dtype, seed: int):
    torch.manual_seed(seed)
    q1 = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    q2 = humming.quantize(torch.randn(k, n, device="cuda") * 0.05, "w4a16")
    return q1, q2


def _reference(x, q1, q2):
    y1 = humming.reference_gemm(x, q1, out_dtype=torch.float32).to(x.dtype)
    return humming.reference_gemm(y1, q2, out_dtype=torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("m", [1, 4, 8, 16, 64, 1024, 4096])
def test_pdl_chain(m, dtype):
    caps = api.resolve_profile(None)
    if not caps.memory.griddepcontrol:
        pytest.skip(f"{caps.name} declares no griddepcontrol")
    n, k = 4096, 2048
    q1, q2 = _chain(n, k, dtype, m)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    p = humming.plan("w4a16", m, n, k, act="bf16" if dtype == torch.bfloat16 else "f16")
    assert p.pdl and p.path in ("stream", "wgmma-rs"), p.explain()
    if m >= 1024:  # the prefill form: its producer warpgroup waits before the first activation copy
        assert p.tiles.bn == 128 and p.tiles.option("bulk") == 2 and bool(p.tiles.option("streamk")) == (m == 4096), p.explain()
    bound = 5e-3 if dtype == torch.bfloat16 else 2e-3  # two GEMMs, the intermediate rounded to 16 bits
    for _ in range(20):  # eager, back to back: the second kernel prefetches while the first finishes
        x.normal_()
        out = humming.gemm(humming.gemm(x, q1), q2)
    torch.cuda.synchronize()
    assert rel_error(out, _reference(x, q1, q2)) <= bound
    static = x.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = []
        y = static
        for _ in range(4):  # x -> q1 -> q2 -> q1 -> ... : every kernel reads its predecessor's output
            y = humming.gemm(humming.gemm(y, q1), q2)
            outs.append(y)
    for _ in range(3):
        static.normal_()
        graph.replay()
        torch.cuda.synchronize()
        ref = static
        for i in range(4):
            ref = _reference(ref, q1, q2)
            err = rel_error(outs[i], ref)
            assert err <= bound * (i + 1), f"link {i}: {err:.2e}"
            ref = outs[i]  # the next link from what the kernels produced (errors do not compound in the check)


def test_pdl_knob():
    with knobs.override({PDL_KNOB: False}):
        assert not humming.plan("w4a16", 1, 4096, 4096, profile="nvidia-h200").pdl
    with knobs.override({PDL_KNOB: True}):
        assert humming.plan("w4a16", 1, 4096, 4096, profile="nvidia-h200").pdl


def test_pdl_after_the_quantization_kernel():
    """W4A8 widened at M=1 (the default GemmOptions: act_widen None, the measured M ranges): the row-scaled stream
    kernel (PDL) waits for the quantization kernel (which triggers it early); chained through a second layer and
    replayed from a graph."""
    if not api.resolve_profile(None).memory.griddepcontrol:
        pytest.skip("no griddepcontrol")
    n, k = 4096, 2048
    q1 = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a8-fp8")
    q2 = humming.quantize(torch.randn(k, n, device="cuda") * 0.05, "w4a8-fp8")
    assert humming.plan("w4a8-fp8", 1, n, k).pdl
    static = torch.randn(1, k, device="cuda", dtype=torch.float16)
    humming.gemm(humming.gemm(static, q1), q2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y1 = humming.gemm(static, q1)
        y2 = humming.gemm(y1, q2)
    for _ in range(3):
        static.normal_()
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(y1, humming.reference_gemm(static, q1, out_dtype=torch.float32)) <= 2e-3
        assert rel_error(y2, humming.reference_gemm(y1, q2, out_dtype=torch.float32)) <= 2e-3
