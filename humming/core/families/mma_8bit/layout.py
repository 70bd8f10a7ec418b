"""Weights of the mma.sync 8-bit kernel: int8 / e4m3 codes as stored in the k32 fragment order (W8A8, 128x128
weight blocks) and int4 / e2m1 codes packed for the exact widening to s8 / e4m3 in registers (W4A8)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.common.layout import (
    LINEAR_SCALE,
    _act_order_perm,
    act_name,
    check_8bit_weights,
    check_shape,
    checked_widening,
    e4m3_linear_label,
    pack_codes_k32,
    pack_codes_k32_int4,
    permute_columns_accum,
)
from humming.errors import ShapeError, UnsupportedOnDevice


# ---------------------------------------------------------------- 8-bit operands (W8A8: mma 16x8x32)
@dataclass(frozen=True)
class W8A8Layout:
    """Weights used as stored by an 8-bit MMA (int8 or e4m3), in the k32 atom layout."""

    a_type: str  # "s8" | "e4m3"
    n: int
    k: int
    weight_scale: str  # "channel" | "tensor" | "block" (128x128 weight blocks, activation scales per 128 of K)


@dataclass
class PackedW8A8:
    layout: W8A8Layout
    qweight: torch.Tensor  # int32, k32 atom layout
    channel_scale: torch.Tensor | None  # fp32 [N]
    bias: torch.Tensor | None
    out_scale: float
    scales: torch.Tensor | None = None  # block scales: fp32 [ceil(N/128), K/128] weight-block table, row-major


def prepare_w8a8(qw, act_dtype: torch.dtype, a_type: str) -> PackedW8A8:
    """Repack int8 / e4m3 weights (per-channel, per-tensor or 128x128 block scales) for the 8-bit tile kernel."""

    act_name(act_dtype)
    scheme = qw.scheme
    granularity = check_8bit_weights(scheme, a_type, "8-bit kernel", block=True)
    n, k = qw.shape
    scale_vals = qw.scale_values().to(torch.float32)
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    chan = blocks = None
    if granularity == "block":
        check_shape(n, k)
        if k % 128:
            raise ShapeError(f"K={k} must be a multiple of 128 for 128x128 weight blocks")
        blocks = scale_vals.reshape(-(-n // 128), k // 128).contiguous()  # a last block of 64 rows is part-filled
    elif granularity == "channel":
        chan = scale_vals.reshape(n).contiguous()
    else:
        out_scale *= float(scale_vals.reshape(-1)[0])
    device = qw.packed.device
    bias = None if qw.bias is None else qw.bias.to(device=device, dtype=act_dtype).contiguous()
    layout = W8A8Layout(a_type, n, k, granularity)
    return PackedW8A8(layout, pack_codes_k32(qw.codes().to(torch.uint8)), chan, bias, out_scale, blocks)


@dataclass(frozen=True)
class W4A8Layout:
    """4-bit weights widened exactly to the 8-bit MMA type in registers (W4A8): int4 -> s8 or e4m3,
    e2m1 -> e4m3; group scales along K applied to fp32 partial sums."""

    a_type: str  # "s8" | "e4m3"
    n: int
    k: int
    group: int  # scale group along K (a multiple of 32 dividing K; K itself for per-channel)
    weight_bits: int = 4
    weight_format: str = "int4"  # "int4" | "e2m1"
    # int4 -> e4m3: "linear" (labels e4m3_linear_label, scales times 2^9) or "prmt" (the codes as they are, tables)
    widen: str = "linear"


@dataclass
class PackedW4A8:
    layout: W4A8Layout
    qweight: torch.Tensor  # int32, k32 nibble layout
    scales: torch.Tensor  # fp32 [K/group, N], columns in accumulator order (permute_columns_accum)
    channel_scale: None
    bias: torch.Tensor | None
    out_scale: float
    perm: torch.Tensor | None = None  # act-order: activations are gathered x[:, perm] before quantization


def prepare_w4a8(qw, act_dtype: torch.dtype, a_type: str = "s8", widen: str = "linear") -> PackedW4A8:
    """Repack 4-bit weights (signed int4, or e2m1 for e4m3 activations) with group (or channel) scales for the
    8-bit kernel's W4A8 variant. ``widen`` (int4 -> e4m3): W4A8Layout.widen."""
    from humming.core.quant.formats import get as get_format

    act_name(act_dtype)
    scheme = qw.scheme
    fmt = get_format(scheme.weight)
    is_int4 = fmt.kind == "int" and int(fmt.bits) == 4 and fmt.signed
    is_e2m1 = fmt.kind == "float" and (fmt.exp_bits, fmt.man_bits) == (2, 1)
    if scheme.zero_point or not (is_int4 or (is_e2m1 and a_type == "e4m3")):
        raise UnsupportedOnDevice(
            f"{scheme.name}: the W4A8 kernel takes signed int4 (to s8 or e4m3) or e2m1 (to e4m3) weights without "
            f"zero points, not {fmt.name} to {a_type}"
        )
    n, k = qw.shape
    spec = scheme.weight_scale
    group = int(spec.group_size) if spec.granularity == "group" else k if spec.granularity == "channel" else 0
    if not group or k % group or group % 32:
        raise UnsupportedOnDevice(f"{scheme.name}: W4A8 needs group scales of a multiple of 32 dividing K={k}")
    codes = qw.codes()
    perm = _act_order_perm(qw.g_idx, k, group, codes.device) if spec.granularity == "group" else None
    if perm is not None:  # per-token activation quantization is permutation-invariant: gather x instead
        codes = codes[:, perm]
    checked_widening(widen, "prepare_w4a8")
    linear = is_int4 and a_type == "e4m3" and widen == "linear"
    if linear:
        codes = e4m3_linear_label(codes)
    scales = qw.scale_values().to(torch.float32).reshape(n, -1)
    if linear:
        scales = scales * LINEAR_SCALE  # exact (a power of two)
    table = permute_columns_accum(scales.t().contiguous())  # [K/group, N], applied to the accumulators
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    device = qw.packed.device
    bias = None if qw.bias is None else qw.bias.to(device=device, dtype=act_dtype).contiguous()
    layout = W4A8Layout(a_type, n, k, group, weight_format="int4" if is_int4 else "e2m1",
                        widen="linear" if not (is_int4 and a_type == "e4m3") else widen)
    return PackedW4A8(layout, pack_codes_k32_int4(codes), table, None, bias, out_scale, perm)
