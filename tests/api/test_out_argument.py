"""``humming.gemm(..., out=)`` on the CPU (the reference path): the result lands in the given tensor, which is
returned, and every malformed output is refused with a ShapeError naming the constraint (the same checks guard the
kernels on a GPU: tests/gpu/test_out_gpu.py)."""
import pytest
import torch

import humming
from humming.api import check_out
from humming.errors import ShapeError


@pytest.fixture(scope="module")
def qw():
    torch.manual_seed(0)
    return humming.quantize(torch.randn(96, 256) * 0.05, "w4a16", bias=torch.randn(96))


def test_out_receives_the_result_and_is_returned(qw):
    x = torch.randn(5, 256, dtype=torch.float16)
    out = torch.full((5, 96), float("nan"), dtype=torch.float16)
    y = humming.gemm(x, qw, out=out)
    assert y is out
    assert torch.equal(out, humming.gemm(x, qw))
    assert torch.equal(out, humming.reference_gemm(x, qw))


def test_out_with_leading_dimensions(qw):
    x = torch.randn(2, 3, 256, dtype=torch.bfloat16)
    out = torch.empty(2, 3, 96, dtype=torch.bfloat16)
    assert humming.gemm(x, qw, out=out) is out
    assert torch.equal(out, humming.reference_gemm(x, qw))


@pytest.mark.parametrize("make, words", [
    (lambda x: torch.empty(5, 95, dtype=x.dtype), "shape"),
    (lambda x: torch.empty(96, 5, dtype=x.dtype), "shape"),
    (lambda x: torch.empty(5, 96, dtype=torch.float32), "dtype"),
    (lambda x: torch.empty(96, 5, dtype=x.dtype).t(), "contiguous"),
    (lambda x: torch.empty(5 * 96 + 1, dtype=x.dtype)[1:].view(5, 96), "16-byte"),
    (lambda x: [[0.0] * 96] * 5, "torch.Tensor"),
], ids=["n", "transposed-shape", "dtype", "strided", "misaligned", "list"])
def test_malformed_out_is_refused(qw, make, words):
    x = torch.randn(5, 256, dtype=torch.float16)
    with pytest.raises(ShapeError, match=words):
        humming.gemm(x, qw, out=make(x))


def test_out_overlapping_x_is_refused():
    x = torch.randn(4, 128, dtype=torch.float16)
    with pytest.raises(ShapeError, match="shares memory"):
        check_out(x.view(-1)[:128].view(4, 32), x, 32)  # x's own first quarter
    with pytest.raises(ShapeError, match="shares memory"):
        humming.gemm(x, humming.quantize(torch.randn(32, 128) * 0.05, "w4a16"), out=x.view(-1)[:128].view(4, 32))
    x = torch.randn(4, 64, dtype=torch.float16)
    buf = torch.empty(4 * 64 + 4 * 32, dtype=torch.float16)
    xa, outa = buf[:4 * 64].view(4, 64), buf[4 * 64 - 8:4 * 64 - 8 + 4 * 32].view(4, 32)  # overlaps x's tail
    with pytest.raises(ShapeError, match="shares memory|16-byte"):
        check_out(outa, xa, 32)
    check_out(buf[4 * 64:].view(4, 32), xa, 32)  # right after x: fine
