"""The checks a :class:`~humming.core.quant.quantize.QuantizedWeight` passes when it is built: tensor shapes and dtypes
against its scheme and ``(N, K)`` (behind a leading expert dimension for an expert-stacked weight), and, unless
skipped, the values (ue4m3 scale signs, zero-point and g_idx ranges). Each failure is a ShapeError naming the tensor,
the shape or dtype expected and the one found."""
from __future__ import annotations

import torch

from humming.core.quant.scales import scale_storage_dtype
from humming.errors import ShapeError

__all__ = ["validate_weight", "scale_shape"]


def scale_shape(scheme, n: int, k: int) -> tuple[int, int]:
    """The shape of one ``[N, K]`` weight's scales under ``scheme``'s weight scale granularity."""
    ws = scheme.weight_scale
    if ws.granularity == "group":
        return (n, k // ws.group_size)
    if ws.granularity == "channel":
        return (n, 1)
    if ws.granularity == "tensor":
        return (1, 1)
    bn, bk = ws.block
    return (-(-n // bn), -(-k // bk))


def _what(n: int, k: int, experts: int | None) -> str:
    return f"a {n}x{k} weight" if experts is None else f"{experts} experts' {n}x{k} weights"


def validate_weight(qw, *, values: bool = True) -> None:
    """Raise ShapeError where ``qw``'s tensors do not fit its scheme, shape and ``num_experts``; ``values=False``
    checks shapes and dtypes only (no pass over the data, no device synchronisation)."""
    s, (n, k), e = qw.scheme, qw.shape, qw.num_experts
    lead = () if e is None else (e,)
    what = _what(n, k, e)
    bits = s.bits
    if n <= 0 or k <= 0:
        raise ShapeError(f"weight shape must be positive, got {qw.shape}")
    if e is not None and e <= 0:
        raise ShapeError(f"num_experts must be positive, got {e}")
    want = lead + (n, -(-k * bits // 32))
    if qw.packed.dtype != torch.int32 or tuple(qw.packed.shape) != want:
        raise ShapeError(f"packed must be int32 {list(want)} ({bits}-bit codes of {what}), "
                         f"got {qw.packed.dtype} {list(qw.packed.shape)}")
    ws = s.weight_scale
    want_scales = lead + scale_shape(s, n, k)
    if ws.granularity == "group" and k % ws.group_size:
        raise ShapeError(f"K={k} is not a multiple of group_size={ws.group_size}")
    if tuple(qw.scales.shape) != want_scales:
        raise ShapeError(f"scales must be {list(want_scales)} for {ws.describe()} of {what}, "
                         f"got {list(qw.scales.shape)}")
    dt = scale_storage_dtype(ws.format)
    if qw.scales.dtype != dt:
        raise ShapeError(f"{ws.format} scales must be stored as {dt}, got {qw.scales.dtype}")
    if values and ws.format == "ue4m3" and bool((qw.scales.view(torch.uint8) & 0x80).any()):
        raise ShapeError("ue4m3 scales must be non-negative (the sign bit of a float8_e4m3fn scale is set)")
    g = want_scales[-1]
    if s.zero_point is None:
        if qw.zeros is not None:
            raise ShapeError(f"scheme {s.name} has no zero points but zeros were given")
    else:
        if qw.zeros is None:
            raise ShapeError(f"scheme {s.name} has {s.zero_point} zero points; zeros are missing")
        if tuple(qw.zeros.shape) != lead + (n, g):
            raise ShapeError(f"zeros must be {list(lead + (n, g))} like the scales, got {list(qw.zeros.shape)}")
        want_dt = torch.uint8 if s.zero_point == "int" else torch.float32
        if qw.zeros.dtype != want_dt:
            raise ShapeError(f"{s.zero_point} zero points must be {want_dt}, got {qw.zeros.dtype}")
        if values and s.zero_point == "int" and qw.zeros.numel() and int(qw.zeros.max()) > 2**bits:
            raise ShapeError(f"integer zero points of a {bits}-bit format must be at most {2**bits}")
    if s.weight_global_scale != (qw.global_scale is not None):
        raise ShapeError(f"scheme {s.name} {'needs' if s.weight_global_scale else 'has no'} global scale")
    for name in ("global_scale", "input_scale"):
        t = getattr(qw, name)
        if t is not None and (t.dtype != torch.float32 or tuple(t.shape) != lead):
            raise ShapeError(f"{name} must be float32 {list(lead)} (one value{'' if e is None else ' per expert'}), "
                             f"got {t.dtype} {list(t.shape)}")
    if qw.g_idx is not None:
        if ws.granularity != "group":
            raise ShapeError("g_idx (act-order) needs group scales")
        if tuple(qw.g_idx.shape) != lead + (k,) or qw.g_idx.dtype != torch.int32:
            raise ShapeError(f"g_idx must be int32 {list(lead + (k,))}, got {qw.g_idx.dtype} {list(qw.g_idx.shape)}")
        if values and (int(qw.g_idx.min()) < 0 or int(qw.g_idx.max()) >= g):
            raise ShapeError(f"g_idx values must lie in [0, {g})")
    if s.act_order != (qw.g_idx is not None):
        raise ShapeError(f"scheme act_order={s.act_order} but g_idx is {'missing' if s.act_order else 'given'}")
    if qw.bias is not None and tuple(qw.bias.shape) != lead + (n,):
        raise ShapeError(f"bias must be {list(lead + (n,))}, got {list(qw.bias.shape)}")
