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

import dataclasses
import math
from dataclasses import dataclass

import torch

from humming.core.common.decode import WeightDecode, weight_decode
from humming.errors import SchemeError, ShapeError, UnsupportedOnDevice
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


def tile_major_order(caps, layout: WeightLayout) -> bool:
    """Whether weights of ``layout`` prepared for profile ``caps`` get the tile-major pair order: where the
    register-A wgmma kernels take them by default (4-bit integer codes widened with the magic number, the groups
    those kernels run by default, on a profile that declares wgmma m64nNk16 for the activation type). The other
    kernels read either order; the tile kernel's step-major reads are the cheaper ones. False without a profile."""
    d = layout.decode
    if caps is None or (d.kind, d.bits, d.container, d.int_path) != ("int", 4, 4, "magic"):
        return False
    from humming.core.families.register_a import planner as rs
    from humming.core.families.wgmma_dequant.planner import wgmma_k16_form

    return (wgmma_k16_form(caps, d.act) is not None and not rs.layout_refusal(layout, rs.SMALL_BC)
            and not rs.default_refusal(layout))


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


def layout_for(scheme, n: int, k: int, act: str, *, act_order: bool = False, caps=None) -> WeightLayout:
    """The kernel-visible layout of a scheme's weights, without needing the weights themselves; ``caps``: the
    profile they are prepared for (it decides the pair order, ``tile_major_order``)."""
    from humming.core.quant.formats import get as get_format

    if getattr(scheme, "act", None):
        raise UnsupportedOnDevice(
            f"scheme {scheme.name} quantizes activations ({scheme.act}); the WnA16 kernels take 16-bit activations"
        )
    check_shape(n, k)
    fmt = get_format(scheme.weight)
    decode = weight_decode(fmt, act)
    spec = scheme.weight_scale
    group = 0
    if spec.granularity == "group":
        group = int(spec.group_size)
        if k % group:
            raise ShapeError(f"group_size {group} does not divide K={k}; use a group size that divides K")
        if group % 16:
            raise UnsupportedOnDevice(f"group_size {group} is not a multiple of 16, which the mma kernels need")
    elif spec.granularity == "channel" and decode.kind == "float":
        # float codes are placed at 2**-fix (down to 2**-126 in bf16): scaling them in the activation type,
        # as one group spanning K, keeps the fp32 accumulators away from underflow
        group = k
    elif spec.granularity == "block":
        raise UnsupportedOnDevice("2-D block weight scales are not supported by the WnA16 kernels; use group scales")
    elif spec.granularity not in ("channel", "tensor"):
        raise SchemeError(f"unknown weight scale granularity {spec.granularity!r}")
    zero_group, zero_const = 0, 0.0
    zero_float = False
    if decode.kind == "int":
        if scheme.zero_point == "float":
            if not group or spec.granularity != "group":
                raise UnsupportedOnDevice("float zero points need group scales in the WnA16 kernels")
            zero_group, zero_float = group, True
        elif scheme.zero_point == "int":
            zero_group = group if group else -1
        elif getattr(fmt, "signed", False):
            zero_const = -(decode.zero_bias + float(1 << (decode.bits - 1)))
        else:
            zero_const = -decode.zero_bias
    layout = WeightLayout(
        decode=decode, n=n, k=k, scale_group=group, zero_group=zero_group, zero_const=zero_const,
        channel_scale=spec.granularity == "channel" and not group, act_order=act_order, zero_float=zero_float,
    )
    return dataclasses.replace(layout, tile_major=True) if tile_major_order(caps, layout) else layout


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


