"""Weights for the register-A wgmma W4A8 kernel (``humming.core.families.register_a8.generator``): signed int4 codes laid out
so that each lane of a warp loads, with two 16-byte loads per 128-deep stage, exactly the codes of its registers of
the m64nNk32 A fragment (the mma.sync m16n8k32 A layout per warp of a warpgroup).

Word order of ``qweight`` (uint32): [N/64 slab][K/128 stage kt][warp w (4)][half (2)][lane (32)][4 words]. Word
jj of half hf of a lane is its word j = 4 hf + jj, for k32 step ks = j // 2 and register pair sub = j % 2; it holds
channel rows r0 = 64 slab + 16 w + lane/4 and r1 = r0 + 8, k = 128 kt + 32 ks + 16 sub + 4 (lane % 4) + e, e < 4:
  * e4m3, linear widening (the default, WgmmaRs8Layout.widen): byte e = label(r0, k_e) | label(r1, k_e) << 4 with
    the labels of e4m3_linear_label (what int4_to_e4m3x8 of the nvidia backend reads): its lo output (low nibbles)
    is register a[2 sub] (row r0), its hi output a[2 sub + 1] (row r1);
  * e4m3, table widening ("prmt"): nibble e = label(r0, k_e), nibble 4 + e = label(r1, k_e), label = the
    two's-complement code with bits 2 and 3 swapped (what int4n8_to_e4m3x8_x reads), outputs as above;
  * s8: byte e = code(r0, k_e) | code(r1, k_e) << 4: (w << 4) & 0xF0F0F0F0 is a[2 sub] as 16 x code and
    w & 0xF0F0F0F0 is a[2 sub + 1] (the scales carry 1/16, as in the W4A8 wgmma layout).
Scales: fp32 [K/group, N] in natural column order (group 128, or K for per-channel scales; s8: times 1/16; e4m3 with
the linear widening: times 2^9)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.common.layout import LINEAR_SCALE, act_name, checked_widening, e4m3_linear_label
from humming.core.families.wgmma_8bit.layout import S8_FROM_INT4_SCALE
from humming.errors import ShapeError, UnsupportedOnDevice

RS8_BC = 64  # channels per slab (one warpgroup's rows of A)
RS8_BK = 128  # k per stage (four k32 steps, one group of 128)


@dataclass(frozen=True)
class WgmmaRs8Layout:
    """4-bit weights as wgmma's register A operand, widened in registers to s8 (16 x code) or e4m3."""

    a_type: str  # "s8" | "e4m3"
    n: int
    k: int
    group: int  # 128, or K (per-channel scales)
    weight_format: str = "int4"
    weight_bits: int = 4
    kmajor: bool = True
    packing: str = "wgmma-rs8"
    # e4m3 fast accumulation (GemmOptions.fast_accum; per-channel scales): the wide form's wgmmas accumulate across
    # stages in the tensor core instead of promoting each stage's partial into fp32 registers (faster, ~2x the error)
    fast_accum: bool = False
    # e4m3: how the codes are widened: "linear" (int4_to_e4m3x8 of the nvidia backend, 7 instructions a word, labels
    # e4m3_linear_label in the s8 nibble order, scales times 2^9) or "prmt" (int4n8_to_e4m3x8_x, 9 instructions and
    # four lookup tables, labels e4m3_label); GemmOptions.w4a8_widen="prmt" asks for the second
    widen: str = "linear"


@dataclass
class PackedWgmmaRs8:
    layout: WgmmaRs8Layout
    qweight: torch.Tensor  # int32 words, see the module docstring
    scales: torch.Tensor  # fp32 [K/group, N], natural column order
    channel_scale: None
    bias: torch.Tensor | None
    out_scale: float
    perm: None = None


def e4m3_label(code: torch.Tensor) -> torch.Tensor:
    """4-bit two's-complement codes -> the e4m3 widening's labels: bits 2 and 3 swapped (an involution)."""
    return (code & 0x3) | ((code & 0x4) << 1) | ((code & 0x8) >> 1)


