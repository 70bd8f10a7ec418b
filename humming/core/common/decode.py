"""How a kernel turns stored weight codes into activation-typed values (the *decode*).

This is device-independent arithmetic on 32-bit words: which bits hold a code, what constant turns
them into a 16-bit float, and what the repacker must fold into zeros and scales so that the kernel
computes exactly ``(code - zero) * scale`` (ints) or ``value(code) * scale`` (floats).
The backend spells the instructions (see ``humming.devices.*.backend``); this module only describes.
"""
from __future__ import annotations

from dataclasses import dataclass

from humming.errors import SchemeError

# Largest exponent width a float code may have to be widened by bit placement into each 16-bit type.
_TARGET_FLOAT = {"f16": {"exp": 5, "man": 10, "bias": 15}, "bf16": {"exp": 8, "man": 7, "bias": 127}}
# Integer codes become 16-bit floats by OR-ing them into the mantissa of a power of two ("magic").
_INT_MAGIC = {"f16": (1024.0, 0x6400, 10), "bf16": (128.0, 0x4300, 7)}


def container_bits(bits: int) -> int:
    """Codes are stored in power-of-two containers so that pairs come out of a word with one shift."""
    for cb in (1, 2, 4, 8):
        if bits <= cb:
            return cb
    raise SchemeError(f"weight codes of {bits} bits are not supported (at most 8)")


@dataclass(frozen=True)
class WeightDecode:
    """Everything the generator and the repacker must agree on for one weight format and activation type."""

    kind: str  # "int" | "float"
    bits: int  # bits per code
    container: int  # container bits (1, 2, 4, 8)
    act: str  # "f16" | "bf16"
    # ints: raw = magic + code (as act type); zero_bias is what the repacker adds to each zero point
    int_path: str = ""  # "magic" | "via_f32"
    magic_bits: int = 0  # 16-bit pattern of the magic power of two
    zero_bias: float = 0.0
    # floats: raw = value * 2**-exponent_fix, exactly
    exp_bits: int = 0
    man_bits: int = 0
    exponent_fix: int = 0

    @property
    def code_mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def pairs_per_word(self) -> int:
        return 16 // self.container


def weight_decode(fmt, act: str) -> WeightDecode:
    """The decode of format ``fmt`` (a humming.formats format) into activation type ``act``."""
    if act not in _TARGET_FLOAT:
        raise SchemeError(f"activation type {act!r} is not a 16-bit float; use 'f16' or 'bf16'")
    bits = int(fmt.bits)
    cb = container_bits(bits)
    if fmt.kind == "int":
        magic, pattern, man = _INT_MAGIC[act]
        if bits < man + 1:  # every code fits the mantissa below the magic power of two
            return WeightDecode("int", bits, cb, act, int_path="magic", magic_bits=pattern, zero_bias=magic)
        return WeightDecode("int", bits, cb, act, int_path="via_f32", zero_bias=0.0)
    if fmt.kind == "float":
        target = _TARGET_FLOAT[act]
        if not fmt.has_sign:
            raise SchemeError(f"unsigned float weight format {fmt.name} has no decode; use a signed format")
        if fmt.exp_bits > target["exp"] or fmt.man_bits > target["man"]:
            raise SchemeError(
                f"{fmt.name} (e{fmt.exp_bits}m{fmt.man_bits}) does not widen exactly into {act}; "
                f"use {'bf16' if act == 'f16' else 'a narrower format'} activations"
            )
        if fmt.exp_bits == 0:
            # e0m3 is a sign-magnitude integer (-7..7): nothing to place into a 16-bit float's exponent, and its
            # values (scale amax / 7) are exactly those of symmetric int4, which every kernel decodes
            raise SchemeError(f"{fmt.name} weights (sign-magnitude integers {int(fmt.min)}..{int(fmt.max)}) have no "
                              f"kernel decode: the kernels widen float codes by placing their exponent and mantissa "
                              f"bits, and {fmt.name} has no exponent field; symmetric int4 quantization gives exactly "
                              f"the same weights (scale amax / 7, codes -7..7): quantize with weight='int4', e.g. "
                              f"scheme.with_(weight='int4') (the CPU reference runs {fmt.name} as it is)")
        fix = target["bias"] - int(fmt.bias)
        return WeightDecode("float", bits, cb, act, exp_bits=fmt.exp_bits, man_bits=fmt.man_bits, exponent_fix=fix)
    raise SchemeError(f"weight format {fmt.name} of kind {fmt.kind!r} cannot be decoded by a kernel")
