"""Weight and activation scale storage: the torch dtype of each scale format, and the rounding of float32 scales
into it (``encode_scales``) and back (``decode_scales``)."""
from __future__ import annotations

import torch

from humming.core.quant import formats
from humming.errors import SchemeError, ShapeError

__all__ = ["scale_storage_dtype", "encode_scales", "decode_scales"]

_SCALE_DTYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "ue4m3": torch.float8_e4m3fn,
    "ue8m0": torch.uint8,
}


def scale_storage_dtype(fmt: str) -> torch.dtype:
    """The torch dtype scales of this format are stored in (ue8m0: uint8 exponent codes)."""
    try:
        return _SCALE_DTYPES[formats.get(fmt).name]
    except KeyError:
        raise SchemeError(f"{fmt} is not a scale format; use one of {formats.SCALE_FORMATS}") from None


def encode_scales(s: torch.Tensor, fmt: str, *, pow2_rounding: str = "ceil") -> tuple[torch.Tensor, torch.Tensor]:
    """Round float32 scales ``s`` (> 0) to scale format ``fmt``; returns (storage tensor, float32 values).

    Zeros, negatives and NaN become 1 (a zero group). f16/bf16 round *up* to the next representable value
    (so that amax / scale never exceeds the element maximum and no element clips; this also keeps tiny scales
    off zero); ue4m3 rounds to nearest even (the NVFP4 recipe; a result of 0 becomes the smallest subnormal);
    ue8m0 rounds ``pow2_rounding`` ("ceil": no element clips, "floor", or "nearest"); f32 is exact.
    """
    f = formats.get(fmt)
    s = s.to(torch.float32)
    s = torch.where(s > 0, s, torch.ones_like(s))  # zero, negative and NaN scales -> 1
    name = f.name
    if name == "f32":
        return s.clone(), s.clone()
    if name in ("f16", "bf16"):
        dt = _SCALE_DTYPES[name]
        stored = s.clamp(max=f.max).to(dt)
        # round up: the next representable value where the cast rounded down (so no element clips)
        bits = stored.view(torch.int16)
        up = (stored.to(torch.float32) < s.clamp(max=f.max)) & (bits < 0x7C00 if name == "f16" else bits < 0x7F80)
        stored = torch.where(up, (bits + 1).view(dt), stored)
        return stored, stored.to(torch.float32)
    if name == "ue4m3":
        codes = f.encode(s, saturate=True)
        codes = torch.where(codes == 0, torch.ones_like(codes), codes)  # smallest subnormal instead of 0
        return codes.view(torch.float8_e4m3fn), f.decode(codes)
    if name == "ue8m0":
        codes = f.encode(s, saturate=True, rounding=pow2_rounding)
        return codes, f.decode(codes)
    raise SchemeError(f"{fmt} is not a scale format; use one of {formats.SCALE_FORMATS}")


def decode_scales(stored: torch.Tensor, fmt: str) -> torch.Tensor:
    """float32 values of stored scales of format ``fmt``."""
    name = formats.get(fmt).name
    if name == "ue8m0":
        if stored.dtype not in (torch.uint8, torch.float8_e8m0fnu):
            raise ShapeError(f"ue8m0 scales must be uint8 exponent codes, got {stored.dtype}")
        return formats.get("ue8m0").decode(stored.view(torch.uint8))
    if name == "ue4m3":
        if stored.dtype not in (torch.float8_e4m3fn, torch.uint8):
            raise ShapeError(f"ue4m3 scales must be float8_e4m3fn, got {stored.dtype}")
        return formats.get("ue4m3").decode(stored.view(torch.uint8))
    return stored.to(torch.float32)