def pack_int4_rs(codes: torch.Tensor, a_type: str, widen: str = "linear") -> torch.Tensor:
    """4-bit codes [N, K] (low nibbles; N % 64 == 0, K % 128 == 0) -> int32 words in the order of the module
    docstring."""
    n, k = codes.shape
    if n % RS8_BC or k % RS8_BK:
        raise ShapeError(f"N={n} must be a multiple of {RS8_BC} and K={k} of {RS8_BK} for the register-A layout")
    c = (codes.to(torch.int64) & 0xF)
    if a_type == "e4m3":
        checked_widening(widen, "the register-A layout")
    linear = a_type == "e4m3" and widen == "linear"
    if a_type == "e4m3":
        c = e4m3_linear_label(c) if linear else e4m3_label(c)
    # rows: slab, w, h (r0 / r1), g ; k: kt, ks, sub, q, e
    c = c.view(n // 64, 4, 2, 8, k // 128, 4, 2, 4, 4)
    # -> slab kt w [ks sub] [g q] h e
    c = c.permute(0, 4, 1, 5, 6, 3, 7, 2, 8)  # slab kt w ks sub g q h e
    if a_type == "e4m3" and not linear:
        shifts = (4 * (torch.arange(2).view(2, 1) * 4 + torch.arange(4).view(1, 4))).to(torch.int64)  # h e -> nibble
    elif a_type in ("s8", "e4m3"):
        shifts = (8 * torch.arange(4).view(1, 4) + 4 * torch.arange(2).view(2, 1)).to(torch.int64)  # byte e, nibble h
    else:
        raise UnsupportedOnDevice(f"the register-A W4A8 layout widens to s8 or e4m3, not {a_type}")
    words = (c << shifts.to(c.device)).sum(dim=(-2, -1))  # slab kt w ks sub g q
    words = words.reshape(n // 64, k // 128, 4, 8, 32)  # j = 2 ks + sub, lane = 4 g + q
    words = words.view(n // 64, k // 128, 4, 2, 4, 32).permute(0, 1, 2, 3, 5, 4)  # hf, lane, jj
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32).contiguous().view(-1)


def rs8_group(scheme, k: int) -> int:
    """128 for group scales of 128, K for per-channel scales; UnsupportedOnDevice otherwise."""
    spec = scheme.weight_scale
    if spec.granularity == "channel":
        return k
    if spec.granularity == "group" and int(spec.group_size or 0) == 128:
        return 128
    raise UnsupportedOnDevice(f"{scheme.name}: the register-A wgmma W4A8 kernel takes group scales of 128 or "
                              f"per-channel scales, not {spec.granularity} {spec.group_size}")


def rs8_refusal(scheme, n: int, k: int, a_type: str) -> str:
    """Why the register-A W4A8 kernel cannot run these weights ("" when it can)."""
    from humming.core.quant.formats import get as get_format

    fmt = get_format(scheme.weight)
    if not (fmt.kind == "int" and int(fmt.bits) == 4 and fmt.signed) or scheme.zero_point:
        return f"it widens signed int4 codes without zero points, not {fmt.name}"
    if a_type not in ("s8", "e4m3"):
        return f"the activations are {a_type}, not s8 or e4m3"
    if getattr(scheme, "act_order", False):
        return "act-order weights are not supported"
    try:
        rs8_group(scheme, k)
    except UnsupportedOnDevice as exc:
        return str(exc)
    if n % 128:
        return f"N={n} is not a multiple of 128"
    if k % RS8_BK:
        return f"K={k} is not a multiple of {RS8_BK}"
    return ""


def prepare_w4a8_rs(qw, act_dtype: torch.dtype, a_type: str, fast_accum: bool = False,
                    widen: str = "linear") -> PackedWgmmaRs8:
    """Signed int4 weights with group-128 or per-channel scales -> the register-A wgmma W4A8 kernel's operands.
    ``fast_accum`` (e4m3 only; ignored for s8, whose int32 sums are exact): the layout asks for the fast-accumulation
    form where the planner has one (WgmmaRs8Layout.fast_accum). ``widen`` (e4m3): WgmmaRs8Layout.widen."""
    act_name(act_dtype)
    n, k = qw.shape
    why = rs8_refusal(qw.scheme, n, k, a_type)
    if why:
        raise UnsupportedOnDevice(f"{qw.scheme.name}: the register-A wgmma W4A8 kernel does not apply: {why}")
    if qw.g_idx is not None:
        raise UnsupportedOnDevice(f"{qw.scheme.name}: act-order weights are not supported by the register-A kernel")
    group = rs8_group(qw.scheme, k)
    scales = qw.scale_values().to(torch.float32).reshape(n, -1)
    if a_type == "s8":
        scales = scales * S8_FROM_INT4_SCALE  # exact (a power of two)
    elif widen == "linear":
        scales = scales * LINEAR_SCALE  # exact (a power of two)
    table = scales.t().contiguous()  # [K/group, N]
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    device = qw.packed.device
    bias = None if qw.bias is None else qw.bias.to(device=device, dtype=act_dtype).contiguous()
    widen = widen if a_type == "e4m3" else "linear"
    layout = WgmmaRs8Layout(a_type, n, k, group, fast_accum=bool(fast_accum) and a_type == "e4m3", widen=widen)
    return PackedWgmmaRs8(layout, pack_int4_rs(qw.codes(), a_type, widen).to(device), table, None, bias, out_scale)
