"""Quantization schemes: *what* the numbers of a quantized linear layer are, independent of how a kernel runs.

A :class:`Scheme` names the weight format and how its scales are laid out, an optional per-tensor second
scale, zero points, act-order, and the activation format with its scaling. Schemes are frozen, validated
on construction (invalid combinations raise :class:`~humming.errors.SchemeError` saying what is wrong and
what would work) and round-trip through strings::

    s = schemes.get("w4a16").with_(group_size=64, act_order=True)
    str(s)                      # 'w4a16[group_size=64,act_order=true]'
    schemes.get(str(s)) == s    # True

String grammar: ``<preset>`` or ``<preset>[key=value,...]`` with the keys of :meth:`Scheme.with_`;
``custom[...]`` starts from the w4a16 fields. Values: ``none``, ``true``/``false``, integers, format names,
blocks as ``128x128``.

Group sizes (weight groups along K and activation groups): a power of two from 16 to 1024, or a multiple of
64 up to 1024 (e.g. 192, 384, 768): every allowed size is a multiple of 16, and those above 64 are
multiples of 64, so that a kernel's K tile (16, 32 or 64 wide) never straddles two groups.
2-D blocks (``block=(bn, bk)``): each side a power of two from 16 to 1024.

Scale computation rules live with the numerics in :mod:`humming.core.quant.quantize`.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Any

from humming.core.quant import formats
from humming.errors import SchemeError

__all__ = [
    "Scheme",
    "ScaleSpec",
    "ActScaleSpec",
    "get",
    "names",
    "aliases",
    "is_scheme_name",
    "valid_group_sizes",
    "is_valid_group_size",
    "GRANULARITIES",
    "ACT_SCALE_MODES",
]

GRANULARITIES = ("channel", "group", "block", "tensor")
ACT_SCALE_MODES = ("none", "static_tensor", "dynamic_token", "dynamic_group")
ZERO_POINTS = (None, "int", "float")
_MAX_GROUP = 1024


def is_valid_group_size(g: int) -> bool:
    if not isinstance(g, int) or isinstance(g, bool) or g < 16 or g > _MAX_GROUP:
        return False
    return (g & (g - 1)) == 0 or g % 64 == 0


def valid_group_sizes(k: int | None = None) -> list[int]:
    """Every allowed group size (dividing ``k`` when given), ascending."""
    out = [g for g in range(16, _MAX_GROUP + 1, 16) if is_valid_group_size(g)]
    if k is not None:
        out = [g for g in out if k % g == 0]
    return out


def _is_pow2_block(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 16 <= v <= 1024 and (v & (v - 1)) == 0


@dataclass(frozen=True)
class ScaleSpec:
    """How weight scales are laid out.

    granularity: "channel" (one per output row), "group" (one per ``group_size`` consecutive K of a row),
    "block" (one per ``block = (bn, bk)`` tile of W[N, K]) or "tensor" (one for the whole weight).
    format: the scale's number format ("f16", "bf16", "f32", "ue8m0", "ue4m3").
    """

    granularity: str = "group"
    group_size: int | None = 128
    block: tuple[int, int] | None = None
    format: str = "f16"

    def describe(self) -> str:
        if self.granularity == "group":
            where = f"per group of {self.group_size} along K"
        elif self.granularity == "block":
            where = f"per {self.block[0]}x{self.block[1]} block"
        else:
            where = f"per {self.granularity}"
        return f"{self.format} scales {where}"


@dataclass(frozen=True)
class ActScaleSpec:
    """How activations are scaled when they are quantized.

    mode: "none" (16-bit activations), "static_tensor" (one calibrated scale), "dynamic_token" (one per
    row of x, computed at run time), "dynamic_group" (one per ``group_size`` consecutive K of a row).
    global_scale: an extra fp32 per-tensor scale (NVFP4's two-level scaling); only with dynamic_group.
    """

    mode: str = "none"
    group_size: int | None = None
    format: str = "f32"
    global_scale: bool = False

    def describe(self) -> str:
        if self.mode == "none":
            return "none"
        g = f"{self.group_size}" if self.mode == "dynamic_group" else ""
        glob = " + fp32 global" if self.global_scale else ""
        return f"{self.mode}{g} {self.format}{glob}"


# flat keys (the vocabulary of with_() and of the string form), in string order
_KEYS = (
    "name",
    "weight",
    "granularity",
    "group_size",
    "block",
    "scale_format",
    "global_scale",
    "zero_point",
    "act",
    "act_scale",
    "act_group_size",
    "act_scale_format",
    "act_global_scale",
    "act_order",
)
_KEY_ALIASES = {
    "weight_format": "weight",
    "weight_scale_format": "scale_format",
    "weight_global_scale": "global_scale",
    "act_format": "act",
    "act_scale_mode": "act_scale",
    "act_mode": "act_scale",
    "desc_act": "act_order",
    "g": "group_size",
}


@dataclass(frozen=True)
class Scheme:
    """A quantization description. Fields (see the module docstring and ``humming.schemes``):

    name: preset name this scheme derives from (informational; part of equality and of ``str``)
    weight: weight number format ("int4" symmetric, "uint4" with zero points, "e2m1", "e4m3", ...)
    weight_scale: :class:`ScaleSpec`
    weight_global_scale: an fp32 per-tensor multiplier on top of the weight scales (NVFP4's weight_scale_2)
    zero_point: None, "int" (uint8 codes) or "float" (float32, in code units); dequant is (q - z) * s
    act: None for 16-bit activations (WnA16; the activation dtype follows x), else the activation format
    act_scale: :class:`ActScaleSpec`
    act_order: the weight carries a K permutation (GPTQ desc_act g_idx)
    """

    name: str
    weight: str
    weight_scale: ScaleSpec = ScaleSpec()
    weight_global_scale: bool = False
    zero_point: str | None = None
    act: str | None = None
    act_scale: ActScaleSpec = ActScaleSpec()
    act_order: bool = False

    # ---- construction ---------------------------------------------------------------------------
    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SchemeError("a scheme needs a non-empty name")
        if not isinstance(self.weight_scale, ScaleSpec):
            raise SchemeError(f"weight_scale must be a ScaleSpec, got {type(self.weight_scale).__name__}")
        if not isinstance(self.act_scale, ActScaleSpec):
            raise SchemeError(f"act_scale must be an ActScaleSpec, got {type(self.act_scale).__name__}")
        set_ = object.__setattr__
        set_(self, "weight", _canonical_format(self.weight, "weight"))
        ws = self.weight_scale
        block = tuple(ws.block) if ws.block is not None else None
        set_(self, "weight_scale", dataclasses.replace(ws, block=block, format=_canonical_format(ws.format, "scale")))
        if self.act is not None:
            set_(self, "act", _canonical_format(self.act, "act"))
        a = self.act_scale
        set_(self, "act_scale", dataclasses.replace(a, mode="none" if a.mode is None else a.mode,
                                                    format=_canonical_format(a.format, "act scale")))
        for field in ("weight_global_scale", "act_order"):
            if not isinstance(getattr(self, field), bool):
                raise SchemeError(f"{field} must be True or False, got {getattr(self, field)!r}")
        _validate(self)

    def with_(self, **changes: Any) -> Scheme:
        """A modified, validated copy. Keys: name, weight, granularity, group_size (None: per channel),
        block ((bn, bk) or "128x128"), scale_format, global_scale, zero_point, act, act_scale (mode),
        act_group_size, act_scale_format, act_global_scale, act_order; also weight_scale=ScaleSpec(...) and
        act_scale=ActScaleSpec(...). Keys that a change implies follow it unless given too: a group_size
        switches to group scales, a block to block scales, act=None clears the activation scaling, and a
        quantized act on a WnA16 scheme gets dynamic per-token f32 scales."""
        given: dict[str, Any] = {}
        for key, value in changes.items():
            if key == "weight_scale" and isinstance(value, ScaleSpec):
                given.update(granularity=value.granularity, group_size=value.group_size, block=value.block,
                             scale_format=value.format)
                continue
            if key == "act_scale" and isinstance(value, ActScaleSpec):
                given.update(act_scale=value.mode, act_group_size=value.group_size, act_scale_format=value.format,
                             act_global_scale=value.global_scale)
                continue
            k = _KEY_ALIASES.get(key, key)
            if k not in _KEYS:
                raise SchemeError(f"unknown scheme key {key!r}; use one of: {', '.join(_KEYS)}")
            given[k] = value
        return Scheme.from_flat(_apply(self.to_flat(), given))

    # ---- flat form (with_ and strings) --------------------------------------------------------------
    def to_flat(self) -> dict[str, Any]:
        ws, a = self.weight_scale, self.act_scale
        return {
            "name": self.name,
            "weight": self.weight,
            "granularity": ws.granularity,
            "group_size": ws.group_size,
            "block": ws.block,
            "scale_format": ws.format,
            "global_scale": self.weight_global_scale,
            "zero_point": self.zero_point,
            "act": self.act,
            "act_scale": a.mode,
            "act_group_size": a.group_size,
            "act_scale_format": a.format,
            "act_global_scale": a.global_scale,
            "act_order": self.act_order,
        }

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> Scheme:
        return cls(
            name=flat["name"],
            weight=flat["weight"],
            weight_scale=ScaleSpec(flat["granularity"], flat["group_size"], flat["block"], flat["scale_format"]),
            weight_global_scale=flat["global_scale"],
            zero_point=flat["zero_point"],
            act=flat["act"],
            act_scale=ActScaleSpec(flat["act_scale"], flat["act_group_size"], flat["act_scale_format"],
                                   flat["act_global_scale"]),
            act_order=flat["act_order"],
        )

    def __str__(self) -> str:
        base = self.name if self.name in _PRESETS else "custom"
        ref = (_PRESETS[base] if base != "custom" else _CUSTOM_BASE).to_flat()
        mine = self.to_flat()
        diffs = []
        if self.name != base:
            diffs.append(f"name={self.name}")
        for k in _KEYS[1:]:
            if mine[k] != ref[k]:
                diffs.append(f"{k}={_fmt_value(mine[k])}")
        return base if not diffs else f"{base}[{','.join(diffs)}]"

    def __repr__(self) -> str:
        return f"Scheme({str(self)!r})"

    # ---- conveniences -----------------------------------------------------------------------------
    @property
    def weight_format(self) -> formats.Format:
        return formats.get(self.weight)

    @property
    def act_format(self) -> formats.Format | None:
        return None if self.act is None else formats.get(self.act)

    @property
    def bits(self) -> int:
        """Bits per weight code."""
        return self.weight_format.bits

    @property
    def act_bits(self) -> int:
        return 16 if self.act is None else formats.get(self.act).bits

    @property
    def group_size(self) -> int | None:
        return self.weight_scale.group_size

    @property
    def quantizes_activations(self) -> bool:
        return self.act is not None

    def describe(self) -> str:
        """One line in words."""
        fmt = self.weight_format
        kind = ""
        if fmt.kind == "int":
            kind = f" ({self.zero_point} zero points)" if self.zero_point else " (symmetric)"
        glob = " x fp32 tensor scale" if self.weight_global_scale else ""
        order = ", act-order" if self.act_order else ""
        act = "16-bit activations" if self.act is None else f"{self.act} activations ({self.act_scale.describe()})"
        return f"{self.weight} weights{kind}, {self.weight_scale.describe()}{glob}{order}; {act}"


# ------------------------------------------------------------------------------------------ validation
def _canonical_format(name: Any, role: str) -> str:
    if not isinstance(name, str):
        raise SchemeError(f"the {role} format must be a format name string, got {name!r}")
    return formats.get(name).name


def _validate(s: Scheme) -> None:  # noqa: C901  (one list of rules, read top to bottom)
    w = formats.get(s.weight)
    ws = s.weight_scale
    # weight format
    if w.kind == "scale" or w.bits > 8:
        raise SchemeError(
            f"weight format {s.weight} is not a quantized weight format; use an integer (int4, uint4, int8, ...) "
            f"or a float of at most 8 bits (e2m1, e4m3, ...)"
        )
    # scale layout
    if ws.granularity not in GRANULARITIES:
        raise SchemeError(f"weight scale granularity {ws.granularity!r} is unknown; use one of {GRANULARITIES}")
    if ws.format not in formats.SCALE_FORMATS:
        raise SchemeError(f"weight scale format {ws.format} is not a scale format; use one of {formats.SCALE_FORMATS}")
    if ws.granularity == "group":
        if not is_valid_group_size(ws.group_size):
            raise SchemeError(
                f"group_size {ws.group_size!r} is not supported: use a power of two from 16 to 1024 or a multiple "
                f"of 64 up to 1024 (e.g. 32, 64, 128), or group_size=None for one scale per output channel"
            )
        if ws.block is not None:
            raise SchemeError("group scales take group_size, not block; set granularity='block' for 2-D blocks")
    elif ws.granularity == "block":
        if ws.block is None or len(ws.block) != 2 or not all(_is_pow2_block(v) for v in ws.block):
            raise SchemeError(
                f"block scales need block=(bn, bk), each a power of two from 16 to 1024 (e.g. (128, 128)); "
                f"got {ws.block!r}"
            )
        if ws.group_size is not None:
            raise SchemeError("block scales take block=(bn, bk), not group_size")
    else:
        if ws.group_size is not None or ws.block is not None:
            raise SchemeError(f"{ws.granularity} scales take neither group_size nor block; use granularity='group'")
    if ws.format in ("ue8m0", "ue4m3") and ws.granularity != "group":
        raise SchemeError(
            f"{ws.format} weight scales are block scales of a microscaling format and need granularity 'group' "
            f"(MX: group_size 32 with ue8m0; NVFP4: group_size 16 with ue4m3); use f16/bf16/f32 for {ws.granularity} scales"
        )
    if s.weight_global_scale and ws.granularity == "tensor":
        raise SchemeError("a global scale on top of a per-tensor scale is redundant; drop weight_global_scale")

    # zero points
    if s.zero_point not in ZERO_POINTS:
        raise SchemeError(f"zero_point must be None, 'int' or 'float', got {s.zero_point!r}")
    if s.zero_point is not None:
        if w.kind != "int" or w.signed:
            better = f"'u{s.weight}'" if w.kind == "int" else "an unsigned integer format such as 'uint4'"
            raise SchemeError(
                f"zero points need an unsigned integer weight format: {s.weight} has "
                f"{'a sign' if w.kind == 'int' else 'float codes'}; use {better} with zero_point={s.zero_point!r}, "
                f"or drop the zero point"
            )
        if ws.granularity not in ("group", "channel"):
            raise SchemeError(f"zero points need group or channel scales, not {ws.granularity} scales")
        if ws.format not in ("f16", "bf16", "f32"):
            raise SchemeError(f"zero points go with f16/bf16/f32 scales, not {ws.format}")
        if s.weight_global_scale:
            raise SchemeError("zero points and a global scale together are not supported; drop one")
    elif w.kind == "int" and not w.signed:
        raise SchemeError(
            f"{s.weight} weights need a zero point (zero_point='int' or 'float'); "
            f"for symmetric quantization use the signed format 'int{w.bits}'"
        )

    # act-order
    if s.act_order and ws.granularity != "group":
        raise SchemeError(
            f"act_order permutes K into groups and needs group scales; with {ws.granularity} scales it has no effect, "
            f"drop it (or set group_size)"
        )

    # activations
    a = s.act_scale
    if a.mode not in ACT_SCALE_MODES:
        raise SchemeError(f"act_scale mode {a.mode!r} is unknown; use one of {ACT_SCALE_MODES}")
    if s.act is None:
        if a.mode != "none" or a.global_scale or a.group_size is not None:
            raise SchemeError("activation scaling needs a quantized activation format (act='int8', 'e4m3', ...)")
        return
    af = formats.get(s.act)
    if af.kind == "scale" or af.bits > 8 or af.name in ("f16", "bf16", "f32"):
        raise SchemeError(
            f"act={s.act!r} is not a quantized activation format; use act=None for 16-bit activations, "
            f"or int8 / e4m3 / e5m2 / e2m1 / e2m3 / e3m2"
        )
    if not af.has_sign:
        raise SchemeError(f"activations need a signed format; use 'int{af.bits}' instead of {s.act!r}")
    if a.mode == "none":
        raise SchemeError(
            f"act={s.act!r} needs an activation scale: act_scale='dynamic_token' (per token), 'static_tensor' "
            f"(calibrated) or 'dynamic_group' (per group along K)"
        )
    if a.format not in formats.SCALE_FORMATS:
        raise SchemeError(f"activation scale format {a.format} is not a scale format; use one of {formats.SCALE_FORMATS}")
    if a.mode == "dynamic_group":
        if not is_valid_group_size(a.group_size):
            raise SchemeError(
                f"act_group_size {a.group_size!r} is not supported: use a power of two from 16 to 1024 or a "
                f"multiple of 64 up to 1024 (NVFP4: 16, MX: 32, block-FP8: 128)"
            )
    else:
        if a.group_size is not None:
            raise SchemeError(f"act_group_size only applies to act_scale='dynamic_group', not {a.mode!r}")
        if a.format in ("ue8m0", "ue4m3"):
            raise SchemeError(f"{a.format} activation scales are per-group microscaling scales; use "
                              f"act_scale='dynamic_group' or an f32 scale")
    if a.global_scale and a.mode != "dynamic_group":
        raise SchemeError("act_global_scale (two-level scaling) needs act_scale='dynamic_group'")
    # the kernel widens weight values into the activation type before the product: they must be exact there
    wvals = _weight_value_set(s)
    avals = set(formats.get(s.act).values().tolist())
    missing = sorted(v for v in wvals if v not in avals)
    if missing:
        fix = "use act='e4m3'" if w.kind == "float" and af.kind == "int" else "use a wider activation format"
        raise SchemeError(
            f"{s.weight} weight values are not exactly representable in {s.act} activations (e.g. {missing[0]:g}); "
            f"the product needs both operands in one type: {fix}"
        )
    if ws.granularity == "block" and a.mode == "dynamic_group" and a.group_size != ws.block[1]:
        raise SchemeError(
            f"block weight scales {ws.block[0]}x{ws.block[1]} with per-group activation scales need "
            f"act_group_size == {ws.block[1]} (the block's K side), got {a.group_size}"
        )


def _apply(flat: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """flat fields updated by ``given``, with the implied changes of keys not given explicitly."""
    out = dict(flat)
    given = dict(given)
    if "group_size" in given and given["group_size"] in (0, -1):
        given["group_size"] = None
    if isinstance(given.get("block"), str):
        given["block"] = _parse_block(given["block"])
    elif given.get("block") is not None:
        given["block"] = _parse_block(given["block"])
    out.update(given)
    if "granularity" not in given:
        if "group_size" in given:
            if given["group_size"] is None:
                if given.get("block") is None:
                    out["granularity"] = "channel" if out["granularity"] == "group" else out["granularity"]
            else:
                out["granularity"] = "group"
                if "block" not in given:
                    out["block"] = None
        if given.get("block") is not None:
            out["granularity"] = "block"
            if "group_size" not in given:
                out["group_size"] = None
    else:
        gran = given["granularity"]
        if gran in ("channel", "tensor", "block") and "group_size" not in given:
            out["group_size"] = None
        if gran in ("channel", "tensor", "group") and "block" not in given:
            out["block"] = None
    if "act" in given:
        if given["act"] is None:
            defaults = {"act_scale": "none", "act_group_size": None, "act_scale_format": "f32",
                        "act_global_scale": False}
            for k, v in defaults.items():
                if k not in given:
                    out[k] = v
        elif flat["act"] is None and "act_scale" not in given:
            out["act_scale"] = "dynamic_token"
    if "act_scale" in given and given["act_scale"] != "dynamic_group" and "act_group_size" not in given:
        out["act_group_size"] = None
    return out


def _weight_value_set(s: Scheme) -> set[float]:
    """Values a kernel feeds to the product before scaling: codes, or (code - zero) for int zero points."""
    w = formats.get(s.weight)
    if s.zero_point == "int":
        top = (1 << w.bits) - 1
        return {float(v) for v in range(-top, top + 1)}
    if s.zero_point == "float":
        return set()  # fractional zeros: the kernel subtracts in its own type; nothing to check
    vals = w.values()
    return {float(v) for v in vals.tolist() if v == v and abs(v) != float("inf")}


def _parse_block(v: Any) -> tuple[int, int]:
    if isinstance(v, str):
        m = re.fullmatch(r"\s*(\d+)\s*[xX,]\s*(\d+)\s*", v)
        if not m:
            raise SchemeError(f"block must look like '128x128', got {v!r}")
        return int(m.group(1)), int(m.group(2))
    try:
        bn, bk = v
        return int(bn), int(bk)
    except (TypeError, ValueError):
        raise SchemeError(f"block must be a pair (bn, bk), got {v!r}") from None


def _fmt_value(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return f"{v[0]}x{v[1]}"
    return str(v)


def _parse_value(key: str, text: str) -> Any:
    t = text.strip()
    low = t.lower()
    if key == "act_scale":
        return "none" if low in ("none", "null", "") else low
    if low in ("none", "null", ""):
        return None
    if key in ("global_scale", "act_global_scale", "act_order"):
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise SchemeError(f"{key} must be true or false, got {t!r}")
    if key in ("group_size", "act_group_size"):
        try:
            return int(t)
        except ValueError:
            raise SchemeError(f"{key} must be an integer, got {t!r}") from None
    if key == "block":
        return _parse_block(t)
    return t


# ------------------------------------------------------------------------------------------- presets
def _p(name: str, weight: str, *, group: int | None = 128, scale: str = "f16", block: tuple[int, int] | None = None,
       granularity: str | None = None, zp: str | None = None, wglobal: bool = False, act: str | None = None,
       act_mode: str = "none", act_group: int | None = None, act_scale: str = "f32", act_global: bool = False,
       ) -> Scheme:
    gran = granularity or ("block" if block else ("group" if group else "channel"))
    return Scheme(
        name=name,
        weight=weight,
        weight_scale=ScaleSpec(gran, group if gran == "group" else None, block, scale),
        weight_global_scale=wglobal,
        zero_point=zp,
        act=act,
        act_scale=ActScaleSpec(act_mode, act_group, act_scale, act_global),
    )


_TOKEN_INT8 = dict(act="int8", act_mode="dynamic_token")
_TOKEN_FP8 = dict(act="e4m3", act_mode="dynamic_token")

_PRESET_LIST = [
    # WnA16: 16-bit activations
    _p("w4a16", "int4"),
    _p("w4a16-zp", "uint4", zp="int"),
    _p("w8a16", "int8", group=None),
    _p("w8a16-zp", "uint8", zp="int"),
    _p("w3a16", "int3"),
    _p("w2a16", "int2", group=64),
    _p("w2a16-zp", "uint2", zp="int", group=64),
    _p("w1a16", "uint1", zp="float", group=64),
    _p("w1a16-ternary", "ternary", group=64),
    _p("w4a16-fp4", "e2m1", group=32),
    _p("w8a16-fp8", "e4m3", group=None, scale="f32"),
    _p("w4a16-nvfp4", "e2m1", group=16, scale="ue4m3", wglobal=True),
    _p("w4a16-mxfp4", "e2m1", group=32, scale="ue8m0"),
    _p("mxint4", "int4", group=32, scale="ue8m0"),
    # W8A8
    _p("w8a8-int8", "int8", group=None, scale="f32", **_TOKEN_INT8),
    _p("w8a8-fp8", "e4m3", group=None, scale="f32", **_TOKEN_FP8),
    _p("w8a8-fp8-tensor", "e4m3", granularity="tensor", scale="f32", act="e4m3", act_mode="static_tensor"),
    _p("w8a8-fp8-block", "e4m3", block=(128, 128), scale="f32", act="e4m3", act_mode="dynamic_group",
       act_group=128),
    _p("mxfp8", "e4m3", group=32, scale="ue8m0", act="e4m3", act_mode="dynamic_group", act_group=32,
       act_scale="ue8m0"),
    _p("mxfp6", "e2m3", group=32, scale="ue8m0", act="e2m3", act_mode="dynamic_group", act_group=32,
       act_scale="ue8m0"),
    _p("mxfp6-e3m2", "e3m2", group=32, scale="ue8m0", act="e3m2", act_mode="dynamic_group", act_group=32,
       act_scale="ue8m0"),
    # W4A8
    _p("w4a8-int8", "int4", **_TOKEN_INT8),
    _p("w4a8-fp8", "int4", **_TOKEN_FP8),
    _p("w4a8-mxfp4", "e2m1", group=32, scale="ue8m0", **_TOKEN_FP8),
    # W4A4
    _p("w4a4-nvfp4", "e2m1", group=16, scale="ue4m3", wglobal=True, act="e2m1", act_mode="dynamic_group",
       act_group=16, act_scale="ue4m3", act_global=True),
    _p("w4a4-mxfp4", "e2m1", group=32, scale="ue8m0", act="e2m1", act_mode="dynamic_group", act_group=32,
       act_scale="ue8m0"),
]
_PRESETS: dict[str, Scheme] = {s.name: s for s in _PRESET_LIST}
_CUSTOM_BASE = dataclasses.replace(_PRESETS["w4a16"], name="custom")

_SCHEME_ALIASES = {
    "nvfp4": "w4a4-nvfp4",
    "mxfp4": "w4a4-mxfp4",
    "ternary": "w1a16-ternary",
    "bitnet": "w1a16-ternary",
    "w1.58a16": "w1a16-ternary",
    "fp8": "w8a8-fp8",
    "int8": "w8a8-int8",
    "w4a16-awq": "w4a16-zp",
    "awq": "w4a16-zp",
    "gptq": "w4a16",
}


def names() -> list[str]:
    """Canonical preset names."""
    return list(_PRESETS)


def aliases() -> dict[str, str]:
    """Alias -> preset name (e.g. 'nvfp4' -> 'w4a4-nvfp4', 'mxfp4' -> 'w4a4-mxfp4')."""
    return dict(_SCHEME_ALIASES)


def _base_key(text: str) -> str:
    return text.strip().lower().replace("_", "-")


def is_scheme_name(text: str) -> bool:
    if not isinstance(text, str):
        return False
    base = _base_key(text.split("[", 1)[0])
    return base in _PRESETS or base in _SCHEME_ALIASES


def get(name: str | Scheme, **overrides: Any) -> Scheme:
    """A preset by name (or alias), a string produced by ``str(scheme)``, or a Scheme; ``overrides`` are
    applied with :meth:`Scheme.with_`."""
    if isinstance(name, Scheme):
        return name.with_(**overrides) if overrides else name
    if not isinstance(name, str):
        raise SchemeError(f"a scheme is named by a string, got {type(name).__name__}")
    m = re.fullmatch(r"\s*([^\[\]]+?)\s*(?:\[(.*)\])?\s*", name, flags=re.S)
    if not m:
        raise SchemeError(f"cannot parse scheme string {name!r}; expected 'preset' or 'preset[key=value,...]'")
    base_text, args = m.group(1), m.group(2)
    base = _base_key(base_text)
    base = _SCHEME_ALIASES.get(base, base)
    if base == "custom":
        scheme = _CUSTOM_BASE
    elif base in _PRESETS:
        scheme = _PRESETS[base]
    else:
        try:
            fmt = formats.get(base_text)
        except SchemeError:
            fmt = None
        if fmt is not None:
            raise SchemeError(
                f"{base_text!r} is a number format, not a scheme; pick a preset such as "
                f"{_suggest_for_format(fmt.name)} or use humming.formats.get({base_text!r})"
            )
        close = difflib.get_close_matches(base, list(_PRESETS) + list(_SCHEME_ALIASES), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise SchemeError(f"unknown scheme {base_text!r}{hint} Presets: {', '.join(_PRESETS)}")
    if args is not None and args.strip():
        parsed: dict[str, Any] = {}
        for item in args.split(","):
            if "=" not in item:
                raise SchemeError(f"scheme option {item.strip()!r} must look like key=value")
            key, value = item.split("=", 1)
            k = _KEY_ALIASES.get(key.strip(), key.strip())
            if k not in _KEYS:
                raise SchemeError(f"unknown scheme key {key.strip()!r}; use one of: {', '.join(_KEYS)}")
            parsed[k] = value.strip() if k == "name" else _parse_value(k, value)
        scheme = Scheme.from_flat(_apply(scheme.to_flat(), parsed))
    return scheme.with_(**overrides) if overrides else scheme


def _suggest_for_format(fmt: str) -> str:
    hits = [n for n, s in _PRESETS.items() if s.weight == fmt]
    return ", ".join(repr(h) for h in hits[:3]) if hits else "'w4a16'"


def _scheme_hint(name: str) -> str | None:
    """The message formats.get gives for a scheme's name."""
    if not is_scheme_name(name):
        return None
    sch = get(name)
    return (f"{name!r} is a quantization scheme, not a number format: use humming.schemes.get({name!r}) "
            f"(its weights are {sch.weight} with {sch.weight_scale.format} scales)")


formats.SCHEME_HINT[:] = [_scheme_hint]
