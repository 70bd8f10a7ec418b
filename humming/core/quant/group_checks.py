"""The group-size checks of humming.quantize and humming.plan and the warning for groups quantization loses: a
``group_size`` override is a positive int, K must be a multiple of the group (the error names group sizes and a
scheme that work), and a group of nonzero weights that dequantizes to all zeros is reported."""
from __future__ import annotations

import warnings

import torch

from humming.core.quant.schemes import Scheme, valid_group_sizes
from humming.errors import SchemeError, ShapeError

__all__ = ["group_size_override", "indivisible_error", "warn_lost_groups", "LostGroupsWarning"]


class LostGroupsWarning(UserWarning):
    """Quantization turned whole groups of nonzero weights into zeros (weights below the scale format's smallest
    step, or too few levels for the group's range, e.g. one bit with integer zero points)."""


def _channel_scheme(sch: Scheme) -> str:
    """The scheme string with one scale per output row (what to pass instead of a group size)."""
    try:
        return str(sch.with_(granularity="channel"))
    except SchemeError:  # (a scheme that cannot have per-row scales)
        return ""


def _f32_scheme(sch: Scheme) -> str:
    """The scheme string with f32 scales ('' where the scheme cannot have them)."""
    try:
        return str(sch.with_(scale_format="f32"))
    except SchemeError:
        return ""


def _group_fix(k: int | None, current: int | None) -> str:
    """``group_size=<g>`` with the allowed size dividing ``k`` nearest below the scheme's (else the smallest above),
    and the others; '' where none divides ``k``."""
    options = valid_group_sizes(k)
    if not options:
        return ""
    below = [g for g in options if current is None or g <= current]
    best = below[-1] if below else options[0]
    where = f" divide K={k}" if k else " are allowed"
    return f"group_size={best} (sizes that{where}: {', '.join(map(str, options))})"


PER_CHANNEL = -1  # GPTQ's group_size for one scale per output row, taken as such


def group_size_override(value, sch: Scheme, k: int | None = None) -> int | None:
    """``value`` as a group-size override of ``sch``: None (keep the scheme's group), an int >= 1 (the scheme then
    checks it is an allowed size) or -1 (GPTQ's spelling of one scale per output row). A bool, a non-int, zero or
    another negative number is a SchemeError naming group sizes that divide ``k`` and the per-channel scheme."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and (value >= 1 or value == PER_CHANNEL):
        return value
    fix = _group_fix(k, sch.weight_scale.group_size or 128) or "a multiple of 16 after padding K to one"
    channel = _channel_scheme(sch)
    per_row = f", or scheme={channel!r} for one scale per output row" if channel else ""
    raise SchemeError(f"group_size must be a positive int (the number of K columns that share a scale), got "
                      f"{value!r}; pass {fix}{per_row} (group_size=None keeps the scheme's own group, "
                      f"{sch.weight_scale.group_size})")


def indivisible_error(sch: Scheme, k: int) -> ShapeError:
    """The error for K not a multiple of ``sch``'s group size: the allowed sizes that divide K (as group_size=...)
    and the per-channel scheme, or padding K where no size divides it."""
    fix = _group_fix(k, sch.weight_scale.group_size)
    channel = _channel_scheme(sch)
    fixes = [f"pass {fix}"] if fix else ["pad K to a multiple of 16 (no allowed group size divides it)"]
    if channel:
        fixes.append(f"pass scheme={channel!r} (one scale per output row)")
    return ShapeError(f"group_size {sch.weight_scale.group_size} does not divide K={k}; " + " or ".join(fixes))


def warn_lost_groups(wg: torch.Tensor, deq: torch.Tensor, scheme: Scheme) -> int:
    """Warn (LostGroupsWarning, once) where groups of ``wg`` [..., group] hold a nonzero weight but dequantize
    (``deq``, same shape) to all zeros; returns how many."""
    lost = int(((wg != 0).any(-1) & (deq == 0).all(-1)).sum())
    if lost:
        total = wg[..., 0].numel()
        f32 = _f32_scheme(scheme)
        tiny = (f"; weights below the {scheme.weight_scale.format} scales' smallest step: quantize with scheme={f32!r}"
                if f32 and scheme.weight_scale.format != "f32" else "")
        warnings.warn(f"quantizing with {scheme}: {lost} of {total} groups of nonzero weights became all zeros (every "
                      f"value rounds to the zero code); rescale the weight (and undo it on the output), or use a "
                      f"format with more levels or a smaller group{tiny}", LostGroupsWarning, stacklevel=3)
    return lost
