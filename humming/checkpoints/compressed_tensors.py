"""compressed-tensors checkpoints (llm-compressor): pack-quantized ints, nvfp4-pack-quantized,
float-quantized FP8 and int-quantized INT8.

pack-quantized (``format: pack-quantized``), b = num_bits:
    ``weight_packed`` int32 ``[N, ceil(K * b / 32)]``: each row an LSB-first bitstream of K codes along K, every
    code stored *unsigned with offset* ``2**(b-1)`` (stored = q + 2**(b-1), q the signed quantized value);
    ``weight_scale`` ``[N, K / group]`` (``[N, 1]`` per channel); ``weight_zero_point`` (asymmetric only) int32
    ``[ceil(N * b / 32), K / group]`` packed along N with the same offset (older exports: unpacked int
    ``[N, K / group]`` holding the signed zero); ``weight_g_idx`` int ``[K]`` (act-order "group");
    ``weight_shape`` int ``[2]`` = (N, K).
    Dequantization: ``W = (q - zp) * s`` = ``(stored_q - stored_zp) * s``. Symmetric weights become signed int
    codes, asymmetric ones uint codes with integer zeros ``stored_zp``.

nvfp4-pack-quantized:
    ``weight_packed`` uint8 ``[N, K / 2]`` (two e2m1 codes per byte, low nibble = even k), ``weight_scale``
    float8_e4m3fn ``[N, K / 16]``, ``weight_global_scale`` float32 ``[1]`` stored as a *divisor*,
    ``input_global_scale`` (activations, also a divisor). ``W = e2m1 * weight_scale / weight_global_scale``;
    the canonical global scale is the multiplier ``1 / weight_global_scale`` (one float32 rounding away from
    the division). With ``input_global_scale`` the scheme is w4a4-nvfp4 (``qw.input_scale`` = its
    reciprocal), else w4a16-nvfp4.

float-quantized: ``weight`` float8_e4m3fn ``[N, K]``, ``weight_scale`` per tensor (``[1]``/``[]``), per
channel ``[N, 1]`` or per block ``[ceil(N/bn), ceil(K/bk)]`` (pass ``block=``, default 128x128);
optional ``input_scale``. int-quantized: ``weight`` int8 ``[N, K]`` and ``weight_scale``. ``W = q * s``.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints._common import (
    check_dtype,
    check_ndim,
    check_nvfp4_pair,
    infer_group,
    lookup,
    make_scheme,
    nontrivial_g_idx,
    scale_format,
)
from humming.core.quant.packing import packed_length, unpack_bits
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

__all__ = ["from_pack_quantized", "from_nvfp4", "from_float_quantized", "from_int_quantized", "load"]


def _shape_from(weight_shape: torch.Tensor | None, layout: str) -> tuple[int, int] | None:
    if weight_shape is None:
        return None
    if weight_shape.numel() != 2 or weight_shape.is_floating_point():
        raise ShapeError(f"{layout}: weight_shape must hold the two integers (N, K), got {weight_shape!r}")
    n, k = (int(v) for v in weight_shape.reshape(-1).tolist())
    return n, k


def from_pack_quantized(weight_packed: torch.Tensor, weight_scale: torch.Tensor,
                        weight_zero_point: torch.Tensor | None = None, weight_g_idx: torch.Tensor | None = None,
                        weight_shape: torch.Tensor | tuple[int, int] | None = None, *, num_bits: int | None = None,
                        group_size: int | None = None, bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "compressed-tensors pack-quantized"
    check_dtype(weight_packed, (torch.int32,), "weight_packed", layout)
    check_ndim(weight_packed, 2, "weight_packed", layout, "[N, K * bits / 32]")
    n, words = weight_packed.shape
    shape = weight_shape if isinstance(weight_shape, tuple) else _shape_from(weight_shape, layout)
    if shape is not None and shape[0] != n:
        raise ShapeError(f"{layout}: weight_shape says N={shape[0]} but weight_packed has {n} rows")
    if num_bits is None:
        if shape is None:
            raise SchemeError(f"{layout}: pass num_bits= (from the quantization config) or provide weight_shape")
        fits = [b for b in (8, 4, 2, 3, 5, 6, 7, 1) if packed_length(shape[1], b) == words]
        if not fits:
            raise ShapeError(f"{layout}: {words} int32 words per row fit no bit width for K={shape[1]}")
        num_bits = fits[0]
    if not 1 <= num_bits <= 8:
        raise SchemeError(f"{layout}: num_bits must be 1..8, got {num_bits}")
    k = shape[1] if shape is not None else words * 32 // num_bits
    if packed_length(k, num_bits) != words:
        raise ShapeError(f"{layout}: weight_packed has {words} words per row, K={k} at {num_bits} bits needs "
                         f"{packed_length(k, num_bits)}")
    fmt = scale_format(weight_scale, "weight_scale", layout)
    if weight_scale.dim() == 1 and weight_scale.shape[0] == n:
        weight_scale = weight_scale.reshape(n, 1)
    check_ndim(weight_scale, 2, "weight_scale", layout, "[N, groups]")
    if weight_scale.shape[0] != n:
        raise ShapeError(f"{layout}: weight_scale must be [N={n}, groups], got {list(weight_scale.shape)}")
    n_groups = weight_scale.shape[1]
    group = infer_group(k, n_groups, group_size, layout)
    gi = nontrivial_g_idx(weight_g_idx, k, group, n_groups, layout)
    half = 1 << (num_bits - 1)
    stored = unpack_bits(weight_packed, num_bits, k, dim=1)  # [N, K], q + 2**(b-1)
    if weight_zero_point is None:
        scheme = make_scheme(f"int{num_bits}", group=group, scale_fmt=fmt, act_order=gi is not None)
        return QuantizedWeight.from_codes(stored ^ half, scheme, weight_scale.contiguous(), g_idx=gi, bias=bias)
    zp = weight_zero_point
    if zp.is_floating_point():
        raise ShapeError(f"{layout}: weight_zero_point must be an integer tensor, got {zp.dtype}")
    if zp.dim() == 1 and n_groups == 1 and zp.shape[0] == n:
        zp = zp.reshape(n, 1)
    if zp.dtype == torch.int32 and tuple(zp.shape) == (packed_length(n, num_bits), n_groups) and \
            packed_length(n, num_bits) != n:
        zs = unpack_bits(zp, num_bits, n, dim=0).to(torch.int32)  # stored with the offset
    elif tuple(zp.shape) == (n, n_groups):
        zs = zp.to(torch.int32) + half  # unpacked signed zero points
        if int(zs.min()) < 0 or int(zs.max()) >= 2 * half:
            raise ShapeError(f"{layout}: signed zero points must lie in [{-half}, {half - 1}]")
    else:
        raise ShapeError(f"{layout}: weight_zero_point must be int32 [{packed_length(n, num_bits)}, {n_groups}] "
                         f"(packed along N) or [{n}, {n_groups}], got {zp.dtype} {list(zp.shape)}")
    scheme = make_scheme(f"uint{num_bits}", group=group, scale_fmt=fmt, zero_point="int", act_order=gi is not None)
    return QuantizedWeight.from_codes(stored, scheme, weight_scale.contiguous(), zeros=zs.to(torch.uint8),
                                      g_idx=gi, bias=bias)


def _nibbles(packed: torch.Tensor, k: int) -> torch.Tensor:
    return unpack_bits(packed, 4, k, dim=-1, word_bits=8)


def from_nvfp4(weight_packed: torch.Tensor, weight_scale: torch.Tensor, weight_global_scale: torch.Tensor, *,
               input_global_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "compressed-tensors nvfp4"
    n, k = check_nvfp4_pair(weight_packed, weight_scale, "weight_packed", "weight_scale", layout, "[N, K / 2]")
    check_dtype(weight_global_scale, (torch.float32,), "weight_global_scale", layout)
    if weight_global_scale.numel() != 1:
        raise ShapeError(f"{layout}: weight_global_scale must hold one value, got {list(weight_global_scale.shape)}")
    gdiv = weight_global_scale.reshape(())
    if not float(gdiv) > 0:
        raise ShapeError(f"{layout}: weight_global_scale must be positive, got {float(gdiv)}")
    scheme = make_scheme("e2m1", group=16, scale_fmt="ue4m3", global_scale=True)
    input_scale = None
    if input_global_scale is not None:
        check_dtype(input_global_scale, (torch.float32,), "input_global_scale", layout)
        input_scale = 1.0 / input_global_scale.reshape(())
        from humming.core.quant.schemes import get

        scheme = scheme.with_(act=get("w4a4-nvfp4").act, act_scale=get("w4a4-nvfp4").act_scale)
    return QuantizedWeight.from_codes(_nibbles(weight_packed, k), scheme, weight_scale.contiguous(),
                                      global_scale=1.0 / gdiv, bias=bias, input_scale=input_scale)


def _fp8_scale_layout(weight_scale: torch.Tensor, n: int, k: int, block: tuple[int, int] | None, layout: str):
    if weight_scale.numel() == 1:
        return "tensor", None, weight_scale.reshape(1, 1)
    if weight_scale.dim() == 1 and weight_scale.shape[0] == n:
        weight_scale = weight_scale.reshape(n, 1)
    if tuple(weight_scale.shape) == (n, 1):
        return "channel", None, weight_scale
    bn, bk = block or (128, 128)
    if tuple(weight_scale.shape) == (-(-n // bn), -(-k // bk)):
        return "block", (bn, bk), weight_scale
    raise ShapeError(f"{layout}: weight_scale {list(weight_scale.shape)} is neither per tensor [1], per channel "
                     f"[{n}, 1] nor per {bn}x{bk} block [{-(-n // bn)}, {-(-k // bk)}] (pass block=)")


def from_float_quantized(weight: torch.Tensor, weight_scale: torch.Tensor, *, input_scale: torch.Tensor | None = None,
                         block: tuple[int, int] | None = None, bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "compressed-tensors float-quantized"
    check_dtype(weight, (torch.float8_e4m3fn,), "weight", layout)
    check_ndim(weight, 2, "weight", layout, "[N, K]")
    n, k = weight.shape
    fmt = scale_format(weight_scale, "weight_scale", layout)
    gran, blk, ws = _fp8_scale_layout(weight_scale, n, k, block, layout)
    scheme = make_scheme("e4m3", group=None, scale_fmt=fmt, block=blk, granularity=gran)
    if input_scale is not None:
        scheme = scheme.with_(act="e4m3", act_scale="static_tensor", act_scale_format="f32")
    return QuantizedWeight.from_codes(weight.view(torch.uint8), scheme, ws.contiguous(), bias=bias,
                                      input_scale=input_scale)


def from_int_quantized(weight: torch.Tensor, weight_scale: torch.Tensor, *, input_scale: torch.Tensor | None = None,
                       bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "compressed-tensors int-quantized"
    check_dtype(weight, (torch.int8,), "weight", layout)
    check_ndim(weight, 2, "weight", layout, "[N, K]")
    n, k = weight.shape
    fmt = scale_format(weight_scale, "weight_scale", layout)
    gran, _, ws = _fp8_scale_layout(weight_scale, n, k, None, layout)
    if gran == "block":
        raise ShapeError(f"{layout}: weight_scale must be per tensor or per channel [{n}, 1]")
    scheme = make_scheme("int8", group=None, scale_fmt=fmt, granularity=gran)
    if input_scale is not None:
        scheme = scheme.with_(act="int8", act_scale="static_tensor", act_scale_format="f32")
    return QuantizedWeight.from_codes(weight.view(torch.uint8), scheme, ws.contiguous(), bias=bias,
                                      input_scale=input_scale)


def load(tensors: Mapping[str, torch.Tensor], prefix: str = "", *, num_bits: int | None = None,
         group_size: int | None = None, block: tuple[int, int] | None = None) -> QuantizedWeight:
    """Detect the compressed-tensors format from the tensors present under ``prefix`` and import it."""
    def get(name: str, required: bool = True):
        return lookup(tensors, prefix, name, "compressed-tensors", required=required)

    bias = get("bias", False)
    packed = get("weight_packed", False)
    if packed is not None:
        if packed.dtype == torch.uint8:
            return from_nvfp4(packed, get("weight_scale"), get("weight_global_scale"),
                              input_global_scale=get("input_global_scale", False), bias=bias)
        return from_pack_quantized(packed, get("weight_scale"), get("weight_zero_point", False),
                                   get("weight_g_idx", False), get("weight_shape", False), num_bits=num_bits,
                                   group_size=group_size, bias=bias)
    weight = get("weight", False)
    if weight is None:
        get("weight_packed")  # raises: names what is missing
    if weight.dtype == torch.float8_e4m3fn:
        return from_float_quantized(weight, get("weight_scale"), input_scale=get("input_scale", False), block=block,
                                    bias=bias)
    if weight.dtype == torch.int8:
        return from_int_quantized(weight, get("weight_scale"), input_scale=get("input_scale", False), bias=bias)
    raise SchemeError(f"compressed-tensors: {prefix}.weight is {weight.dtype}, which is not quantized "
                      f"(expected weight_packed, or a float8_e4m3fn / int8 weight)")
