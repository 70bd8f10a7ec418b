"""GPU: the MoE gated activation kernel (humming.core.moe.activation_kernel) equals the reference activation rounded
to h's dtype, for both activations, both gate/up layouts, f16 and bf16, on fresh random data into poisoned outputs;
it captures in a CUDA graph; shapes it does not take run the torch ops."""
from __future__ import annotations

import pytest
import torch

from humming.core.moe.activation_kernel import fits, gated_activation, gated_activation_cuda
from humming.core.moe.reference import reference_activation

pytestmark = pytest.mark.gpu

# one ulp of the output's format at 1 (the kernel and torch differ only in the last bit of expf / the division)
_ULP = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}


def _check(h, activation, interleaved):
    got = gated_activation_cuda(h, activation, interleaved=interleaved, alpha=1.702, limit=7.0)
    want = reference_activation(h, activation, interleaved=interleaved, alpha=1.702, limit=7.0)
    assert got.dtype == h.dtype and got.shape == (h.shape[0], h.shape[1] // 2)
    assert torch.isfinite(got).all()
    err = (got.float() - want).abs() / want.abs().clamp(min=1.0)
    assert err.max().item() <= 2 * _ULP[h.dtype], (activation, interleaved, h.dtype, list(h.shape))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("activation", ["silu", "swiglu_clamped"])
@pytest.mark.parametrize("rows,inter", [(1, 8), (37, 96), (4096, 768), (5, 1440), (2048, 2880)])
def test_activation_matches_the_reference(activation, interleaved, dtype, rows, inter):
    torch.manual_seed(rows * 7 + inter)
    h = torch.randn(rows, 2 * inter, device="cuda", dtype=dtype) * 4  # past the clamp limit (7) in places
    _check(h, activation, interleaved)


def test_zero_rows_and_graph_capture():
    assert gated_activation_cuda(torch.empty(0, 64, device="cuda", dtype=torch.float16)).shape == (0, 32)
    h = torch.randn(64, 1536, device="cuda", dtype=torch.bfloat16)
    gated_activation_cuda(h)  # loads the module outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = gated_activation_cuda(h)
    h.copy_(torch.randn_like(h))
    graph.replay()
    torch.cuda.synchronize()
    want = reference_activation(h, "silu").to(h.dtype)
    torch.testing.assert_close(out, want, rtol=2 * _ULP[h.dtype], atol=1e-3)


def test_shapes_the_kernel_does_not_take_run_the_torch_ops():
    h = torch.randn(9, 12, device="cuda", dtype=torch.float16)  # I = 6: not a multiple of 8
    assert not fits(h)
    torch.testing.assert_close(gated_activation(h), reference_activation(h).to(h.dtype))
    odd = torch.randn(4, 2 * 64 + 1, device="cuda", dtype=torch.float16)[:, 1:]  # not contiguous
    assert not fits(odd)
    torch.testing.assert_close(gated_activation(odd, interleaved=True),
                               reference_activation(odd, interleaved=True).to(odd.dtype))
    with pytest.raises(Exception, match="multiple of 8"):
        gated_activation_cuda(h)
