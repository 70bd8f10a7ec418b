"""Weights for the wgmma W8A8 kernel: the codes as stored, a plain K-major [N, K] byte matrix.

wgmma reads both 8-bit operands K-major from shared memory, so no repack into atoms is needed: row n of
the matrix (K bytes) is output channel n. The kernel copies 128-byte pieces of rows into 128-byte-swizzled
shared-memory tiles (see ``humming.core.families.wgmma_8bit.generator``). Scales stay in natural column order; 128x128
block scales are the [N/128, K/128] table as stored.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.common.layout import act_name, check_8bit_weights
from humming.errors import ShapeError, UnsupportedOnDevice


@dataclass(frozen=True)
class WgmmaW8A8Layout:
    """8-bit weights used as stored by wgmma (int8 or e4m3), K-major [N, K] bytes."""

    a_type: str  # "s8" | "e4m3"
    n: int
    k: int
    weight_scale: str  # "channel" | "tensor" | "block" (128x128 weight blocks, activation scales per 128 of K)
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
    scales: torch.Tensor | None = None  # block scales: fp32 [N/128, K/128] weight-block table, row-major
    perm: None = None


def prepare_w8a8_wgmma(qw, act_dtype: torch.dtype, a_type: str, fast_accum: bool = False) -> PackedWgmmaW8A8:
    """int8 / e4m3 weights with per-channel, per-tensor or 128x128 block scales -> the wgmma kernel's operands.
    ``fast_accum`` (e4m3): no promotion of partial sums to fp32 registers (see WgmmaW8A8Layout); ignored with
    block scales, which are applied at every 128-deep promotion."""

    act_name(act_dtype)
    scheme = qw.scheme
    granularity = check_8bit_weights(scheme, a_type, "wgmma kernel", block=True)
    n, k = qw.shape
    if k % 16:
        raise ShapeError(f"K={k} must be a multiple of 16 (16-byte copies of weight rows)")
    scale_vals = qw.scale_values().to(torch.float32)
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    chan = blocks = None
    if granularity == "block":
        if n % 128 or k % 128:
            raise ShapeError(f"N={n} and K={k} must be multiples of 128 for the wgmma kernel with 128x128 weight "
                             f"blocks (the 8-bit mma.sync kernel takes N % 64 == 0)")
        blocks = scale_vals.reshape(n // 128, k // 128).contiguous()
        fast_accum = False
    elif granularity == "channel":
        chan = scale_vals.reshape(n).contiguous()
    else:
        out_scale *= float(scale_vals.reshape(-1)[0])
    device = qw.packed.device
    bias = None if qw.bias is None else qw.bias.to(device=device, dtype=act_dtype).contiguous()
    codes = qw.codes().to(torch.uint8).reshape(n, k).contiguous()
    layout = WgmmaW8A8Layout(a_type, n, k, granularity, fast_accum=bool(fast_accum) and a_type == "e4m3")
    return PackedWgmmaW8A8(layout, codes, chan, bias, out_scale, blocks)


# ---------------------------------------------------------------- W4A8 (4-bit weights widened in shared memory)
WGMMA_W4A8_BN = 128  # the W4A8 wgmma tile is 128 columns wide (fp32 sums and the stage partial both in registers)
S8_FROM_INT4_SCALE = 1.0 / 16.0  # int4 -> s8 is widened as 16 * code (one AND per four codes): scales carry 1/16


@dataclass(frozen=True)
class WgmmaW4A8Layout:
    """4-bit weights for the wgmma kernel: K-major [N, K/2] bytes, widened per stage into the 8-bit B tile in
    shared memory (int4 -> s8 as 16 * code, int4 -> e4m3, e2m1 -> e4m3, all exact); group scales along K
    applied to fp32 sums of the group partials."""

    a_type: str  # "s8" | "e4m3"
    n: int
    k: int
    group: int  # scale group along K: 32, 64 or a multiple of 128 dividing K (K itself for per-channel)
    weight_format: str = "int4"  # "int4" | "e2m1"
    weight_bits: int = 4
    kmajor: bool = True


@dataclass
class PackedWgmmaW4A8:
    layout: WgmmaW4A8Layout
    qweight: torch.Tensor  # uint8 [N, K/2]: word j of a row (4 bytes) holds k 8j..8j+7 (see pack_int4_kmajor)
    scales: torch.Tensor  # fp32 [K/group, N], columns in wgmma accumulator order (permute_columns_wgmma)
    channel_scale: None
    bias: torch.Tensor | None
    out_scale: float
    perm: torch.Tensor | None = None  # act-order: activations are gathered x[:, perm] before quantization


def pack_int4_kmajor(codes: torch.Tensor, a_type: str = "s8") -> torch.Tensor:
    """4-bit codes [N, K] (low nibbles) -> uint8 [N, K/2]; each 32-bit word covers 8 consecutive k.
    s8: byte e holds k + e in its low nibble and k + 4 + e in its high nibble, so ``(w << 4) & 0xF0F0F0F0`` and
    ``w & 0xF0F0F0F0`` are the two halves in k order as 16 x code. e4m3: nibble i of the word is k + i (the plain
    packing, low nibble first), so the low and high 16 bits are byte-permute selectors of four codes each."""
    n, k = codes.shape
    if k % 8:
        raise ShapeError(f"K={k} must be a multiple of 8 to pack 4-bit weights")
    c = (codes.to(torch.int32) & 0xF).view(n, k // 8, 2, 4)  # n word half e
    if a_type == "s8":
        byte = c[:, :, 0] | (c[:, :, 1] << 4)
    else:
        c = c.reshape(n, k // 8, 4, 2)  # n word byte nibble
        byte = c[..., 0] | (c[..., 1] << 4)
    return byte.to(torch.uint8).reshape(n, k // 2).contiguous()


def permute_columns_wgmma(t: torch.Tensor, bn: int = WGMMA_W4A8_BN) -> torch.Tensor:
    """[rows, N] -> per block of bn columns, the order [lane % 4][n8 chunk j][e] of a wgmma m64nBN accumulator,
    whose thread holds columns 8j + 2 * (lane % 4) + e: a thread's bn/4 scales are contiguous."""
    rows, n = t.shape
    return t.reshape(rows, n // bn, bn // 8, 4, 2).permute(0, 1, 3, 2, 4).contiguous().view(rows, n)


def wgmma_w4a8_group(scheme, k: int) -> int:
    """The K group of a W4A8 scheme's weight scales on the wgmma kernel (K for per-channel), or
    UnsupportedOnDevice with the reason."""
    spec = scheme.weight_scale
    group = int(spec.group_size) if spec.granularity == "group" else k if spec.granularity == "channel" else 0
    if not group or k % group or not (group in (32, 64) or group % 128 == 0):
        raise UnsupportedOnDevice(
            f"{scheme.name}: the wgmma W4A8 kernel needs group scales of 32, 64 or a multiple of 128 dividing K={k} "
            f"(got {spec.granularity} {spec.group_size}); the 8-bit mma.sync kernel runs it"
        )
    return group


def prepare_w4a8_wgmma(qw, act_dtype: torch.dtype, a_type: str) -> PackedWgmmaW4A8:
    """Signed int4 (to s8 or e4m3) or e2m1 (to e4m3) weights with group or channel scales -> the wgmma W4A8
    kernel's operands."""
    from humming.core.common.layout import _act_order_perm
    from humming.core.quant.formats import get as get_format

    act_name(act_dtype)
    scheme = qw.scheme
    fmt = get_format(scheme.weight)
    is_int4 = fmt.kind == "int" and int(fmt.bits) == 4 and fmt.signed
    is_e2m1 = fmt.kind == "float" and (fmt.exp_bits, fmt.man_bits) == (2, 1)
    if scheme.zero_point or a_type not in ("s8", "e4m3") or not (is_int4 or (is_e2m1 and a_type == "e4m3")):
        raise UnsupportedOnDevice(
            f"{scheme.name}: the wgmma W4A8 kernel takes signed int4 (to s8 or e4m3) or e2m1 (to e4m3) weights "
            f"without zero points, not {fmt.name} to {a_type}"
        )
    n, k = qw.shape
    if n % WGMMA_W4A8_BN or k % 128:
        raise ShapeError(f"N={n} and K={k} must be multiples of 128 for the wgmma W4A8 kernel")
    group = wgmma_w4a8_group(scheme, k)
    codes = qw.codes()
    perm = _act_order_perm(qw.g_idx, k, group, codes.device) if scheme.weight_scale.granularity == "group" else None
    if perm is not None:  # per-token activation quantization is permutation-invariant: gather x instead
        codes = codes[:, perm]
    scales = qw.scale_values().to(torch.float32).reshape(n, -1)
    if a_type == "s8":
        scales = scales * S8_FROM_INT4_SCALE  # exact (a power of two)
    table = permute_columns_wgmma(scales.t().contiguous())
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    device = qw.packed.device
    bias = None if qw.bias is None else qw.bias.to(device=device, dtype=act_dtype).contiguous()
    layout = WgmmaW4A8Layout(a_type, n, k, group, weight_format="int4" if is_int4 else "e2m1")
    return PackedWgmmaW4A8(layout, pack_int4_kmajor(codes, a_type), table, None, bias, out_scale, perm)
