"""Weights for the wgmma WnA16 kernel (``humming.core.families.wgmma_dequant.generator``): signed int4 codes without zero
points, group scales along K (or per-channel / per-tensor scales).

Codes. The int4 codes, in offset binary (u = code + 8, so value = u - 8), are stored in 64 x 64 blocks, each
2048 contiguous bytes: block (na, ka) of the weight W[N, K] at byte ((na * K/64) + ka) * 2048; inside a block,
row r (output channel na*64 + r) has 8 int32 words (32 bytes), word w holding k = ka*64 + 8w .. 8w+7 with k
8w + 2J at bits 4J..4J+3 and k 8w + 2J + 1 at bits 16+4J..16+4J+3 (J = 0..3). So ``(word >> 4J) & 0x000F000F``
is the pair (k 8w+2J, k 8w+2J+1) in the two 16-bit halves: OR-ed into the magic number's mantissa it becomes the
two activation-typed values of consecutive k, and one word becomes 16 bytes of the K-major B tile. A kernel stage
of BN channels x 64 k reads BN/64 whole blocks (2 KB each, contiguous).

Scales. Group scales are a [K/group, N] table in the activation type, natural column order (a power of two may
move into the fp32 epilogue factor, as for the mma.sync kernels); per-channel scales are fp32 [N], applied in
the epilogue (the dequantized weights are then the exact integers); a per-tensor scale joins ``out_scale``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.common.decode import WeightDecode
from humming.core.common.layout import _act_order_perm, _range_shift, act_name
from humming.core.families.mma_wna16.layout import layout_for
from humming.errors import ShapeError, UnsupportedOnDevice

BLOCK_N = 64
BLOCK_K = 64
PACKING = "wgmma-k64-int4"


@dataclass(frozen=True)
class WgmmaWnA16Layout:
    """What the wgmma WnA16 kernel's source depends on (hashable; the field names follow WeightLayout so that
    Plan.kernel_key and the tuning keys read it the same way)."""

    decode: WeightDecode  # int4, magic-number path into the activation type
    n: int
    k: int
    scale_group: int  # > 0: group size along K (32 or a multiple of 64); 0: no in-loop scales
    zero_group: int  # always 0 (no zero points)
    zero_const: float  # -(magic + 8): added to every raw value (exact)
    channel_scale: bool  # fp32 per-channel scale in the epilogue
    act_order: bool
    zero_float: bool = False
    packing: str = PACKING  # marks the 64x64 K-major block packing (vs the mma.sync atoms of WeightLayout)


@dataclass
class PackedWgmmaWnA16:
    layout: WgmmaWnA16Layout
    qweight: torch.Tensor  # int32 [N/64 * K/64 * 64 * 8] (see module docstring)
    scales: torch.Tensor | None  # act dtype [K/group, N], natural column order
    zeros: None
    channel_scale: torch.Tensor | None  # fp32 [N]
    bias: torch.Tensor | None  # act dtype [N]
    out_scale: float
    perm: torch.Tensor | None  # act-order: x[:, perm]

    def tensors(self) -> list[torch.Tensor | None]:
        return [self.qweight, self.scales, self.channel_scale, self.bias, self.perm]


def supports(scheme) -> str | None:
    """None when the wgmma WnA16 kernel runs this scheme's weights, else why not."""
    from humming.core.quant.formats import get as get_format

    if getattr(scheme, "act", None):
        return f"{scheme.name} quantizes activations"
    fmt = get_format(scheme.weight)
    if not (fmt.kind == "int" and int(fmt.bits) == 4 and getattr(fmt, "signed", False)):
        return f"{scheme.name}: {fmt.name} weights (the wgmma kernel takes signed int4)"
    if scheme.zero_point:
        return f"{scheme.name}: zero points (the wgmma kernel takes symmetric int4)"
    spec = scheme.weight_scale
    if spec.granularity == "group":
        g = int(spec.group_size)
        if not (g == 32 or (g >= 64 and g % 64 == 0)):
            return f"{scheme.name}: group size {g} (the wgmma kernel takes 32 or a multiple of 64)"
    elif spec.granularity not in ("channel", "tensor"):
        return f"{scheme.name}: {spec.granularity} weight scales"
    return None


