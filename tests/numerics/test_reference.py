"""reference_gemm: the oracle equals a float64 product of what the kernel sees, rounded to fp32."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.quant.reference import dequantize_activation
from humming.errors import ShapeError


def make(name, n=48, k=256, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    return humming.quantize(torch.randn(n, k, generator=g), name, **kw), torch.randn(3, 5, k, generator=g)


@pytest.mark.parametrize("name", ["w4a16", "w4a16-zp", "w3a16", "w8a16-fp8", "w4a16-nvfp4", "w8a8-int8", "w8a8-fp8",
                                  "w8a8-fp8-block", "w4a8-fp8", "w4a4-nvfp4", "w4a4-mxfp4", "mxfp6"])
@pytest.mark.parametrize("xdtype", [torch.float32, torch.bfloat16, torch.float16])
def test_reference_is_float64_product_rounded_to_fp32(name, xdtype):
    qw, x = make(name)
    x = x.to(xdtype)
    y = humming.reference_gemm(x, qw)
    assert y.shape == (3, 5, 48)
    assert y.dtype == (xdtype if xdtype != torch.float32 else torch.float32)
    if qw.scheme.act is None:
        xs = x.to(torch.float64)
    else:
        xs = humming.quantize_activation(x, qw.scheme).dequantize().to(torch.float64)
    want = (xs @ qw.dequantize().to(torch.float64).t()).to(torch.float32).to(y.dtype)
    assert torch.equal(y, want)
    # and close to an ordinary fp32 product
    y32 = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    plain = xs.float() @ qw.dequantize().t()
    assert torch.allclose(y32, plain, rtol=1e-5, atol=1e-5 * float(plain.abs().max()))


def test_bias_and_out_dtype():
    qw, x = make("w4a16", seed=1)
    b = torch.randn(48)
    base = humming.reference_gemm(x, qw, out_dtype=torch.float64)
    withb = humming.reference_gemm(x, qw, bias=b, out_dtype=torch.float64)
    assert torch.allclose(withb - base, b.double().expand_as(base), atol=1e-5)
    qb = humming.quantize(torch.randn(48, 256), "w4a16", bias=b)
    y1 = humming.reference_gemm(x, qb)
    y2 = humming.reference_gemm(x, humming.quantize(torch.randn(48, 256), "w4a16"), bias=b)
    assert y1.shape == y2.shape
    assert humming.reference_gemm(x, qw, out_dtype=torch.float16).dtype == torch.float16
    with pytest.raises(ShapeError, match="bias"):
        humming.reference_gemm(x, qw, bias=torch.randn(47))
    with pytest.raises(ShapeError, match="K=256"):
        humming.reference_gemm(torch.randn(2, 255), qw)
    with pytest.raises(ShapeError, match="float"):
        humming.reference_gemm(torch.ones(2, 256, dtype=torch.int32), qw)


def test_static_and_global_activation_scales_come_from_the_weight():
    qw, x = make("w8a8-fp8-tensor", seed=2)
    qw.input_scale = torch.tensor(0.02)
    xd = dequantize_activation(x, qw)
    assert torch.equal(xd, humming.quantize_activation(x, qw.scheme, scale=0.02).dequantize())
    y = humming.reference_gemm(x, qw)
    assert torch.equal(y, humming.reference_gemm(x, qw, input_scale=torch.tensor(0.02)))
    nv, x2 = make("w4a4-nvfp4", seed=3)
    nv.input_scale = torch.tensor(0.003)
    assert torch.equal(dequantize_activation(x2, nv),
                       humming.quantize_activation(x2, nv.scheme, global_scale=0.003).dequantize())


def test_wna16_uses_activations_exactly():
    qw, x = make("w4a16", seed=4)
    xb = x.to(torch.bfloat16)
    y = humming.reference_gemm(xb, qw, out_dtype=torch.float32)
    want = (xb.double() @ qw.dequantize().double().t()).float()
    assert torch.equal(y, want)


def test_done_when_example():
    w = torch.randn(256, 512)
    qw = humming.quantize(w, "w4a4-nvfp4")
    text = repr(qw)
    assert text.startswith("QuantizedWeight(w4a4-nvfp4, 256x512") and "global_scale" in text
