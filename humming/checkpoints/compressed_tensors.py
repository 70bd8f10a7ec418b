"""compressed-tensors checkpoints (llm-compressor): pack-quantized ints, nvfp4-pack-quantized, the OCP MX formats
(mxfp4-pack-quantized, mxfp6-pack-quantized, mxfp8-quantized), float-quantized FP8 and int-/naive-quantized ints.

:func:`load` detects the format from the tensors (dtypes and shapes); ``format=`` (the ``format`` of the layer's
quantization config, e.g. ``"mxfp4-pack-quantized"``) imports through that format's function instead, so tensors that
do not fit it raise an error naming the tensor.

pack-quantized (``format: pack-quantized``), b = num_bits:
    ``weight_packed`` int32 ``[N, ceil(K * b / 32)]``: each row an LSB-first bitstream of K codes along K, every
    code stored *unsigned with offset* ``2**(b-1)`` (stored = q + 2**(b-1), q the signed quantized value);
    ``weight_scale`` ``[N, K / group]`` (``[N, 1]`` per channel, ``[1]`` per tensor); ``weight_zero_point``
    (asymmetric only) int32 ``[ceil(N * b / 32), K / group]`` packed along N with the same offset (per tensor, and
    older exports: unpacked int ``[1]`` / ``[N, K / group]`` holding the signed zero); ``weight_g_idx`` int ``[K]``
    (act-order "group": older releases; 0.20.1 refuses actorder="group"); ``weight_shape`` int ``[2]`` = (N, K).
    Dequantization: ``W = (q - zp) * s`` = ``(stored_q - stored_zp) * s``. Symmetric weights become signed int
    codes, asymmetric ones uint codes with integer zeros ``stored_zp`` (a per-tensor scale and zero point are
    repeated per channel: humming's zero points are per group or channel).

nvfp4-pack-quantized:
    ``weight_packed`` uint8 ``[N, K / 2]`` (two e2m1 codes per byte, low nibble = even k), ``weight_scale``
    float8_e4m3fn ``[N, K / 16]``, ``weight_global_scale`` float32 ``[1]`` stored as a *divisor*,
    ``input_global_scale`` (activations, also a divisor). ``W = e2m1 * weight_scale / weight_global_scale``;
    the canonical global scale is the multiplier ``1 / weight_global_scale`` (one float32 rounding away from
    the division). With ``input_global_scale`` the scheme is w4a4-nvfp4 (``qw.input_scale`` = its
    reciprocal), else w4a16-nvfp4.

mxfp4-pack-quantized / mxfp6-pack-quantized (OCP MX, :mod:`humming.checkpoints.mx`):
    ``weight_packed`` uint8, each row an LSB-first bitstream: ``[N, K / 2]`` two e2m1 codes per byte (mxfp4) or
    ``[N, 3 K / 4]`` four e2m3 codes per three bytes (mxfp6); ``weight_scale`` uint8 ``[N, K / 32]`` E8M0
    exponents (no global scale). ``W = value(code) * 2**(weight_scale - 127)``. Told apart from nvfp4 by the
    uint8 (not float8_e4m3fn) scales, and from each other by the packed width. Schemes w4a16-mxfp4 / mxfp6 with
    16-bit activations (MX activations: ``qw.with_activations("w4a4-mxfp4")``).
mxfp8-quantized: ``weight`` float8_e4m3fn ``[N, K]`` and uint8 E8M0 ``weight_scale`` ``[N, K / 32]``; scheme mxfp8
    (weights only).

float-quantized: ``weight`` float8_e4m3fn ``[N, K]``, ``weight_scale`` per tensor (``[1]``/``[]``), per
channel ``[N, 1]``, per group ``[N, K / group]`` or per block ``[ceil(N/bn), ceil(K/bk)]`` (pass ``block=``,
default 128x128); optional ``input_scale``. ``W = q * s``; asymmetric FP8 (a ``weight_zero_point``) is refused.
int-quantized / naive-quantized: ``weight`` int8 ``[N, K]`` (any num_bits <= 8 in an int8), ``weight_scale``
per tensor, channel or group, optional int8 ``weight_zero_point`` of the scale's shape (asymmetric):
``W = (q - zp) * s``.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints import mx
from humming.checkpoints._common import (
    check_dtype,
    check_ndim,
    check_nvfp4_pair,
    check_shape,
    infer_group,
    key,
    lookup,
    make_scheme,
    nontrivial_g_idx,
    scale_format,
)
from humming.core.quant.packing import packed_length, unpack_bits
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

__all__ = ["FORMATS", "from_pack_quantized", "from_nvfp4", "from_mxfp", "from_float_quantized", "from_int_quantized",
           "load"]

#: the per-layer ``format`` values of a compressed-tensors quantization config that :func:`load` imports
FORMATS = ("pack-quantized", "nvfp4-pack-quantized", "mxfp4-pack-quantized", "mxfp6-pack-quantized",
           "mxfp8-quantized", "float-quantized", "int-quantized", "naive-quantized")
_MX_ELEMENTS = {"mxfp4-pack-quantized": "e2m1", "mxfp6-pack-quantized": "e2m3", "mxfp8-quantized": "e4m3"}
_E8M0_DTYPES = (torch.uint8,) + ((torch.float8_e8m0fnu,) if hasattr(torch, "float8_e8m0fnu") else ())  # torch >= 2.7


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
        old = -(-k // (32 // num_bits))  # older compressed-tensors: 32 // bits whole codes per word
        found = (f"; {words} words is the older layout of {32 // num_bits} whole codes per word (no code across two "
                 f"words), which this importer does not read: re-save it with a current compressed-tensors"
                 if old == words and 32 % num_bits else "")
        raise ShapeError(f"{layout}: weight_packed has {words} words per row, K={k} at {num_bits} bits needs "
                         f"{packed_length(k, num_bits)} (codes packed across word boundaries){found}")
    fmt = scale_format(weight_scale, "weight_scale", layout)
    per_tensor = weight_scale.numel() == 1 and n != 1  # strategy "tensor": one scale (and zero point)
    if per_tensor:
        weight_scale = weight_scale.reshape(1, 1)
    elif weight_scale.dim() == 1 and weight_scale.shape[0] == n:
        weight_scale = weight_scale.reshape(n, 1)
    check_ndim(weight_scale, 2, "weight_scale", layout, "[N, groups]")
    if weight_scale.shape[0] != n and not per_tensor:
        raise ShapeError(f"{layout}: weight_scale must be [N={n}, groups] or [1] (per tensor), got "
                         f"{list(weight_scale.shape)}")
    n_groups = weight_scale.shape[1]
    group = infer_group(k, n_groups, group_size, layout)
    gi = nontrivial_g_idx(weight_g_idx, k, group, n_groups, layout)
    half = 1 << (num_bits - 1)
    stored = unpack_bits(weight_packed, num_bits, k, dim=1)  # [N, K], q + 2**(b-1)
    if weight_zero_point is None:
        scheme = make_scheme(f"int{num_bits}", group=group, scale_fmt=fmt, act_order=gi is not None,
                             granularity="tensor" if per_tensor else None)
        return QuantizedWeight.from_codes(stored ^ half, scheme, weight_scale.contiguous(), g_idx=gi, bias=bias)
    zp = weight_zero_point
    if zp.is_floating_point():
        raise ShapeError(f"{layout}: weight_zero_point must be an integer tensor, got {zp.dtype}")
    if per_tensor:  # unpacked signed zero [1]; repeated per channel with the scale
        if zp.numel() != 1:
            raise ShapeError(f"{layout}: a per-tensor weight_scale needs one weight_zero_point, got {list(zp.shape)}")
        zp = zp.reshape(1, 1).expand(n, 1)
        weight_scale = weight_scale.expand(n, 1)
    if zp.dim() == 1 and n_groups == 1 and zp.shape[0] == n:
        zp = zp.reshape(n, 1)
    if not per_tensor and zp.dtype == torch.int32 and tuple(zp.shape) == (packed_length(n, num_bits), n_groups) and \
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


def from_mxfp(weight: torch.Tensor, weight_scale: torch.Tensor, *, format: str | None = None,
              bias: torch.Tensor | None = None) -> QuantizedWeight:
    """mxfp4-pack-quantized / mxfp6-pack-quantized (``weight`` = the uint8 ``weight_packed``) or mxfp8-quantized
    (``weight`` = the float8_e4m3fn weight), with uint8 E8M0 ``weight_scale`` ``[N, K / 32]``. ``format`` (one of
    those three) is checked against the tensors; by default the element format follows from them."""
    layout = f"compressed-tensors {format or 'mx'}"
    if format is not None and format not in _MX_ELEMENTS:
        raise SchemeError(f"compressed-tensors: format {format!r} is not an MX format ({', '.join(_MX_ELEMENTS)})")
    check_dtype(weight_scale, _E8M0_DTYPES, "weight_scale", layout)
    check_ndim(weight_scale, 2, "weight_scale", layout, "[N, K / 32] (E8M0 exponents)")
    n, groups = weight_scale.shape
    k = 32 * groups
    if weight.dtype == torch.float8_e4m3fn:
        found, name = "mxfp8-quantized", "weight"
        check_shape(weight, (n, k), name, layout, f"{groups} scales per row, one per 32 elements")
    else:
        name = "weight_packed"
        check_dtype(weight, (torch.uint8,), name, layout)
        check_ndim(weight, 2, name, layout, "[N, packed K]")
        widths = {"mxfp4-pack-quantized": k // 2, "mxfp6-pack-quantized": 3 * k // 4}
        found = next((f for f, w in widths.items() if tuple(weight.shape) == (n, w)), None)
        if found is None:
            raise ShapeError(f"{layout}: weight_packed must be uint8 [N={n}, K/2={k // 2}] (mxfp4) or "
                             f"[{n}, 3K/4={3 * k // 4}] (mxfp6) for K={k} (weight_scale has {groups} E8M0 scales "
                             f"per row, one per 32 elements), got {list(weight.shape)}")
    if format is not None and format != found:
        raise SchemeError(f"{layout}: the tensors are {found} ({name} {str(weight.dtype).replace('torch.', '')} "
                          f"{list(weight.shape)}, weight_scale {list(weight_scale.shape)}), not {format}")
    return mx.from_mx(weight, weight_scale, element_format=_MX_ELEMENTS[found], bias=bias)


def _scale_layout(weight_scale: torch.Tensor, n: int, k: int, block: tuple[int, int] | None,
                  group_size: int | None, layout: str):
    """(granularity, block, group, [rows, cols] scales) of a dense ``[N, K]`` weight's ``weight_scale``."""
    if weight_scale.numel() == 1 and n != 1:
        return "tensor", None, None, weight_scale.reshape(1, 1)
    if weight_scale.dim() == 1 and weight_scale.shape[0] == n:
        weight_scale = weight_scale.reshape(n, 1)
    if tuple(weight_scale.shape) == (n, 1):
        return "channel", None, None, weight_scale
    bn, bk = block or (128, 128)
    blocks = (-(-n // bn), -(-k // bk))
    if weight_scale.dim() == 2 and weight_scale.shape[0] == n and (block is None or tuple(weight_scale.shape) != blocks):
        group = infer_group(k, weight_scale.shape[1], group_size, layout)
        if group is not None and k % group == 0:
            return "group", None, group, weight_scale
    if tuple(weight_scale.shape) == blocks:
        return "block", (bn, bk), None, weight_scale
    raise ShapeError(f"{layout}: weight_scale {list(weight_scale.shape)} is neither per tensor [1], per channel "
                     f"[{n}, 1], per group [{n}, K / group] (K={k}) nor per {bn}x{bk} block {list(blocks)} "
                     f"(pass block=)")


def from_float_quantized(weight: torch.Tensor, weight_scale: torch.Tensor, *, input_scale: torch.Tensor | None = None,
                         block: tuple[int, int] | None = None, group_size: int | None = None,
                         weight_zero_point: torch.Tensor | None = None,
                         bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "compressed-tensors float-quantized"
    check_dtype(weight, (torch.float8_e4m3fn,), "weight", layout)
    check_ndim(weight, 2, "weight", layout, "[N, K]")
    if weight_zero_point is not None:
        raise SchemeError(f"{layout}: asymmetric FP8 (a weight_zero_point) is not supported; humming's float "
                          f"weight formats have no zero points")
    if weight_scale.dtype in _E8M0_DTYPES:
        raise ShapeError(f"{layout}: weight_scale is {str(weight_scale.dtype).replace('torch.', '')}: E8M0 "
                         f"exponents are format mxfp8-quantized, not float-quantized")
    n, k = weight.shape
    fmt = scale_format(weight_scale, "weight_scale", layout)
    gran, blk, group, ws = _scale_layout(weight_scale, n, k, block, group_size, layout)
    scheme = make_scheme("e4m3", group=group, scale_fmt=fmt, block=blk, granularity=gran)
    if input_scale is not None:
        scheme = scheme.with_(act="e4m3", act_scale="static_tensor", act_scale_format="f32")
    return QuantizedWeight.from_codes(weight.view(torch.uint8), scheme, ws.contiguous(), bias=bias,
                                      input_scale=input_scale)


def from_int_quantized(weight: torch.Tensor, weight_scale: torch.Tensor, *, input_scale: torch.Tensor | None = None,
                       weight_zero_point: torch.Tensor | None = None, group_size: int | None = None,
                       bias: torch.Tensor | None = None) -> QuantizedWeight:
    """int-quantized / naive-quantized integers in an int8 ``weight``; ``weight_zero_point`` (asymmetric): signed
    int zero points shaped like ``weight_scale``. Imported as int8 (symmetric) or uint8 codes ``q + 128`` with
    integer zeros ``zp + 128`` (asymmetric)."""
    layout = "compressed-tensors int-quantized"
    check_dtype(weight, (torch.int8,), "weight", layout)
    check_ndim(weight, 2, "weight", layout, "[N, K]")
    n, k = weight.shape
    fmt = scale_format(weight_scale, "weight_scale", layout)
    gran, _, group, ws = _scale_layout(weight_scale, n, k, None, group_size, layout)
    if gran == "block":
        raise ShapeError(f"{layout}: weight_scale must be per tensor [1], per channel [{n}, 1] or per group "
                         f"[{n}, K / group], got {list(weight_scale.shape)}")
    codes = weight.view(torch.uint8)
    if weight_zero_point is None:
        scheme = make_scheme("int8", group=group, scale_fmt=fmt, granularity=gran)
        zeros = None
    else:
        zp = weight_zero_point
        if zp.is_floating_point() or zp.dtype == torch.bool:
            raise ShapeError(f"{layout}: weight_zero_point must be an integer tensor, got {zp.dtype}")
        if zp.numel() != ws.numel():
            raise ShapeError(f"{layout}: weight_zero_point must have the shape of weight_scale "
                             f"{list(weight_scale.shape)}, got {list(zp.shape)}")
        zeros = zp.to(torch.int32).reshape(ws.shape) + 128
        if zeros.numel() and (int(zeros.min()) < 0 or int(zeros.max()) > 255):
            raise ShapeError(f"{layout}: weight_zero_point values must lie in [-128, 127]")
        if gran == "tensor":  # humming's zero points are per group or channel: repeat the tensor's one
            gran, ws, zeros = "channel", ws.expand(n, 1), zeros.expand(n, 1)
        scheme = make_scheme("uint8", group=group, scale_fmt=fmt, zero_point="int", granularity=gran)
        codes = codes ^ 0x80
        zeros = zeros.to(torch.uint8).contiguous()
    if input_scale is not None:
        scheme = scheme.with_(act="int8", act_scale="static_tensor", act_scale_format="f32")
    return QuantizedWeight.from_codes(codes, scheme, ws.contiguous(), zeros=zeros, bias=bias,
                                      input_scale=input_scale)


def _normalize_format(format: str | None) -> str | None:
    if format is None:
        return None
    f = format.strip().lower().replace("_", "-")
    if f not in FORMATS:
        raise SchemeError(f"compressed-tensors: format {format!r} is not supported; use one of {', '.join(FORMATS)} "
                          f"(or leave it out to detect the format from the tensors)")
    return f


def _detect_format(tensors: Mapping[str, torch.Tensor], prefix: str) -> str:
    def get(name: str) -> torch.Tensor | None:
        return lookup(tensors, prefix, name, "compressed-tensors", required=False)

    packed, scale = get("weight_packed"), get("weight_scale")
    if packed is not None:
        if packed.dtype != torch.uint8:
            return "pack-quantized"
        if scale is not None and scale.dtype in _E8M0_DTYPES:
            return "mxfp6-pack-quantized" if packed.dim() == 2 and scale.dim() == 2 and \
                packed.shape[-1] == 24 * scale.shape[-1] else "mxfp4-pack-quantized"
        return "nvfp4-pack-quantized"
    weight = get("weight")
    if weight is None:
        lookup(tensors, prefix, "weight_packed", "compressed-tensors")  # raises: names what is missing
    if weight.dtype == torch.float8_e4m3fn:
        return "mxfp8-quantized" if scale is not None and scale.dtype in _E8M0_DTYPES else "float-quantized"
    if weight.dtype == torch.int8:
        return "int-quantized"
    raise SchemeError(f"compressed-tensors: {key(prefix, 'weight')} is {weight.dtype}, which is not quantized "
                      f"(expected weight_packed, or a float8_e4m3fn / int8 weight)")


def load(tensors: Mapping[str, torch.Tensor], prefix: str = "", *, num_bits: int | None = None,
         group_size: int | None = None, block: tuple[int, int] | None = None,
         format: str | None = None) -> QuantizedWeight:
    """Import the layer under ``prefix``: its compressed-tensors format is detected from the tensors present, or
    taken from ``format`` (one of :data:`FORMATS`, the ``format`` of the layer's quantization config)."""
    def get(name: str, required: bool = True):
        return lookup(tensors, prefix, name, "compressed-tensors", required=required)

    fmt = _normalize_format(format) or _detect_format(tensors, prefix)
    if fmt == "naive-quantized":  # the weight's own dtype: int8, or float8 (float-quantized / mxfp8-quantized)
        fmt = _detect_format(tensors, prefix)
    bias = get("bias", False)
    if fmt == "pack-quantized":
        return from_pack_quantized(get("weight_packed"), get("weight_scale"), get("weight_zero_point", False),
                                   get("weight_g_idx", False), get("weight_shape", False), num_bits=num_bits,
                                   group_size=group_size, bias=bias)
    if fmt == "nvfp4-pack-quantized":
        return from_nvfp4(get("weight_packed"), get("weight_scale"), get("weight_global_scale"),
                          input_global_scale=get("input_global_scale", False), bias=bias)
    if fmt in ("mxfp4-pack-quantized", "mxfp6-pack-quantized"):
        return from_mxfp(get("weight_packed"), get("weight_scale"), format=fmt, bias=bias)
    if fmt == "mxfp8-quantized":
        return from_mxfp(get("weight"), get("weight_scale"), format=fmt, bias=bias)
    if fmt == "float-quantized":
        return from_float_quantized(get("weight"), get("weight_scale"), input_scale=get("input_scale", False),
                                    block=block, group_size=group_size,
                                    weight_zero_point=get("weight_zero_point", False), bias=bias)
    return from_int_quantized(get("weight"), get("weight_scale"), input_scale=get("input_scale", False),
                              weight_zero_point=get("weight_zero_point", False), group_size=group_size, bias=bias)
