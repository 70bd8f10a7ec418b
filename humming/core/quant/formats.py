"""Numeric formats: what the stored numbers are.

Every format maps *codes* (unsigned integers in ``[0, 2**bits)``) to values and back:

* ``fmt.encode(x) -> codes`` rounds to the nearest representable value, ties to even (the code with
  an even last bit); ``fmt.decode(codes) -> float32``; ``fmt.values()`` is the decode of every code.
* Codes of formats of at most 8 bits are ``uint8`` tensors; 16-bit formats give ``int32`` codes in
  ``[0, 65536)`` and ``f32`` gives ``int64`` codes in ``[0, 2**32)``.

Integer formats (``kind == "int"``)
    ``intB`` (signed) codes are two's complement in the low B bits (as hardware s4/s8 operands are);
    ``uintB`` codes are plain. ``ternary`` is int2 restricted to {-1, 0, 1} (code 2 never produced).
    Encoding rounds half to even and always clamps to ``[min, max]``; NaN encodes as 0.

Float formats (``kind == "float"``)
    Sign bit on top, then ``exp_bits`` exponent bits, then ``man_bits`` mantissa bits. A code with
    exponent field ``e`` and mantissa ``m`` is ``2**(e - bias) * (1 + m / 2**man_bits)`` for ``e > 0``
    and ``2**(1 - bias) * m / 2**man_bits`` (subnormal) for ``e == 0``. Special values follow one of
    three conventions: ``ieee`` (exponent all ones: infinity when m == 0, else NaN: e5m2, e3m4, f16,
    bf16, f32), ``fn`` (no infinity, only the all-ones code is NaN: e4m3) and ``finite`` (every code is a
    number: e2m1, e2m3, e3m2, e0m3).

    * e3m4 uses bias 3 with ieee specials, exactly like ``ml_dtypes.float8_e3m4`` (max 15.5). No public
      document pins the special-value convention of the tensor-core E3M4; the ieee choice matches the
      only published software definition and lets us test it bit for bit. Change ``_E3M4`` if one appears.
    * e0m3 has no exponent field: it is a sign-magnitude integer, value ``(-1)**s * m`` (0..7), ``bias`` 0.

Scale formats (``kind == "scale"``)
    ``ue8m0``: 8 exponent bits, no sign, no mantissa, no zero: code ``e`` is ``2**(e - 127)``, 0xFF is NaN
    (OCP MX E8M0). ``ue4m3``: e4m3 without its sign bit (7 bits; its byte is bit-identical to a
    non-negative ``float8_e4m3fn``), as used by per-16 block scales. ``f16``/``bf16``/``f32`` (kind
    ``float``) also serve as scale formats.

Overflow (``encode(x, saturate=...)``)
    ``saturate=True`` (the default, what quantization wants) clamps finite overflow *and* infinities to
    ``±max`` (``satfinite`` semantics); NaN stays NaN where the format has one. ``saturate=False`` rounds
    as IEEE does: overflow becomes ±inf (ieee formats) or NaN (``fn`` formats, ue8m0); this is
    bit-identical to ``ml_dtypes`` casts. ``finite`` formats always saturate (their specs have no other
    choice). NaN input encodes to the format's NaN (sign kept) or, for formats without one, to +0.

ue8m0 rounding
    The OCP MX specification only defines how a block's shared exponent is chosen
    (``floor(log2(amax)) - emax_elem``), not a general cast to E8M0. ``encode`` rounds to the nearest
    power of two in the linear domain with ties *up* (``1.5 * 2**e -> 2**(e+1)``), which is what
    ``ml_dtypes`` and torch's ``float8_e8m0fnu`` cast do; ``encode(x, rounding="floor" | "ceil")`` gives
    the directed roundings (``rz``/``rp``). Zero and negative inputs are NaN unless ``saturate=True``
    (then they clamp to code 0, i.e. ``2**-127``). Quantization picks MX scales with ``ceil`` so that no
    element clips (see ``humming.core.quant.quantize``).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import cached_property

import torch

from humming.errors import SchemeError

__all__ = [
    "Format",
    "IntFormat",
    "FloatFormat",
    "get",
    "names",
    "aliases",
    "SCALE_FORMATS",
    "torch_dtype",
]


class Format:
    """Common interface of integer and float formats (see the module docstring)."""

    name: str
    bits: int
    kind: str

    def encode(self, x: torch.Tensor, *, saturate: bool = True) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def decode(self, codes: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def values(self) -> torch.Tensor:
        """float32 decode of every code 0 .. 2**bits - 1."""
        if self.bits > 16:
            raise SchemeError(f"{self.name} has 2**{self.bits} codes; values() is only offered up to 16 bits")
        return self.decode(torch.arange(2**self.bits, dtype=torch.int64).to(self.code_dtype))

    @property
    def code_dtype(self) -> torch.dtype:
        return torch.uint8 if self.bits <= 8 else (torch.int32 if self.bits <= 16 else torch.int64)

    def quantize_dequantize(self, x: torch.Tensor) -> torch.Tensor:
        """decode(encode(x, saturate=True)): x rounded onto this format's grid, float32."""
        return self.decode(self.encode(x, saturate=True))

    def __repr__(self) -> str:
        return f"<format {self.name}: {self.describe()}>"

    def describe(self) -> str:  # pragma: no cover - overridden
        return self.name

    def __str__(self) -> str:
        return self.name


