"""Repacking a canonical QuantizedWeight into the layout the mma-family kernels read.

Atoms. The weight matrix W[N, K] is cut into atoms of 64 (n) x 64 (k). Within an atom, each of
the 32 lanes of a warp owns exactly the B-operand fragments it needs for the MMA m16n8k16
(see ``mma_fragment``): for k16 step ``ks`` (0..3), n8 tile ``nt`` (0..7) and register ``r``
(0: rows k..k+1, 1: rows k+8..k+9) a lane holds one *pair* of codes (h = 0, 1), both in one
column n. Pair p of a lane (``pair_index_c``) is stored in word p // ppw at bit (p % ppw)*cb + 16*h,
where cb is the container width and ppw = 16 // cb: so one shift and one mask yield both codes of a
pair, one per 16-bit half. Two orders of a lane's pairs:
  * step-major (the default): p = (ks * 8 + nt) * 2 + r, so one k16 step's words are contiguous;
  * tile-major (``WeightLayout.tile_major``): p = ((nt // 2) * 4 + ks) * 4 + (nt % 2) * 2 + r, the 16-channel
    tile first. With int4 (cb = 4) word ks of chunk tt is then step ks of tile tt, and a warp that owns one tile
    (the register-A wgmma kernels) reads its four steps with one 16-byte load per lane instead of four 4-byte
    loads. ``tile_major_order`` says where a profile gets it (int4 on profiles with those kernels); the
    mma.sync kernels read both orders (their step-major reads are the cheaper ones).
A lane's words for the atom form ``cb`` chunks of 16 bytes; memory order is
[n_atom][k_atom][chunk][lane][4 words], so a block streams each 64-wide column slab contiguously
along K and a warp reads a chunk with one conflict-free 16-byte load per lane.

Scales and zeros are stored [rows][N/64][8 (n % 8)][8 (n8 tile)], so a lane finds the eight
values of its eight n8 tiles in one 16-byte load.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from humming.core.common.decode import WeightDecode
from humming.core.common.quantized import block_scales_reason
from humming.errors import ShapeError, UnsupportedOnDevice
from humming.options import W4A8_WIDENINGS

ATOM_N = 64
ATOM_K = 64
_ACT_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


def act_name(dtype: torch.dtype) -> str:
    for name, dt in _ACT_DTYPES.items():
        if dt == dtype:
            return name
    raise ShapeError(f"activations must be float16 or bfloat16, got {dtype}")


@dataclass(frozen=True)
class WeightLayout:
    """The part of a prepared weight that the kernel source depends on (hashable)."""

    decode: WeightDecode
    n: int
    k: int
    scale_group: int  # 0: no in-loop scales; >0: group size along K
    zero_group: int  # 0: constant zero; >0: group size; -1: one zero per column (a single row)
    zero_const: float  # when zero_group == 0: the constant added to every raw value
    channel_scale: bool  # fp32 per-column scale applied in the epilogue
    act_order: bool
    zero_float: bool = False  # float zero points: the zero table holds -zero * scale, applied by one fma
    tile_major: bool = False  # the codes' pair order inside an atom (module docstring)


@dataclass
class PackedWeight:
    layout: WeightLayout
    qweight: torch.Tensor  # int32, atom layout
    scales: torch.Tensor | None  # act dtype [rows, N] permuted
    zeros: torch.Tensor | None  # act dtype [rows, N] permuted, holds -(zero_bias + z)
    channel_scale: torch.Tensor | None  # fp32 [N]
    bias: torch.Tensor | None  # act dtype [N]
    out_scale: float  # global factor applied to the fp32 accumulator
    perm: torch.Tensor | None  # int64 [K]: x[:, perm] when act-order

    def tensors(self) -> list[torch.Tensor | None]:
        return [self.qweight, self.scales, self.zeros, self.channel_scale, self.bias, self.perm]


def check_shape(n: int, k: int) -> None:
    if n % ATOM_N:
        raise ShapeError(f"N={n} is not a multiple of {ATOM_N}; pad the output features to a multiple of {ATOM_N}")
    if k % ATOM_K:
        raise ShapeError(f"K={k} is not a multiple of {ATOM_K}; pad the input features to a multiple of {ATOM_K}")


def pair_index_c(ks: str, nt: str, r: str, tile_major: bool) -> str:
    """C expression of a lane's pair index in an atom (module docstring) from its k16 step, n8 tile and register."""
    if tile_major:
        return f"((({nt}) >> 1) * 4 + ({ks})) * 4 + (({nt}) & 1) * 2 + ({r})"
    return f"(({ks}) * 8 + ({nt})) * 2 + ({r})"