def prepare(qw, act_dtype: torch.dtype, caps=None) -> PackedWeight:
    """Repack a canonical QuantizedWeight for the mma-family WnA16 kernels of profile ``caps`` (which decides the
    pair order; without one: step-major)."""
    from humming.core.quant.formats import get as get_format

    act = act_name(act_dtype)
    n, k = qw.shape
    layout = layout_for(qw.scheme, n, k, act, caps=caps)
    decode = layout.decode
    fmt = get_format(qw.scheme.weight)
    device = qw.packed.device
    codes = qw.codes()
    if decode.kind == "int" and getattr(fmt, "signed", False):
        codes = codes ^ (1 << (decode.bits - 1))  # two's complement -> offset binary: value = u - 2**(b-1)

    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    fix = 2.0**decode.exponent_fix if decode.kind == "float" else 1.0
    fix_exp = decode.exponent_fix if decode.kind == "float" else 0
    max_value = float(fmt.max) if decode.kind == "float" else float(2**decode.bits)  # largest |code value|
    scale_vals = qw.scale_values().to(torch.float32)
    group = layout.scale_group
    if group and scale_vals.shape[1] == 1 and k != group * scale_vals.shape[1]:
        raise ShapeError(f"scales of shape {tuple(scale_vals.shape)} do not match group size {group} and K={k}")

    perm = None
    if group and qw.g_idx is not None:
        g_idx = qw.g_idx.to(device=device, dtype=torch.int64)
        natural = torch.arange(k, device=device) // group
        if not torch.equal(g_idx, natural):
            perm = torch.argsort(g_idx, stable=True)
            if not torch.equal(g_idx[perm], natural):
                raise ShapeError(f"act-order g_idx does not form groups of exactly {group} columns")
            codes = codes[:, perm]

    scales_t = chan = zeros_t = None
    if group:
        # fold the exponent fix of float codes into the scales and move a power of two to the epilogue
        shift = _range_shift(scale_vals, fix_exp, max_value, act)
        out_scale *= 2.0**shift
        scaled = scale_vals.double() * 2.0 ** (fix_exp - shift)  # float64: the constant may exceed fp32
        scales_t = permute_columns(scaled.t().contiguous()).to(act_dtype)
    elif layout.channel_scale:
        chan = (scale_vals.reshape(n) * fix).contiguous()
    else:  # one scale for the whole tensor
        out_scale *= float(scale_vals.reshape(-1)[0]) * fix

    if layout.zero_group:
        if qw.zeros is None:
            raise SchemeError(f"scheme {qw.scheme.name} has zero points but the weight carries none")
        if layout.zero_float:  # w = (q - z) * s = q * s + (-z * s): the table holds -z * s (scaled like s)
            negz = -(qw.zeros.to(device=device, dtype=torch.float64) * scaled).to(torch.float32)
        else:
            negz = -(decode.zero_bias + qw.zeros.to(device=device, dtype=torch.float32))  # [N, G]
        if layout.zero_group < 0:
            negz = negz[:, :1]
        zeros_t = permute_columns(negz.t().contiguous()).to(act_dtype)

    qweight = pack_codes(codes.to(torch.uint8), decode, layout.tile_major)
    bias = None if qw.bias is None else qw.bias.to(device=device, dtype=act_dtype).contiguous()
    if perm is not None:
        layout = dataclasses.replace(layout, act_order=True)
    return PackedWeight(layout, qweight, scales_t, zeros_t, chan, bias, out_scale, perm)


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


def pack_codes_k32(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [N, K] -> int32 k32 atom layout: per 64x64 atom, [chunk s*4 + t/2][lane][(t%2)*2 + r] words,
    word = 4 consecutive k (k = s*32 + r*16 + (lane%4)*4 + e, byte e) of column t*8 + lane/4."""
    n, k = codes.shape
    check_shape(n, k)
    c = codes.contiguous().view(n // 64, 8, 8, k // 64, 2, 2, 4, 4)  # na t g ka s r q e
    c = c.view(n // 64, 4, 2, 8, k // 64, 2, 2, 4, 4)  # na t2 th g ka s r q e   (t = t2*2 + th)
    c = c.permute(0, 4, 5, 1, 3, 7, 2, 6, 8)  # na ka s t2 g q th r e
    return c.contiguous().view(torch.int32).reshape(-1)


BLOCK_SCALES = (128, 128)  # the weight blocks (n, k) the 8-bit kernels apply, with activation scales per 128 of K


def block_scales_reason(scheme) -> str | None:
    """None when a scheme's block scales are the ones the 8-bit kernels apply (128x128 weight blocks and activation
    scales per 128 of K, the w8a8-fp8-block recipe), else what differs."""
    ws, acts = scheme.weight_scale, scheme.act_scale
    if tuple(ws.block or ()) != BLOCK_SCALES:
        return f"weight blocks {ws.block[0]}x{ws.block[1]} (the 8-bit kernels apply 128x128 blocks)"
    if acts.mode != "dynamic_group" or acts.group_size != BLOCK_SCALES[1]:
        return (f"{acts.mode} activation scales with 128x128 weight blocks (the 8-bit kernels take activation scales "
                f"per 128 of K, act_scale='dynamic_group', act_group_size=128)")
    if acts.global_scale:
        return "a global activation scale with block weight scales"
    return None


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
