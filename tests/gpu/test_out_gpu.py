"""``humming.gemm(..., out=)`` on the GPU: the kernels write into the caller's NaN-filled tensor (no allocation), which
is returned, matches the call without ``out`` bit for bit and the reference within the usual bounds; under CUDA-graph
capture and replay; with leading dimensions; on the widened W4A8 path (written directly) and the native W8A8 path
(copied)."""
import pytest
import torch

import humming

from .conftest import rel_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("m", [1, 16, 300, 1024])
def test_out_wna16(m, dtype):
    n, k = 1024, 2048
    torch.manual_seed(m)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16", bias=torch.randn(n, device="cuda"))
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    y = humming.gemm(x, qw, out=out)
    torch.cuda.synchronize()
    assert y is out and not torch.isnan(out).any()
    assert torch.equal(out, humming.gemm(x, qw)), "out= changed the result"
    err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
    assert err <= (5e-3 if dtype == torch.bfloat16 else 1e-3), f"M={m}: relative error {err:.2e}"


def test_out_3d_and_graph_replay():
    n, k = 2048, 1024
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    x = torch.randn(2, 8, k, device="cuda", dtype=torch.float16)
    out = torch.full((2, 8, n), float("nan"), device="cuda", dtype=torch.float16)
    humming.gemm(x, qw, out=out)  # plans and compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        humming.gemm(x, qw, out=out)
    for seed in (4, 5):
        torch.manual_seed(seed)
        x.copy_(torch.randn_like(x))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 1e-3


@pytest.mark.parametrize("scheme, m", [("w4a8-fp8", 16), ("w8a8-fp8", 256)], ids=["widened", "native"])
def test_out_quantized_activations(scheme, m):
    n, k = 1024, 2048
    torch.manual_seed(m)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    y = humming.gemm(x, qw, out=out)
    torch.cuda.synchronize()
    assert y is out and not torch.isnan(out).any()
    assert torch.equal(out, humming.gemm(x, qw))
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 1e-3


def test_out_under_torch_compile():
    """torch.compile(fullgraph=True) of a function writing a prepared layer's result into its argument."""
    from humming import api

    n, k = 512, 2048
    torch.manual_seed(6)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    x = torch.randn(8, k, device="cuda", dtype=torch.float16)
    handle = api.prepared(qw, x.dtype, x.device)

    def f(x, out):
        api.gemm_prepared(x, handle, out=out)
        return torch.relu(out)

    out = torch.full((8, n), float("nan"), device="cuda", dtype=torch.float16)
    y = torch.compile(f, fullgraph=True)(x, out)
    torch.cuda.synchronize()
    eager = humming.gemm(x, qw)
    assert torch.equal(out, eager) and torch.equal(y, torch.relu(eager))
