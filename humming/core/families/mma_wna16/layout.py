"""The mma.sync WnA16 weight layout (shared by the stream, tile and register-A kernels): a scheme's layout without
the weights (``layout_for``), the pair order a profile gets, and the repacking of a QuantizedWeight (``prepare``)."""
from __future__ import annotations

import dataclasses

import torch

from humming.core.common.decode import weight_decode
from humming.core.common.layout import (
    PackedWeight,
    WeightLayout,
    _range_shift,
    act_name,
    check_shape,
    pack_codes,
    permute_columns,
)
from humming.core.families.register_a import layout as rs_layout
from humming.errors import SchemeError, ShapeError, UnsupportedOnDevice


def tile_major_order(caps, layout: WeightLayout) -> bool:
    """Whether weights of ``layout`` prepared for profile ``caps`` get the tile-major pair order: where the
    register-A wgmma kernels take them by default (4-bit integer codes widened with the magic number, the groups
    those kernels run by default, on a profile that declares wgmma m64nNk16 for the activation type). The other
    kernels read either order; the tile kernel's step-major reads are the cheaper ones. False without a profile."""
    d = layout.decode
    if caps is None or (d.kind, d.bits, d.container, d.int_path) != ("int", 4, 4, "magic"):
        return False
    from humming.core.common.wgmma import wgmma_k16_form

    return (wgmma_k16_form(caps, d.act) is not None and not rs_layout.layout_refusal(layout, rs_layout.SMALL_BC)
            and not rs_layout.default_refusal(layout))


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
        # a (bn, bk) block's scale is the group scale (group bk along K) of each of its bn channels (``prepare``
        # repeats it over them)
        group = int(spec.block[1])
        if k % group:
            raise ShapeError(f"the {spec.block[0]}x{group} weight blocks do not divide K={k} along K")
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
    if qw.scheme.weight_scale.granularity == "block":  # [N/bn, K/bk] -> the group scales [N, K/bk] of every channel
        scale_vals = scale_vals.repeat_interleave(qw.scheme.weight_scale.block[0], dim=0)[:n]
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
