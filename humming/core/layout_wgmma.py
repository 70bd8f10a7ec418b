"""Weights for the wgmma W8A8 kernel: the codes as stored, a plain K-major [N, K] byte matrix.

wgmma reads both 8-bit operands K-major from shared memory, so no repack into atoms is needed: row n of
the matrix (K bytes) is output channel n. The kernel copies 128-byte pieces of rows into 128-byte-swizzled
shared-memory tiles (see ``humming.core.generator_wgmma``). Scales stay in natural column order.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.layout import act_name
from humming.errors import ShapeError, UnsupportedOnDevice


@dataclass(frozen=True)
class WgmmaW8A8Layout:
    """8-bit weights used as stored by wgmma (int8 or e4m3), K-major [N, K] bytes."""

    a_type: str  # "s8" | "e4m3"
    n: int
    k: int
    weight_scale: str  # "channel" | "tensor"
    weight_bits: int = 8
    kmajor: bool = True  # marks the plain [N, K] layout (vs the k32 atoms of W8A8Layout)
    # e4m3 only: keep every partial sum in the tensor core's accumulator (its fp32 additions keep fewer bits:
    # error grows with K). Default False: the kernel adds each 128-deep partial into fp32 registers.
    fast_accum: bool = False


@dataclass
class PackedWgmmaW8A8:
    layout: WgmmaW8A8Layout
    qweight: torch.Tensor  # uint8 [N, K] codes (int8 two's complement or e4m3 bits), contiguous
    channel_scale: torch.Tensor | None  # fp32 [N], natural column order
    bias: torch.Tensor | None
    out_scale: float
    scales: None = None
    perm: None = None


def prepare_w8a8_wgmma(qw, act_dtype: torch.dtype, a_type: str, fast_accum: bool = False) -> PackedWgmmaW8A8:
    """int8 / e4m3 weights with per-channel or per-tensor scales -> the wgmma kernel's operands.
    ``fast_accum`` (e4m3): no promotion of partial sums to fp32 registers (see WgmmaW8A8Layout)."""
    from humming.core.formats import get as get_format

    act_name(act_dtype)
    scheme = qw.scheme
    fmt = get_format(scheme.weight)
    want = {"s8": ("int", 8), "e4m3": ("float", 8)}.get(a_type)
    if want is None:
        raise UnsupportedOnDevice(f"{scheme.name}: the wgmma 8-bit kernel multiplies s8 or e4m3, not {a_type}")
    if (fmt.kind, int(fmt.bits)) != want or (a_type == "s8" and not fmt.signed) or (
            a_type == "e4m3" and (fmt.exp_bits, fmt.man_bits) != (4, 3)):
        raise UnsupportedOnDevice(f"{scheme.name}: {fmt.name} weights are not {a_type} codes for the wgmma kernel")
    if scheme.zero_point:
        raise UnsupportedOnDevice(f"{scheme.name}: zero points are not supported by the wgmma kernel")
    granularity = scheme.weight_scale.granularity
    if granularity not in ("channel", "tensor"):
        raise UnsupportedOnDevice(
            f"{scheme.name}: {granularity} weight scales are not supported by the wgmma kernel "
            f"(per-channel and per-tensor are)"
        )
    n, k = qw.shape
    if k % 16:
        raise ShapeError(f"K={k} must be a multiple of 16 (16-byte copies of weight rows)")
    scale_vals = qw.scale_values().to(torch.float32)
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    chan = None
    if granularity == "channel":
        chan = scale_vals.reshape(n).contiguous()
    else:
        out_scale *= float(scale_vals.reshape(-1)[0])
    device = qw.packed.device
    bias = None if qw.bias is None else qw.bias.to(device=device, dtype=act_dtype).contiguous()
    codes = qw.codes().to(torch.uint8).reshape(n, k).contiguous()
    layout = WgmmaW8A8Layout(a_type, n, k, granularity, fast_accum=bool(fast_accum) and a_type == "e4m3")
    return PackedWgmmaW8A8(layout, codes, chan, bias, out_scale)
