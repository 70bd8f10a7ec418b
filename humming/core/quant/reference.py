"""The oracle: ``reference_gemm(x, qw)`` is what every kernel is checked against.

    y = dequant(quantize_activation(x)) @ dequantize(qw)^T + bias

Activations are quantized and dequantized when the scheme quantizes them (with the calibrated
``qw.input_scale`` where the scheme has a static or global activation scale and none is passed), the weight
is dequantized in float32 (see :mod:`humming.core.quant.quantize`), and the product is accumulated in float64 and
rounded once to float32, so the oracle does not depend on TF32 settings or on summation order. The bias is
added before that rounding. The result is cast to ``out_dtype`` (default: x.dtype for float16/bfloat16
inputs, else float32).
"""
from __future__ import annotations

import torch

from humming.core.quant.experts import dense_only
from humming.core.quant.quantize import QuantizedWeight, quantize_activation
from humming.errors import ShapeError

__all__ = ["reference_gemm", "dequantize_activation"]


def dequantize_activation(x: torch.Tensor, qw: QuantizedWeight, *, input_scale=None) -> torch.Tensor:
    """x as the kernel sees it: quantized-then-dequantized (float32) when the scheme quantizes
    activations, else x itself."""
    sch = qw.scheme
    if sch.act is None:
        return x
    if input_scale is None:
        input_scale = qw.input_scale
    if sch.act_scale.mode == "static_tensor":
        xa = quantize_activation(x, sch, scale=input_scale)
    elif sch.act_scale.global_scale:
        xa = quantize_activation(x, sch, global_scale=input_scale)
    else:
        xa = quantize_activation(x, sch)
    return xa.dequantize(torch.float32)


def reference_gemm(x: torch.Tensor, qw: QuantizedWeight, bias: torch.Tensor | None = None,
                   out_dtype: torch.dtype | None = None, *, input_scale=None) -> torch.Tensor:
    """``x [..., K]`` times the quantized weight ``[N, K]`` transposed: ``[..., N]`` (see the module docstring).

    bias: ``[N]``; defaults to ``qw.bias``. input_scale: overrides ``qw.input_scale``. An expert-stacked ``qw`` is a
    ShapeError (expert GEMMs: humming.moe_gemm / grouped_gemm / masked_gemm).
    """
    dense_only(qw, "reference_gemm")
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ShapeError(f"x must be a float tensor [..., K], got {getattr(x, 'dtype', type(x))}")
    n, k = qw.shape
    if x.dim() < 1 or x.shape[-1] != k:
        raise ShapeError(f"x has {x.shape[-1] if x.dim() else 'no'} input features, the weight expects K={k} "
                         f"(x shape {tuple(x.shape)}, weight {n}x{k})")
    if out_dtype is None:
        out_dtype = x.dtype if x.dtype in (torch.float16, torch.bfloat16) else torch.float32
    if bias is None:
        bias = qw.bias
    if bias is not None and tuple(bias.shape) != (n,):
        raise ShapeError(f"bias must be [{n}], got {list(bias.shape)}")
    xd = dequantize_activation(x, qw, input_scale=input_scale)
    w = qw.dequantize(torch.float32).to(device=x.device, dtype=torch.float64)
    y = xd.to(torch.float64).reshape(-1, k) @ w.t()
    if bias is not None:
        y = y + bias.to(device=x.device, dtype=torch.float64)
    return y.to(torch.float32).reshape(*x.shape[:-1], n).to(out_dtype)