def wgmma_wna16_layout(scheme, n: int, k: int, act: str, act_order: bool = False) -> WgmmaWnA16Layout:
    """The kernel-visible layout of a scheme's weights (no weights needed), or UnsupportedOnDevice / ShapeError."""
    why = supports(scheme)
    if why:
        raise UnsupportedOnDevice(why + "; the mma.sync tile kernel runs it")
    if n % BLOCK_N or k % BLOCK_K:
        raise ShapeError(f"N={n} and K={k} must be multiples of 64 for the wgmma WnA16 kernel")
    base = layout_for(scheme, n, k, act, act_order=act_order)
    if base.decode.int_path != "magic" or base.zero_group:
        raise UnsupportedOnDevice(f"{scheme.name}: the wgmma WnA16 kernel decodes int4 with the magic number only")
    return WgmmaWnA16Layout(decode=base.decode, n=n, k=k, scale_group=base.scale_group, zero_group=0,
                            zero_const=base.zero_const, channel_scale=base.channel_scale, act_order=act_order)


def pack_int4_k64(u: torch.Tensor) -> torch.Tensor:
    """Offset-binary int4 codes u [N, K] (0..15) -> int32 words in the 64x64 block order (module docstring)."""
    n, k = u.shape
    c = u.to(torch.int64).view(n // 64, 64, k // 64, 8, 4, 2)  # na r ka w J e  (k = ka*64 + 8w + 2J + e)
    c = c.permute(0, 2, 1, 3, 4, 5)  # na ka r w J e
    shifts = (torch.arange(4).view(4, 1) * 4 + torch.tensor([0, 16]).view(1, 2)).to(torch.int64).to(c.device)
    words = (c << shifts).sum(dim=(-1, -2))  # na ka r w
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32).contiguous().reshape(-1)


def unpack_int4_k64(words: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """The inverse of pack_int4_k64 (for tests): int32 words -> offset-binary codes [N, K] (int64)."""
    w = words.to(torch.int64).view(n // 64, k // 64, 64, 8, 1, 1) & 0xFFFFFFFF
    shifts = (torch.arange(4).view(4, 1) * 4 + torch.tensor([0, 16]).view(1, 2)).to(torch.int64)
    c = (w >> shifts) & 0xF  # na ka r w J e
    return c.permute(0, 2, 1, 3, 4, 5).reshape(n, k)


def prepare_wgmma_wna16(qw, act_dtype: torch.dtype) -> PackedWgmmaWnA16:
    """Repack a signed-int4 QuantizedWeight (group/channel/tensor scales, no zero points) for the wgmma kernel."""
    act = act_name(act_dtype)
    n, k = qw.shape
    spec = qw.scheme.weight_scale
    group = int(spec.group_size) if spec.granularity == "group" else 0
    perm = _act_order_perm(qw.g_idx, k, group, qw.packed.device) if group else None
    layout = wgmma_wna16_layout(qw.scheme, n, k, act, act_order=perm is not None)
    codes = qw.codes()
    if perm is not None:
        codes = codes[:, perm]
    u = (codes.to(torch.int32) & 0xF) ^ 8  # two's complement -> offset binary: value = u - 8
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    scale_vals = qw.scale_values().to(torch.float32)
    scales = chan = None
    if group:
        if scale_vals.shape[-1] * group != k:
            raise ShapeError(f"scales of shape {tuple(scale_vals.shape)} do not match group size {group} and K={k}")
        shift = _range_shift(scale_vals, 0, 16.0, act)  # the scales fit the activation type, weights stay finite
        out_scale *= 2.0**shift
        scales = (scale_vals.double() * 2.0**-shift).t().contiguous().to(act_dtype)
    elif layout.channel_scale:
        chan = scale_vals.reshape(n).contiguous()
    else:
        out_scale *= float(scale_vals.reshape(-1)[0])
    bias = None if qw.bias is None else qw.bias.to(device=qw.packed.device, dtype=act_dtype).contiguous()
    return PackedWgmmaWnA16(layout, pack_int4_k64(u), scales, None, chan, bias, out_scale, perm)