# ----------------------------------------------------------------------------------------- integers
@dataclass(frozen=True, eq=False, repr=False)
class IntFormat(Format):
    name: str
    bits: int
    signed: bool
    min: int
    max: int

    kind = "int"

    @property
    def has_sign(self) -> bool:
        return self.signed

    @property
    def num_levels(self) -> int:
        return self.max - self.min + 1

    def describe(self) -> str:
        kind = "two's complement" if self.signed else "unsigned"
        return f"{self.bits}-bit {kind} integer, {self.min}..{self.max}"

    def encode(self, x: torch.Tensor, *, saturate: bool = True) -> torch.Tensor:
        """Round half to even and clamp to [min, max] (integers always saturate); NaN -> 0."""
        del saturate
        xf = x.to(torch.float32) if x.dtype != torch.float64 else x
        q = torch.round(xf).clamp_(self.min, self.max)
        q = torch.nan_to_num_(q, nan=0.0)
        return (q.to(torch.int32) & ((1 << self.bits) - 1)).to(torch.uint8)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        c = codes.to(torch.int32) & ((1 << self.bits) - 1)
        if self.signed:
            c = torch.where(c >= (1 << (self.bits - 1)), c - (1 << self.bits), c)
        return c.to(torch.float32)

    def valid_codes(self) -> torch.Tensor:
        """The codes that encode can produce (all codes except ternary's 2)."""
        v = torch.arange(self.min, self.max + 1, dtype=torch.int32)
        return (v & ((1 << self.bits) - 1)).to(torch.uint8)


