"""ModelOpt (TensorRT Model Optimizer) checkpoints: NVFP4 and FP8.

NVFP4 (``quant_algo: NVFP4``):
    ``weight`` uint8 ``[N, K / 2]`` (two e2m1 codes per byte, low nibble = even k), ``weight_scale``
    float8_e4m3fn ``[N, K / 16]``, ``weight_scale_2`` float32 scalar (multiplier), ``input_scale`` float32
    scalar (the global activation scale, amax / (6 * 448)).
    ``W = e2m1(code) * weight_scale * weight_scale_2``. Imported as w4a4-nvfp4 when input_scale is present
    (``qw.input_scale``), else w4a16-nvfp4.
FP8 (``quant_algo: FP8``):
    ``weight`` float8_e4m3fn ``[N, K]``, ``weight_scale`` float32 scalar (or ``[N, 1]``), ``input_scale``
    float32 scalar. ``W = weight * weight_scale``; with input_scale the scheme has static per-tensor e4m3
    activations.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints._common import check_dtype, check_ndim, check_nvfp4_pair, lookup, make_scheme
from humming.core.quant.packing import unpack_bits
from humming.core.quant.quantize import QuantizedWeight
from humming.core.quant.schemes import get as get_scheme
from humming.errors import SchemeError, ShapeError

__all__ = ["from_nvfp4", "from_fp8", "load"]


def _scalar(t: torch.Tensor, what: str, layout: str) -> torch.Tensor:
    check_dtype(t, (torch.float32,), what, layout)
    if t.numel() != 1:
        raise ShapeError(f"{layout}: {what} must be one float32 value, got shape {list(t.shape)}")
    v = t.reshape(())
    if not float(v) > 0:
        raise ShapeError(f"{layout}: {what} must be positive, got {float(v)}")
    return v


def from_nvfp4(weight: torch.Tensor, weight_scale: torch.Tensor, weight_scale_2: torch.Tensor, *,
               input_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "ModelOpt NVFP4"
    n, k = check_nvfp4_pair(weight, weight_scale, "weight", "weight_scale", layout,
                            "[N, K / 2] (two e2m1 codes per byte)")
    gs = _scalar(weight_scale_2, "weight_scale_2", layout)
    scheme = make_scheme("e2m1", group=16, scale_fmt="ue4m3", global_scale=True)
    ins = None
    if input_scale is not None:
        ins = _scalar(input_scale, "input_scale", layout)
        p = get_scheme("w4a4-nvfp4")
        scheme = scheme.with_(act=p.act, act_scale=p.act_scale)
    codes = unpack_bits(weight, 4, k, dim=1, word_bits=8)
    return QuantizedWeight.from_codes(codes, scheme, weight_scale.contiguous(), global_scale=gs, bias=bias,
                                      input_scale=ins)


def from_fp8(weight: torch.Tensor, weight_scale: torch.Tensor, *, input_scale: torch.Tensor | None = None,
             bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "ModelOpt FP8"
    check_dtype(weight, (torch.float8_e4m3fn,), "weight", layout)
    check_ndim(weight, 2, "weight", layout, "[N, K]")
    n, k = weight.shape
    check_dtype(weight_scale, (torch.float32,), "weight_scale", layout)
    if weight_scale.numel() == 1:
        gran, ws = "tensor", weight_scale.reshape(1, 1)
    elif weight_scale.numel() == n:
        gran, ws = "channel", weight_scale.reshape(n, 1)
    else:
        raise ShapeError(f"{layout}: weight_scale must be one value or [{n}, 1], got {list(weight_scale.shape)}")
    scheme = make_scheme("e4m3", group=None, scale_fmt="f32", granularity=gran)
    ins = None
    if input_scale is not None:
        ins = _scalar(input_scale, "input_scale", layout)
        scheme = scheme.with_(act="e4m3", act_scale="static_tensor", act_scale_format="f32")
    return QuantizedWeight.from_codes(weight.view(torch.uint8), scheme, ws.contiguous(), bias=bias, input_scale=ins)


def load(tensors: Mapping[str, torch.Tensor], prefix: str = "", *, quant_algo: str | None = None) -> QuantizedWeight:
    """Import ``prefix.{weight,weight_scale[,weight_scale_2,input_scale,bias]}``; quant_algo "NVFP4" or "FP8"
    (detected from the tensors when None)."""
    def get(name: str, required: bool = True):
        return lookup(tensors, prefix, name, "ModelOpt", required=required)

    weight = get("weight")
    algo = (quant_algo or ("NVFP4" if weight.dtype == torch.uint8 else "FP8")).upper()
    if algo == "NVFP4":
        return from_nvfp4(weight, get("weight_scale"), get("weight_scale_2"), input_scale=get("input_scale", False),
                          bias=get("bias", False))
    if algo == "FP8":
        return from_fp8(weight, get("weight_scale"), input_scale=get("input_scale", False), bias=get("bias", False))
    raise SchemeError(f"ModelOpt quant_algo {quant_algo!r} is not supported; use 'NVFP4' or 'FP8'")