def pack_codes(codes: torch.Tensor, decode: WeightDecode, tile_major: bool = False) -> torch.Tensor:
    """uint8 kernel codes [N, K] -> int32 atom layout (see module docstring)."""
    n, k = codes.shape
    check_shape(n, k)
    cb, ppw = decode.container, decode.pairs_per_word
    c = codes.to(torch.int64)
    # n = na*64 + (2 tt + nh)*8 + g ; k = ka*64 + ks*16 + r*8 + q*2 + h ; lane = g*4 + q
    c = c.view(n // 64, 4, 2, 8, k // 64, 4, 2, 4, 2)  # na tt nh g ka ks r q h
    if tile_major:
        c = c.permute(0, 4, 3, 7, 1, 5, 2, 6, 8)  # na ka g q tt ks nh r h
    else:
        c = c.permute(0, 4, 3, 7, 5, 1, 2, 6, 8)  # na ka g q ks tt nh r h
    c = c.reshape(n // 64, k // 64, 32, 64 // ppw, ppw, 2)  # .. lane word j h
    shifts = (torch.arange(ppw, device=c.device).view(ppw, 1) * cb + torch.tensor([0, 16], device=c.device)).to(
        torch.int64
    )
    words = (c << shifts).sum(dim=(-1, -2))  # [na, ka, lane, 4*cb]
    words = words.view(n // 64, k // 64, 32, cb, 4).permute(0, 1, 3, 2, 4).contiguous()
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32).reshape(-1)


def permute_columns(t: torch.Tensor) -> torch.Tensor:
    """[rows, N] -> [rows, N/64, 8 (n % 8), 8 (n8 tile)] flattened back to [rows, N]."""
    rows, n = t.shape
    return t.view(rows, n // 64, 8, 8).transpose(-1, -2).contiguous().view(rows, n)


def permute_columns_accum(t: torch.Tensor) -> torch.Tensor:
    """[rows, N] -> [rows, N/64, 4 ((n % 8) / 2), 8 (n8 tile), 2 (n % 2)] flattened back to [rows, N]: the
    order of an mma accumulator fragment, where lane l holds columns t*8 + 2*(l % 4) + {0, 1} of each n8 tile t,
    so its 16 columns of an atom are contiguous."""
    rows, n = t.shape
    return t.view(rows, n // 64, 8, 4, 2).permute(0, 1, 3, 2, 4).contiguous().view(rows, n)


# The W4A8 kernels' int4 -> e4m3 widening (their layouts' ``widen``): "linear" (the default; e4m3x4_of_labels of the
# nvidia backend: an add and a lop3 per 4 codes, on labels stored with the weights, scales times 2^9) or "prmt" (byte-
# permute lookup tables on the codes as they are); GemmOptions.w4a8_widen="prmt" asks for the tables
WIDENINGS = W4A8_WIDENINGS
# two's-complement code c (value c, or c - 16 from 8) -> the linear widening's label: v + 8 for v >= 0, -v for -7..-1,
# 0 for -8 (what e4m3x4_of_labels turns into the e4m3 byte of v * 2^-9)
LINEAR_LABELS = (8, 9, 10, 11, 12, 13, 14, 15, 0, 7, 6, 5, 4, 3, 2, 1)
LINEAR_SCALE = 512.0  # 2^9: the linear widening's bytes are the codes' values times 2^-9; the scales carry it back


def checked_widening(value: str, source: str) -> str:
    """``value`` if it names a widening of WIDENINGS, else ValueError naming ``source`` and the choices."""
    if value not in WIDENINGS:
        raise ValueError(f"{source}: the W4A8 int4 -> e4m3 widening is one of {', '.join(WIDENINGS)}, not {value!r}")
    return value


# what a plan says of the linear widening (both W4A8 kernels read it the same way)
LINEAR_WIDENING_REASON = ("int4 -> e4m3, linear: each value the e4m3 byte sign | magnitude at 2^-9 (the scales carry "
                          "2^9), from labels stored with the weights by one add and one lop3 per 4 codes "
                          "(GemmOptions.w4a8_widen='prmt': byte-permute tables)")


def e4m3_linear_label(code: torch.Tensor) -> torch.Tensor:
    """4-bit two's-complement codes -> the linear widening's labels (LINEAR_LABELS)."""
    return torch.tensor(LINEAR_LABELS, dtype=torch.int64, device=code.device)[code.to(torch.int64) & 0xF]


def pack_codes_k32(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [N, K] -> int32 k32 atom layout: per 64x64 atom, [chunk s*4 + t/2][lane][(t%2)*2 + r] words,
    word = 4 consecutive k (k = s*32 + r*16 + (lane%4)*4 + e, byte e) of column t*8 + lane/4."""
    n, k = codes.shape
    check_shape(n, k)
    c = codes.contiguous().view(n // 64, 8, 8, k // 64, 2, 2, 4, 4)  # na t g ka s r q e
    c = c.view(n // 64, 4, 2, 8, k // 64, 2, 2, 4, 4)  # na t2 th g ka s r q e   (t = t2*2 + th)
    c = c.permute(0, 4, 5, 1, 3, 7, 2, 6, 8)  # na ka s t2 g q th r e
    return c.contiguous().view(torch.int32).reshape(-1)


def check_8bit_weights(scheme, a_type: str, kernel: str, block: bool = False) -> str:
    """The weights of a W8A8 kernel (``kernel`` names it in errors): s8 or e4m3 codes used as stored, no zero
    points, per-channel or per-tensor scales (or, where the kernel applies them (``block``), 128x128 block scales
    with activation scales per 128 of K). Returns the scale granularity."""
    from humming.core.quant.formats import get as get_format

    fmt = get_format(scheme.weight)
    want = {"s8": ("int", 8), "e4m3": ("float", 8)}.get(a_type)
    if want is None:
        raise UnsupportedOnDevice(f"{scheme.name}: the {kernel} multiplies s8 or e4m3, not {a_type}")
    if (fmt.kind, int(fmt.bits)) != want or (a_type == "s8" and not fmt.signed) or (
            a_type == "e4m3" and (fmt.exp_bits, fmt.man_bits) != (4, 3)):
        raise UnsupportedOnDevice(f"{scheme.name}: {fmt.name} weights are not {a_type} codes for the {kernel}")
    if scheme.zero_point:
        raise UnsupportedOnDevice(f"{scheme.name}: zero points are not supported by the {kernel}")
    granularity = scheme.weight_scale.granularity
    if granularity == "block" and block:
        why = block_scales_reason(scheme)
        if why:
            raise UnsupportedOnDevice(f"{scheme.name}: {why} is not supported by the {kernel}")
        return granularity
    if granularity not in ("channel", "tensor"):
        raise UnsupportedOnDevice(
            f"{scheme.name}: {granularity} weight scales are not supported by the {kernel} "
            f"(per-channel and per-tensor are{', and 128x128 blocks' if block else ''})"
        )
    return granularity


def _act_order_perm(g_idx: torch.Tensor | None, k: int, group: int, device) -> torch.Tensor | None:
    """The K permutation that makes act-order groups contiguous (None when g_idx is the natural order)."""
    if g_idx is None:
        return None
    g_idx = g_idx.to(device=device, dtype=torch.int64)
    natural = torch.arange(k, device=device) // group
    if torch.equal(g_idx, natural):
        return None
    perm = torch.argsort(g_idx, stable=True)
    if not torch.equal(g_idx[perm], natural):
        raise ShapeError(f"act-order g_idx does not form groups of exactly {group} columns")
    return perm


def pack_codes_k32_int4(codes: torch.Tensor) -> torch.Tensor:
    """4-bit two's-complement codes [N, K] -> int32 k32 nibble layout: per 64x64 atom, [chunk s*2 + t/4][lane]
    [t%4] words; byte e of a word holds k = s*32 + 4q + e in its low nibble (register b0) and k + 16 in its
    high nibble (b1), for column t*8 + lane/4."""
    n, k = codes.shape
    check_shape(n, k)
    c = (codes.to(torch.int32) & 0xF).view(n // 64, 8, 8, k // 64, 2, 2, 4, 4)  # na t g ka s r q e
    byte = c[:, :, :, :, :, 0] | (c[:, :, :, :, :, 1] << 4)  # na t g ka s q e
    byte = byte.view(n // 64, 2, 4, 8, k // 64, 2, 4, 4)  # na t2 t4 g ka s q e
    byte = byte.permute(0, 4, 5, 1, 3, 6, 2, 7)  # na ka s t2 g q t4 e
    return byte.to(torch.uint8).contiguous().view(torch.int32).reshape(-1)


_ACT_MAX_EXP = {"f16": 15, "bf16": 127}  # largest power of two below each type's maximum


def _range_shift(scales: torch.Tensor, fix_exp: int, max_value: float, act: str) -> int:
    """Power of two 2**k by which the group scales (times the float codes' exponent fix 2**fix_exp) are
    divided, the fp32 epilogue multiplying it back.

    Two limits: the scales themselves must fit the activation type (a float code's raw value is tiny, down to
    2**-126 in bf16, so its fixed scale is huge), and the dequantized weights (value * scale / 2**k) should sit
    near 2**14, far from overflow and from subnormals. k is the smallest shift that meets both. Worked in
    log2 so that 2**126-sized intermediates never exist as fp32."""
    s_max = float(scales.abs().max())
    if s_max == 0.0 or not math.isfinite(s_max):
        return 0
    k_scale = math.ceil(math.log2(s_max) + fix_exp) - (_ACT_MAX_EXP[act] - 2)
    k_weight = math.ceil(math.log2(s_max * max_value / 16384.0))
    return max(k_scale, k_weight)
