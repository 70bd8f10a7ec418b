"""torchao's quantized weight tensors (``torchao.prototype.mx_formats``): MXTensor (MXFP4 / MXFP6 / MXFP8, E8M0 scales
per 32 elements) and NVFP4Tensor (e2m1 codes, e4m3 scales per 16, an optional fp32 per-tensor scale), as a model
quantized with torchao holds them. Read through their public fields, without importing torchao:

``qdata``             MXFP4 / NVFP4: uint8 [N, K / 2], two e2m1 codes a byte (low nibble = even k); MXFP6: uint8
                      [N, K], one code a byte (torchao keeps fp6 unpacked); MXFP8: float8_e4m3fn / float8_e5m2 [N, K]
``scale``             float8_e8m0fnu [N, K / 32] (MX) or float8_e4m3fn [N, K / 16] (NVFP4), row-major (scales swizzled
                      for cuBLAS's block-scaled GEMM, ``is_swizzled_scales``, are refused: dequantize and requantize,
                      or quantize with is_swizzled_scales=False)
``elem_dtype``        MX element type; ``block_size`` 32 (MX) or 16 (NVFP4); ``per_tensor_scale`` (NVFP4) or None
"""
from __future__ import annotations

import torch

from humming.checkpoints import modelopt, mx
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

_MX_ELEMENTS = {"float4_e2m1fn_x2": "e2m1", "fp6_e2m3": "e2m3", "fp6_e3m2": "e3m2", "float8_e4m3fn": "e4m3",
                "float8_e5m2": "e5m2"}


def _element_name(elem_dtype) -> str:
    name = str(elem_dtype).replace("torch.", "")
    if name not in _MX_ELEMENTS:
        raise SchemeError(f"torchao MXTensor: element type {name} is not one of {sorted(_MX_ELEMENTS)}")
    return _MX_ELEMENTS[name]


def from_torchao(t: torch.Tensor, bias: torch.Tensor | None = None) -> QuantizedWeight:
    """A torchao MXTensor or NVFP4Tensor weight [N, K] as a QuantizedWeight (16-bit activations; choose quantized
    ones with ``qw.with_activations``). SchemeError for another tensor type, ShapeError for swizzled scales or a
    block size the format does not have."""
    kind = type(t).__name__
    if kind not in ("MXTensor", "NVFP4Tensor"):
        raise SchemeError(f"from_torchao takes torchao's MXTensor or NVFP4Tensor, got {kind}")
    if getattr(t, "is_swizzled_scales", False):
        raise ShapeError(f"torchao {kind}: its scales are swizzled for cuBLAS (is_swizzled_scales=True); quantize with "
                         f"is_swizzled_scales=False, or dequantize and humming.quantize")
    layout = f"torchao {kind}"
    if t.qdata.dim() != 2:
        raise ShapeError(f"{layout}: a weight is 2-D [N, K], got qdata of shape {list(t.qdata.shape)}")
    if kind == "NVFP4Tensor":
        if t.block_size != 16:
            raise ShapeError(f"{layout}: NVFP4 has 16 elements per scale, got block_size {t.block_size}")
        gs = t.per_tensor_scale
        gs = torch.ones((), dtype=torch.float32) if gs is None else gs.to(torch.float32).reshape(())
        return modelopt.from_nvfp4(t.qdata, t.scale, gs.cpu() if gs.device != t.qdata.device else gs, bias=bias)
    if t.block_size != 32:
        raise ShapeError(f"{layout}: OCP MX has 32 elements per scale, got block_size {t.block_size}")
    return mx.from_mx(t.qdata, t.scale, element_format=_element_name(t.elem_dtype), bias=bias)
