"""Numerics a caller chooses per call or per layer (``humming.gemm(..., options=...)``, ``QuantLinear(options=...)``).

Kernel variants that do not change results are tuning data (``humming.core.tuning.knobs``); these change what is
computed, within each scheme's tolerance, or how exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

W4A8_WIDENINGS = ("linear", "prmt")


@dataclass(frozen=True)
class GemmOptions:
    """``fast_accum``: FP8 partial sums stay in the tensor core across stages instead of being promoted to fp32
    each stage (where a kernel offers it: about 1.3x faster at a few times the rounding error).
    ``w4a8_widen``: how the W4A8 kernels widen int4 codes to e4m3: "linear" (an add and a lop3 a byte, the codes at
    a scale of 2^-9 the weight scales carry back) or "prmt" (byte-permute lookup tables); the sums are the same.
    ``act_widen``: W8A8 / W4A8 activations quantized, then their 8-bit codes widened exactly to 16 bits and run on
    the weight-only kernels: True at every M, False never, None in the M ranges measured faster
    (humming.core.routes.widened_ranges.DEFAULT_M_RANGES)."""

    fast_accum: bool = False
    w4a8_widen: str = "linear"
    act_widen: bool | None = None

    def __post_init__(self):
        if self.w4a8_widen not in W4A8_WIDENINGS:
            raise ValueError(f"w4a8_widen={self.w4a8_widen!r}: expected one of {', '.join(W4A8_WIDENINGS)}")
        if not isinstance(self.fast_accum, bool):
            raise ValueError(f"fast_accum={self.fast_accum!r}: expected True or False")
        if self.act_widen not in (None, True, False):
            raise ValueError(f"act_widen={self.act_widen!r}: expected True, False or None (the measured M ranges)")


DEFAULT = GemmOptions()


def resolve(options) -> GemmOptions:
    """``options`` as GemmOptions: None is the default; a dict names fields."""
    if options is None:
        return DEFAULT
    if isinstance(options, GemmOptions):
        return options
    if isinstance(options, dict):
        return GemmOptions(**options)
    raise TypeError(f"options must be a humming.GemmOptions, a dict of its fields or None, not {type(options).__name__}")
