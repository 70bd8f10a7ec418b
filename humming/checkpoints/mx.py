"""OCP Microscaling (MX v1.0) weights: MXFP4, MXFP6, MXFP8.

Blocks of 32 consecutive elements along K share one E8M0 scale ``2**(e - 127)`` (0xFF is NaN).
Tensors of a layer (the layout AMD Quark and vLLM use; the OCP spec does not fix a file layout):

``weight``        the element codes of W ``[N, K]``: for 8-bit elements float8_e4m3fn / float8_e5m2 or uint8
                  ``[N, K]``; for 4- and 6-bit elements uint8 ``[N, ceil(K * bits / 8)]``, each row an LSB-first
                  bitstream (MXFP4: two codes per byte, low nibble = even k; MXFP6: four codes per three bytes), or
                  for 6-bit elements uint8 ``[N, K]``, one code a byte (torchao keeps fp6 so)
``weight_scale``  uint8 (or float8_e8m0fnu) ``[N, K / 32]`` E8M0 exponents

``W = value(code) * 2**(scale - 127)``. ``element_format``: "e2m1" (mxfp4), "e2m3"/"e3m2" (mxfp6),
"e4m3"/"e5m2" (mxfp8). The imported scheme has 16-bit activations; choose MX activations with
``qw.with_activations("w4a4-mxfp4")`` (or ``activations=`` of ``load_safetensors``).
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints._common import check_dtype, check_ndim, check_shape, lookup, make_scheme
from humming.core.quant import formats
from humming.core.quant.packing import packed_length, unpack_bits
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

__all__ = ["from_mx", "load", "ELEMENT_FORMATS"]

ELEMENT_FORMATS = ("e2m1", "e2m3", "e3m2", "e4m3", "e5m2")
_ALIASES = {"mxfp4": "e2m1", "mxfp6": "e2m3", "mxfp6_e2m3": "e2m3", "mxfp6_e3m2": "e3m2", "mxfp8": "e4m3",
            "mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2"}
_TORCH = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def from_mx(weight: torch.Tensor, weight_scale: torch.Tensor, *, element_format: str = "e2m1",
            bias: torch.Tensor | None = None) -> QuantizedWeight:
    name = _ALIASES.get(element_format.lower().replace("-", "_"), None) or formats.get(element_format).name
    if name not in ELEMENT_FORMATS:
        raise SchemeError(f"MX element format {element_format!r} is not supported; use one of {ELEMENT_FORMATS}")
    layout = f"OCP MX ({name})"
    fmt = formats.get(name)
    check_ndim(weight, 2, "weight", layout, "[N, packed K]")
    if weight_scale.dtype == torch.float8_e8m0fnu:
        weight_scale = weight_scale.view(torch.uint8)
    check_dtype(weight_scale, (torch.uint8,), "weight_scale", layout)
    check_ndim(weight_scale, 2, "weight_scale", layout, "[N, K / 32]")
    n = weight.shape[0]
    if weight_scale.shape[0] != n:
        raise ShapeError(f"{layout}: weight_scale must be [N={n}, K / 32], got {list(weight_scale.shape)}")
    k = weight_scale.shape[1] * 32
    if weight.dtype in _TORCH:
        if _TORCH[weight.dtype] != name:
            raise ShapeError(f"{layout}: weight is {weight.dtype} but element_format is {name}")
        codes = weight.view(torch.uint8)
        check_shape(codes, (n, k), "weight", layout, "32 elements per scale")
    else:
        check_dtype(weight, (torch.uint8,), "weight", layout)
        if fmt.bits == 8:
            check_shape(weight, (n, k), "weight", layout, "one byte per element, 32 elements per scale")
            codes = weight
        elif fmt.bits == 6 and tuple(weight.shape) == (n, k):  # unpacked fp6, one code a byte (torchao's MXTensor)
            if weight.numel() and int(weight.max()) >= 64:
                raise ShapeError(f"{layout}: weight [N, K] of one byte per element holds codes up to "
                                 f"{int(weight.max())}; 6-bit codes are below 64 (or pack them four per three bytes)")
            codes = weight
        else:
            check_shape(weight, (n, packed_length(k, fmt.bits, 8)), "weight", layout,
                        f"{k} {fmt.bits}-bit elements per row packed into bytes"
                        + (", or [N, K] one code a byte" if fmt.bits == 6 else ""))
            codes = unpack_bits(weight, fmt.bits, k, dim=1, word_bits=8)
    scheme = make_scheme(name, group=32, scale_fmt="ue8m0")
    return QuantizedWeight.from_codes(codes, scheme, weight_scale.contiguous(), bias=bias)


def load(tensors: Mapping[str, torch.Tensor], prefix: str = "", *, element_format: str = "e2m1",
         weight_name: str = "weight", scale_name: str = "weight_scale") -> QuantizedWeight:
    layout = "OCP MX"
    return from_mx(lookup(tensors, prefix, weight_name, layout), lookup(tensors, prefix, scale_name, layout),
                   element_format=element_format, bias=lookup(tensors, prefix, "bias", layout, required=False))