# ------------------------------------------------------------------------------------------- floats
@dataclass(frozen=True, eq=False, repr=False)
class FloatFormat(Format):
    """A binary floating-point format of at most 8 bits (table-driven), or f16/bf16/f32 (torch casts)."""

    name: str
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    has_sign: bool = True
    specials: str = "finite"  # "ieee" | "fn" | "finite"
    subnormals: bool = True  # False: exponent field 0 is a normal binade (ue8m0 has no zero)
    ties: str = "even"  # "even" | "up" (ue8m0: ties to the larger magnitude, like ml_dtypes and torch)
    scale_only: bool = False

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "scale" if self.scale_only else "float"

    @property
    def has_inf(self) -> bool:
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        return self.specials != "finite"

    @property
    def _torch_native(self) -> torch.dtype | None:
        return {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}.get(self.name)

    def describe(self) -> str:
        sign = "signed" if self.has_sign else "unsigned"
        return (
            f"{self.bits}-bit {sign} float e{self.exp_bits}m{self.man_bits} bias {self.bias}, "
            f"{self.specials} specials, max {self.max:g}"
        )

    # ---- code arithmetic ------------------------------------------------------------------------
    @property
    def _mag_bits(self) -> int:
        return self.exp_bits + self.man_bits

    @property
    def _sign_bit(self) -> int:
        return 1 << self._mag_bits if self.has_sign else 0

    def _value_of(self, code: int) -> float:
        """Exact value of one code as a Python float (used to build tables)."""
        mag_mask = (1 << self._mag_bits) - 1
        negative = self.has_sign and bool(code & self._sign_bit)
        mag = code & mag_mask
        e = mag >> self.man_bits
        m = mag & ((1 << self.man_bits) - 1)
        e_max = (1 << self.exp_bits) - 1
        if self.specials == "ieee" and self.exp_bits > 0 and e == e_max:
            v = float("inf") if m == 0 else float("nan")
        elif self.specials == "fn" and mag == mag_mask:
            v = float("nan")
        elif self.exp_bits == 0:  # sign-magnitude integer (e0m3)
            v = float(m) * 2.0 ** (-self.bias)
        elif e == 0 and self.subnormals:
            v = m / 2.0**self.man_bits * 2.0 ** (1 - self.bias)
        else:
            v = (1.0 + m / 2.0**self.man_bits) * 2.0 ** (e - self.bias)
        return -v if negative else v

    @cached_property
    def nan_codes(self) -> tuple[int, ...]:
        if self.bits > 16:
            raise SchemeError("f32 has 2**24 - 2 NaN codes; test with torch.isnan(fmt.decode(codes)) instead")
        vals = self.values()
        return tuple(int(c) for c in torch.nonzero(torch.isnan(vals)).flatten())

    @cached_property
    def _positive_table(self) -> list[float]:
        """Values of the non-negative finite codes 0, 1, 2, ... (monotonic in the code)."""
        out = []
        for c in range(1 << self._mag_bits):
            v = self._value_of(c)
            if v != v or v == float("inf"):
                break
            out.append(v)
        return out

    @cached_property
    def max(self) -> float:  # type: ignore[override]
        if self._torch_native is not None:
            return float(torch.finfo(self._torch_native).max)
        return self._positive_table[-1]

    @cached_property
    def min_normal(self) -> float:
        if self._torch_native is not None:
            return float(torch.finfo(self._torch_native).tiny)
        if self.exp_bits == 0:
            return 1.0 * 2.0 ** (-self.bias)
        return 2.0 ** ((0 if not self.subnormals else 1) - self.bias)

    @cached_property
    def min_subnormal(self) -> float:
        """Smallest positive value (equals min_normal for formats without subnormals)."""
        if self._torch_native is not None:
            return float(torch.finfo(self._torch_native).smallest_normal) * 2.0 ** (-self.man_bits)
        return next(v for v in self._positive_table if v > 0)

    @property
    def min(self) -> float:
        """Most negative finite value (0 or the smallest positive value for unsigned formats)."""
        return -self.max if self.has_sign else self._positive_table[0] if self.bits <= 8 else 0.0

    @cached_property
    def _tables_cpu(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        pos = torch.tensor(self._positive_table, dtype=torch.float64)
        mids = ((pos[1:] + pos[:-1]) / 2).to(torch.float32)
        assert torch.all(mids.to(torch.float64) == (pos[1:] + pos[:-1]) / 2), "midpoints must be exact"
        assert torch.all(pos[1:] > pos[:-1]), "finite codes must be monotonic"
        full = torch.tensor([self._value_of(c) for c in range(1 << self.bits)], dtype=torch.float32)
        return pos.to(torch.float32), mids, full

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cache = self.__dict__.setdefault("_device_tables", {})
        key = str(device)
        if key not in cache:
            cache[key] = tuple(t.to(device) for t in self._tables_cpu)
        return cache[key]

    # ---- decode ---------------------------------------------------------------------------------
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        native = self._torch_native
        if native is not None:
            if native == torch.float32:
                c = codes.to(torch.int64) & 0xFFFFFFFF
                c = torch.where(c >= 2**31, c - 2**32, c).to(torch.int32)
                return c.view(torch.float32).clone()
            c = codes.to(torch.int32) & 0xFFFF
            c = torch.where(c >= 2**15, c - 2**16, c).to(torch.int16)
            return c.view(native).to(torch.float32)
        table = self._tables(codes.device)[2]
        idx = codes.to(torch.int64) & ((1 << self.bits) - 1)
        return table[idx]

    # ---- encode ---------------------------------------------------------------------------------
    def encode(self, x: torch.Tensor, *, saturate: bool = True, rounding: str = "nearest") -> torch.Tensor:
        """Codes of the representable values nearest to x (see the module docstring for overflow and NaN).

        ``rounding`` is "nearest" (ties to even; ue8m0 ties up), or "floor"/"ceil" (toward zero / away
        from zero in magnitude), offered for scale computation.
        """
        if rounding not in ("nearest", "floor", "ceil"):
            raise SchemeError(f"rounding must be 'nearest', 'floor' or 'ceil', got {rounding!r}")
        native = self._torch_native
        if native is not None:
            if rounding != "nearest":
                raise SchemeError(f"{self.name} encodes with rounding='nearest' only")
            xf = x.to(torch.float32) if x.dtype != torch.float64 else x
            if saturate:
                xf = xf.clamp(-self.max, self.max)  # also maps ±inf to ±max; NaN passes through
            if native == torch.float32:
                return xf.to(torch.float32).view(torch.int32).to(torch.int64) & 0xFFFFFFFF
            return xf.to(native).view(torch.int16).to(torch.int32) & 0xFFFF

        pos, mids, _ = self._tables(x.device)
        xf = x.to(torch.float32)
        a = xf.abs()
        n_pos = pos.numel()
        if rounding == "nearest":
            idx = torch.searchsorted(mids, a.reshape(-1), out_int32=True).reshape(a.shape)  # midpoints < a
            tie = (idx < n_pos - 1) & (mids[idx.clamp(max=n_pos - 2)] == a)
            if self.ties == "even":
                idx = idx + (tie & (idx % 2 == 1)).to(idx.dtype)
            else:
                idx = idx + tie.to(idx.dtype)
        elif rounding == "floor":
            idx = torch.searchsorted(pos, a.reshape(-1), right=True, out_int32=True).reshape(a.shape) - 1
            idx = idx.clamp(min=0)
        else:
            idx = torch.searchsorted(pos, a.reshape(-1), out_int32=True).reshape(a.shape).clamp(max=n_pos - 1)
        codes = idx.to(torch.int32)

        negative = torch.signbit(xf)
        if self.has_sign:
            codes = torch.where(negative, codes | self._sign_bit, codes)

        # overflow beyond the largest finite value
        if not saturate and self.specials != "finite":
            top = pos[-1].item()
            e_top = 0 if self.exp_bits == 0 else _frexp_exponent(top) - 1
            threshold = top + 2.0 ** (e_top - self.man_bits) / 2  # midpoint to the next (virtual) value
            top_code_odd = (n_pos - 1) % 2 == 1
            if rounding == "nearest":
                over = (a > threshold) | ((a == threshold) & (top_code_odd or self.ties == "up"))
            elif rounding == "ceil":
                over = a > top
            else:
                over = torch.isinf(a)
            over_code = self._overflow_code()
            over_codes = torch.full_like(codes, over_code)
            if self.has_sign:
                over_codes = torch.where(negative, over_codes | self._sign_bit, over_codes)
            codes = torch.where(over, over_codes, codes)

        # unsigned formats: negative inputs (and zero for ue8m0, which has no zero)
        if not self.has_sign:
            bad = negative & (a > 0)
            if not self.subnormals:  # no zero code
                bad = bad | (a == 0)
            if not saturate and self.has_nan:
                codes = torch.where(bad, torch.full_like(codes, self._nan_code()), codes)
            else:
                codes = torch.where(bad, torch.zeros_like(codes), codes)

        nan = torch.isnan(xf)
        if self.has_nan:
            nan_codes = torch.full_like(codes, self._nan_code())
            if self.has_sign:
                nan_codes = torch.where(negative, nan_codes | self._sign_bit, nan_codes)
            codes = torch.where(nan, nan_codes, codes)
        else:
            codes = torch.where(nan, torch.zeros_like(codes), codes)
        return codes.to(torch.uint8)

    def _nan_code(self) -> int:
        """The canonical (positive) NaN: all-ones magnitude, or the quiet NaN for ieee formats."""
        if self.specials == "fn":
            return (1 << self._mag_bits) - 1
        e_max = (1 << self.exp_bits) - 1
        return (e_max << self.man_bits) | (1 << (self.man_bits - 1))

    def _overflow_code(self) -> int:
        if self.specials == "ieee":
            return ((1 << self.exp_bits) - 1) << self.man_bits  # infinity
        return self._nan_code()


def _frexp_exponent(v: float) -> int:
    import math

    return math.frexp(v)[1]


# ------------------------------------------------------------------------------------------ registry
def _int(name: str, bits: int, signed: bool, lo: int | None = None, hi: int | None = None) -> IntFormat:
    if lo is None:
        lo = -(1 << (bits - 1)) if signed else 0
    if hi is None:
        hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    return IntFormat(name=name, bits=bits, signed=signed, min=lo, max=hi)


_E3M4 = FloatFormat("e3m4", 8, 3, 4, 3, specials="ieee")

_FORMATS: dict[str, Format] = {}
for _b in range(1, 9):
    _FORMATS[f"int{_b}"] = _int(f"int{_b}", _b, True)
    _FORMATS[f"uint{_b}"] = _int(f"uint{_b}", _b, False)
_FORMATS["ternary"] = _int("ternary", 2, True, -1, 1)
for _f in (
    FloatFormat("e2m1", 4, 2, 1, 1),
    FloatFormat("e0m3", 4, 0, 3, 0),
    FloatFormat("e2m3", 6, 2, 3, 1),
    FloatFormat("e3m2", 6, 3, 2, 3),
    FloatFormat("e4m3", 8, 4, 3, 7, specials="fn"),
    FloatFormat("e5m2", 8, 5, 2, 15, specials="ieee"),
    _E3M4,
    FloatFormat("f16", 16, 5, 10, 15, specials="ieee"),
    FloatFormat("bf16", 16, 8, 7, 127, specials="ieee"),
    FloatFormat("f32", 32, 8, 23, 127, specials="ieee"),
    FloatFormat("ue8m0", 8, 8, 0, 127, has_sign=False, specials="fn", subnormals=False, ties="up", scale_only=True),
    FloatFormat("ue4m3", 7, 4, 3, 7, has_sign=False, specials="fn", scale_only=True),
):
    _FORMATS[_f.name] = _f

SCALE_FORMATS = ("f16", "bf16", "f32", "ue8m0", "ue4m3")

_ALIASES: dict[str, str] = {
    "fp4": "e2m1", "fp4_e2m1": "e2m1", "float4_e2m1": "e2m1", "float4_e2m1fn": "e2m1", "e2m1fn": "e2m1",
    "fp4_e0m3": "e0m3", "float4_e0m3": "e0m3",
    "fp6_e2m3": "e2m3", "float6_e2m3": "e2m3", "float6_e2m3fn": "e2m3", "e2m3fn": "e2m3",
    "fp6_e3m2": "e3m2", "float6_e3m2": "e3m2", "float6_e3m2fn": "e3m2", "e3m2fn": "e3m2",
    "fp8": "e4m3", "fp8_e4m3": "e4m3", "fp8_e4m3fn": "e4m3", "float8_e4m3": "e4m3", "float8_e4m3fn": "e4m3",
    "e4m3fn": "e4m3",
    "fp8_e5m2": "e5m2", "float8_e5m2": "e5m2",
    "fp8_e3m4": "e3m4", "float8_e3m4": "e3m4",
    "e8m0": "ue8m0", "fp8_e8m0": "ue8m0", "float8_e8m0": "ue8m0", "float8_e8m0fnu": "ue8m0", "e8m0fnu": "ue8m0",
    "fp8_ue4m3": "ue4m3", "float8_ue4m3": "ue4m3",
    "fp16": "f16", "float16": "f16", "half": "f16",
    "bfloat16": "bf16",
    "fp32": "f32", "float32": "f32", "float": "f32",
    "int1.58": "ternary", "trit": "ternary",
}
for _b in range(1, 9):
    _ALIASES[f"s{_b}"] = f"int{_b}"
    _ALIASES[f"u{_b}"] = f"uint{_b}"


def _normalize(name: str) -> str:
    s = name.strip().lower().replace("-", "_")
    s = re.sub(r"^torch\.", "", s)
    m = re.fullmatch(r"float(\d+)(e\d+m\d+)", s)  # "float4e2m1" spelling
    if m:
        s = m.group(2)
    return s


# set by humming.core.quant.schemes (which builds on this module): name -> the message for a scheme's name, or None
SCHEME_HINT: list = []


def get(name: str | Format) -> Format:
    """The format called ``name`` (canonical name or alias; case-insensitive)."""
    if isinstance(name, Format):
        return name
    if not isinstance(name, str):
        raise SchemeError(f"a format name must be a string, got {type(name).__name__}")
    key = _normalize(name)
    key = _ALIASES.get(key, key)
    fmt = _FORMATS.get(key)
    if fmt is not None:
        return fmt
    hint = SCHEME_HINT[0](name) if SCHEME_HINT else None  # a scheme name is a common mistake; say so
    if hint:
        raise SchemeError(hint)
    close = difflib.get_close_matches(key, list(_FORMATS) + list(_ALIASES), n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise SchemeError(f"unknown number format {name!r}{hint} Known formats: {', '.join(names())}")


def names() -> list[str]:
    """Canonical names of every format."""
    return list(_FORMATS)


def aliases() -> dict[str, str]:
    """alias -> canonical name."""
    return dict(_ALIASES)


_TORCH_DTYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "e4m3": torch.float8_e4m3fn,
    "ue4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
}


def torch_dtype(fmt: str | Format) -> torch.dtype | None:
    """The torch dtype whose bytes hold this format's codes directly, if torch has one (else None)."""
    return _TORCH_DTYPES.get(get(fmt).name)
