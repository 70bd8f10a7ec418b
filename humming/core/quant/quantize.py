"""Reference quantization: weights into the canonical :class:`QuantizedWeight`, activations into
:class:`QuantizedActivation`. Pure, vectorised torch on whatever device the input lives on.

Canonical weight layout (what kernels repack from)
--------------------------------------------------
W is ``[N, K]`` (``nn.Linear``: N = out_features, K = in_features).

``packed``  int32 ``[N, ceil(K * bits / 32)]``: the codes of each row as one LSB-first bitstream along K
            (:mod:`humming.core.quant.packing`; 3-bit codes cross word boundaries). ``codes()`` unpacks it to uint8
            ``[N, K]``; codes are those of :mod:`humming.core.quant.formats` (two's complement for signed ints).
``scales``  ``[N, K // group]`` (group), ``[N, 1]`` (channel), ``[1, 1]`` (tensor) or
            ``[ceil(N / bn), ceil(K / bk)]`` (block). dtype: float16 / bfloat16 / float32 for those formats,
            ``torch.float8_e4m3fn`` for ue4m3, uint8 exponent codes for ue8m0. ``scale_values()`` is float32.
``zeros``   None, uint8 ``[N, G]`` integer zero codes (``zero_point="int"``; at most 2**bits, which only a GPTQ
            v1 checkpoint with a wrapped zero produces) or float32 ``[N, G]`` in code units (``"float"``).
``global_scale``  None or a float32 0-dim tensor: a multiplier on top of every scale (NVFP4 weight_scale_2).
``g_idx``   None (column k is in group k // group_size) or int32 ``[K]``: the group of every column (act-order).
``bias``    None or ``[N]``.
``input_scale``  None or float32 0-dim: a calibrated activation scale from a checkpoint (the static per-tensor
            scale for ``static_tensor`` schemes, the global activation scale for two-level schemes).

An expert-stacked weight (mixture-of-experts, ``num_experts = E``) puts a leading E on every tensor above (the
0-dim ones become ``[E]``) while ``shape`` stays the per-expert ``(N, K)``: :mod:`humming.core.quant.experts`.

Dequantization, in float32 and in this order::

    W[n, k] = ((value(code[n, k]) - zero[n, g]) * scale[n, g]) * global_scale,   g = g_idx[k]

(``value`` is the format's decode; block scales index ``scale[n // bn, k // bk]``.)

How scales are chosen (``quantize``)
------------------------------------
amax/min/max are taken over each group (row segment, row, block or the whole tensor) in float32.

* symmetric integers: ``scale = amax / max_code`` (int4: amax / 7; ternary: amax / 1), codes
  ``clamp(round_half_even(w / scale), min, max)``.
* integer zero points (uintB): range ``[min(w_min, 0), max(w_max, 0)]``, ``scale = (hi - lo) / (2**B - 1)``,
  ``zero = clamp(round(-lo / scale), 0, 2**B - 1)``, ``code = clamp(round(w / scale) + zero, 0, 2**B - 1)``.
* float zero points: ``scale = (w_max - w_min) / (2**B - 1)``, ``zero = -w_min / scale`` (unrounded),
  ``code = clamp(round(w / scale + zero), 0, 2**B - 1)``. One bit (uint1) instead takes the two levels
  ``mean -/+ mad`` (mad = mean absolute deviation from the mean): ``scale = 2 * mad``,
  ``zero = -(mean - mad) / scale``, so ``code = w > mean``.
* float formats: ``scale = amax / fmt.max`` and ``code = encode(w / scale)`` (saturating).
* ``scale`` is then rounded to its scale format and the codes are computed with the rounded scale.
  f16/bf16 scales round *up* (toward +inf) so that no element clips; ue4m3 scales round to nearest even
  (saturating), as the NVFP4 recipe does; ue8m0 scales round *up* to a power of two
  (``2**ceil(log2(amax / fmt.max))``, i.e. ``cvt.rp`` of the fp32 quotient) so that no element clips (the
  OCP MX reference rule ``2**(floor(log2(amax)) - emax)`` can clip up to half a binade of values).
* a group whose amax is 0 gets scale 1; a scale that rounds to 0 becomes the scale format's smallest value.
* global scale (two-level): ``gs = amax(W) / (fmt.max * scale_fmt.max)`` (1 if 0), block scales
  ``encode((amax / fmt.max) / gs)``, codes ``encode(w / (scale * gs))``.

Activations (``quantize_activation``) follow the same rules per token / group / tensor, with the
scheme's activation format; a token or group of zeros gets scale 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.quant import formats
from humming.core.quant.experts import ExpertStack, dense_only, per_expert
from humming.core.quant.group_checks import group_size_override, indivisible_error, warn_lost_groups
from humming.core.quant.packing import pack_bits, unpack_bits
from humming.core.quant.scales import decode_scales, encode_scales, scale_storage_dtype
from humming.core.quant.schemes import Scheme
from humming.core.quant.schemes import get as get_scheme
from humming.core.quant.weight_checks import scale_shape, validate_weight
from humming.errors import SchemeError, ShapeError

__all__ = [
    "QuantizedWeight",
    "QuantizedActivation",
    "quantize",
    "quantize_activation",
    "scale_storage_dtype",
    "encode_scales",
    "decode_scales",
]


def _check_scale_range(s_raw: torch.Tensor, scheme: Scheme) -> None:
    fmt = scheme.weight_scale.format
    if fmt in ("f16", "bf16") or (fmt == "ue4m3" and not scheme.weight_global_scale):
        top = float(formats.get(fmt).max)
        worst = float(s_raw.max()) if s_raw.numel() else 0.0
        if worst > top:
            fix = "use scale_format='bf16' or 'f32'" if fmt == "f16" else "use scale_format='f32'"
            if fmt == "ue4m3":
                fix = "use a global scale (weight_global_scale=True) or f16/f32 scales"
            raise SchemeError(f"a weight scale of {worst:.4g} exceeds the largest {fmt} value {top:g} (the weights "
                              f"are too large for {fmt} scales); {fix}, or rescale the weight")


def _div(a: torch.Tensor, b: float) -> torch.Tensor:
    """a / b, correctly rounded on every device. (A Python-number divisor lets some backends multiply by the
    rounded reciprocal instead, which differs in the last bit; a same-device tensor divisor does not.)"""
    return a / torch.tensor(b, dtype=a.dtype, device=a.device)


def _as_scheme(scheme: str | Scheme) -> Scheme:
    return scheme if isinstance(scheme, Scheme) else get_scheme(scheme)


def _scalar(v, what: str, experts: int | None = None) -> torch.Tensor | None:
    """None, or float32: 0-dim, or ``[experts]`` (one value per expert) when ``experts`` is given."""
    if v is None:
        return None
    t = torch.as_tensor(v, dtype=torch.float32) if not isinstance(v, torch.Tensor) else v.to(torch.float32)
    if t.numel() != (1 if experts is None else experts):
        per = "" if experts is None else f" per expert ({experts})"
        raise ShapeError(f"{what} must hold one value{per}, got shape {tuple(t.shape)}")
    return t.reshape(() if experts is None else (experts,))


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


# ------------------------------------------------------------------------------------ QuantizedWeight
class QuantizedWeight(ExpertStack):
    """A quantized ``[N, K]`` weight in the canonical layout (see the module docstring), or E experts' weights
    stacked (``num_experts``: E, inferred from a 3-D ``packed`` when not given; None for a dense weight; the layout
    in :mod:`humming.core.quant.experts`)."""

    def __init__(self, scheme: str | Scheme, shape: tuple[int, int], packed: torch.Tensor, scales: torch.Tensor, *,
                 zeros: torch.Tensor | None = None, global_scale=None, g_idx: torch.Tensor | None = None,
                 bias: torch.Tensor | None = None, input_scale=None, validate: bool = True,
                 num_experts: int | None = None):
        self.scheme = _as_scheme(scheme)
        self.shape = (int(shape[0]), int(shape[1]))
        if num_experts is None and packed.dim() == 3:
            num_experts = packed.shape[0]
        self.num_experts = None if num_experts is None else int(num_experts)
        self.packed = packed
        self.scales = scales
        self.zeros = zeros
        self.global_scale = _scalar(global_scale, "global_scale", self.num_experts)
        if self.global_scale is not None:
            self.global_scale = self.global_scale.to(packed.device)
        self.g_idx = g_idx
        self.bias = bias
        self.input_scale = _scalar(input_scale, "input_scale", self.num_experts)
        if self.input_scale is not None:
            self.input_scale = self.input_scale.to(packed.device)
        if validate:
            validate_weight(self)

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def from_codes(cls, codes: torch.Tensor, scheme: str | Scheme, scales: torch.Tensor, **kw) -> QuantizedWeight:
        """Build from unpacked codes ``[N, K]`` (or ``[E, N, K]``: expert-stacked) with values in [0, 2**bits);
        keyword arguments as the constructor."""
        sch = _as_scheme(scheme)
        if codes.dim() not in (2, 3):
            raise ShapeError(f"codes must be [N, K] or [E, N, K], got shape {tuple(codes.shape)}")
        if codes.is_floating_point():
            raise ShapeError(f"codes must be an integer tensor, got {codes.dtype}")
        bits = sch.bits
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= 2**bits):
            raise ShapeError(f"codes of a {bits}-bit format must lie in [0, {2**bits}); "
                             f"got [{int(codes.min())}, {int(codes.max())}]")
        packed = pack_bits(codes, bits)
        return cls(sch, tuple(codes.shape[-2:]), packed, scales, **kw)

    @staticmethod
    def scale_shape(scheme: Scheme, n: int, k: int) -> tuple[int, int]:
        """The shape of one ``[N, K]`` weight's scales under ``scheme``."""
        return scale_shape(scheme, n, k)

    # ---- views ----------------------------------------------------------------------------------------
    @property
    def format(self) -> formats.Format:
        return self.scheme.weight_format

    @property
    def bits(self) -> int:
        return self.scheme.bits

    @property
    def device(self) -> torch.device:
        return self.packed.device

    @property
    def group_size(self) -> int | None:
        return self.scheme.weight_scale.group_size

    def codes(self) -> torch.Tensor:
        """uint8 ``[N, K]`` (stacked: ``[E, N, K]``) unsigned codes."""
        return unpack_bits(self.packed, self.bits, self.shape[1])

    def values(self) -> torch.Tensor:
        """float32 ``[N, K]`` (stacked: ``[E, N, K]``) decoded codes, before zeros and scales."""
        return self.format.decode(self.codes())

    def scale_values(self) -> torch.Tensor:
        """float32 scales, same shape as ``scales``."""
        return decode_scales(self.scales, self.scheme.weight_scale.format)

    def group_index(self) -> torch.Tensor:
        """int64 ``[K]``: the scale column of every input column (per expert: ``qw.expert(e).group_index()``)."""
        dense_only(self, "group_index")
        k = self.shape[1]
        ws = self.scheme.weight_scale
        if self.g_idx is not None:
            return self.g_idx.to(device=self.device, dtype=torch.int64)
        ar = torch.arange(k, device=self.device)
        if ws.granularity == "group":
            return ar // ws.group_size
        if ws.granularity == "block":
            return ar // ws.block[1]
        return torch.zeros_like(ar)

    def expand(self, t: torch.Tensor) -> torch.Tensor:
        """A per-group ``[rows, G]`` tensor (scales, zeros) broadcast to ``[N, K]`` (per expert:
        ``qw.expert(e).expand``)."""
        dense_only(self, "expand")
        n, k = self.shape
        ws = self.scheme.weight_scale
        if ws.granularity == "block":
            bn = ws.block[0]
            t = t.repeat_interleave(bn, dim=0)[:n]
        elif ws.granularity == "tensor":
            t = t.expand(n, 1)
        cols = self.group_index()
        if ws.granularity == "group" and self.g_idx is None:
            g = ws.group_size
            return t.unsqueeze(-1).expand(n, t.shape[1], g).reshape(n, k)
        return t[:, cols]

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``[N, K]`` weight (stacked: ``[E, N, K]``, each expert's dequantized alone): ((value(code) - zero) * scale)
        * global_scale in float32, cast to ``dtype``."""
        if self.num_experts is not None:
            return torch.stack([w.dequantize(dtype) for w in self.experts()])
        w = self.values()
        if self.zeros is not None:
            w = w - self.expand(self.zeros.to(torch.float32))
        w = w * self.expand(self.scale_values())
        if self.global_scale is not None:
            w = w * self.global_scale.to(w.device)
        return w.to(dtype)

    # ---- misc -------------------------------------------------------------------------------------------
    def _tensors(self) -> dict[str, torch.Tensor | None]:
        return {"packed": self.packed, "scales": self.scales, "zeros": self.zeros, "global_scale": self.global_scale,
                "g_idx": self.g_idx, "bias": self.bias, "input_scale": self.input_scale}

    def to(self, device) -> QuantizedWeight:
        """A copy on ``device`` (all tensors moved; dtypes kept)."""
        t = {k: (None if v is None else v.to(device)) for k, v in self._tensors().items()}
        return QuantizedWeight(self.scheme, self.shape, t["packed"], t["scales"], zeros=t["zeros"],
                               global_scale=t["global_scale"], g_idx=t["g_idx"], bias=t["bias"],
                               input_scale=t["input_scale"], validate=False, num_experts=self.num_experts)

    def natural_order(self) -> QuantizedWeight:
        """Itself, or the same weight without ``g_idx`` where that is the natural order (column k in group
        k // group_size, for every expert): what an act-order weight becomes once its columns are sorted by group."""
        ws = self.scheme.weight_scale
        if self.g_idx is None or ws.granularity != "group":
            return self
        natural = torch.arange(self.shape[1], device=self.g_idx.device) // ws.group_size
        if not torch.equal(self.g_idx.to(torch.int64), natural.expand_as(self.g_idx)):
            return self
        scheme = self.scheme.with_(act_order=False) if self.scheme.act_order else self.scheme
        return QuantizedWeight(scheme, self.shape, self.packed, self.scales, zeros=self.zeros,
                               global_scale=self.global_scale, g_idx=None, bias=self.bias,
                               input_scale=self.input_scale, validate=False, num_experts=self.num_experts)

    def with_scheme(self, scheme: str | Scheme) -> QuantizedWeight:
        """The same tensors under another scheme whose weight side is identical (e.g. to choose how
        activations are quantized for an imported weight: ``qw.with_scheme(qw.scheme.with_(act="e4m3"))``)."""
        new = _as_scheme(scheme)
        mine, theirs = self.scheme.to_flat(), new.to_flat()
        weight_keys = ("weight", "granularity", "group_size", "block", "scale_format", "global_scale", "zero_point",
                       "act_order")
        diff = [k for k in weight_keys if mine[k] != theirs[k]]
        if diff:
            raise SchemeError(f"scheme {new} differs from {self.scheme} on the weight side ({', '.join(diff)}); "
                              f"requantize instead")
        return QuantizedWeight(new, self.shape, self.packed, self.scales, zeros=self.zeros,
                               global_scale=self.global_scale, g_idx=self.g_idx, bias=self.bias,
                               input_scale=self.input_scale, validate=False, num_experts=self.num_experts)

    def with_activations(self, preset: str | Scheme) -> QuantizedWeight:
        """Take the activation side (act, act_scale) of ``preset`` (e.g. "w4a4-mxfp4")."""
        src = _as_scheme(preset)
        return self.with_scheme(self.scheme.with_(act=src.act, act_scale=src.act_scale))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._tensors().values() if t is not None)

    def __repr__(self) -> str:
        n, k = self.shape
        s = self.scheme
        ws = s.weight_scale
        e = self.num_experts
        parts = [f"{s}", f"{n}x{k}" if e is None else f"{e} experts x {n}x{k}",
                 f"{s.weight} codes int32{list(self.packed.shape)}",
                 f"scales {str(self.scales.dtype).replace('torch.', '')}{list(self.scales.shape)} ({ws.describe()})"]
        if self.zeros is not None:
            parts.append(f"{s.zero_point} zeros")
        if self.global_scale is not None:
            parts.append(f"global_scale={float(self.global_scale):.6g}" if e is None else "global_scale[E]")
        if self.g_idx is not None:
            parts.append("act-order g_idx")
        if self.bias is not None:
            parts.append("bias")
        act = "a16" if s.act is None else f"act {s.act} {s.act_scale.describe()}"
        parts.append(act)
        bias_bytes = 0 if self.bias is None else self.bias.numel() * self.bias.element_size()
        bpw = 8 * (self.nbytes - bias_bytes) / (n * k * (e or 1))
        parts.append(f"{bpw:.2f} bits/weight")
        parts.append(f"{_fmt_bytes(self.nbytes)} on {self.device}")
        return "QuantizedWeight(" + ", ".join(parts) + ")"


# ------------------------------------------------------------------------------------------ quantize
def _group_view(w: torch.Tensor, scheme: Scheme, perm: torch.Tensor | None):
    """w [N, K] -> (wg [A, B, L], ungroup(codes [A, B, L]) -> [N, K])."""
    n, k = w.shape
    ws = scheme.weight_scale
    if ws.granularity == "group":
        g = ws.group_size
        src = w if perm is None else w[:, perm]
        wg = src.reshape(n, k // g, g)

        def ungroup(c):
            c = c.reshape(n, k)
            if perm is None:
                return c
            out = torch.empty_like(c)
            out[:, perm] = c
            return out

        return wg, ungroup
    if ws.granularity == "channel":
        return w.reshape(n, 1, k), lambda c: c.reshape(n, k)
    if ws.granularity == "tensor":
        return w.reshape(1, 1, n * k), lambda c: c.reshape(n, k)
    bn, bk = ws.block
    nb, kb = -(-n // bn), -(-k // bk)
    pad = torch.nn.functional.pad(w, (0, kb * bk - k, 0, nb * bn - n))
    wg = pad.reshape(nb, bn, kb, bk).permute(0, 2, 1, 3).reshape(nb, kb, bn * bk)

    def ungroup_block(c):
        c = c.reshape(nb, kb, bn, bk).permute(0, 2, 1, 3).reshape(nb * bn, kb * bk)
        return c[:n, :k].contiguous()

    return wg, ungroup_block


def _one_bit_fixes(sch: Scheme) -> str:
    """Scheme strings that quantize to one bit (or close to it) with ``sch``'s group, where they are valid."""
    fixes = []
    for change in ({"weight": "uint1", "zero_point": "float"}, {"weight": "uint1", "zero_point": "int"},
                   {"weight": "ternary"}):
        try:
            fixes.append(repr(str(sch.with_(**change))))
        except SchemeError:  # (e.g. zero points with ue8m0 scales)
            pass
    return " or ".join(fixes) or "'w1a16' or 'w1a16-ternary'"


def _symmetric_max(fmt: formats.Format, sch: Scheme) -> float:
    """The largest code value symmetric scales map amax to; a format without a positive level (int1: -1 and 0) has
    none (scale = amax / 0), which is a SchemeError naming one-bit schemes that work."""
    if fmt.max <= 0:
        raise SchemeError(f"symmetric {fmt.name} weights cannot be quantized: {fmt.name} holds only {fmt.min} and "
                          f"{fmt.max}, so there is no positive level and the scale amax / {fmt.max} is undefined; "
                          f"for one bit use zero points (two levels placed on the weights' range) or ternary codes: "
                          f"scheme={_one_bit_fixes(sch)} (checkpoints with int1 codes still load)")
    return float(fmt.max)


def _mx_ceil_scale(amax: torch.Tensor, elem_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    """ue8m0 codes and values of 2**ceil(log2(amax / elem_max)) (cvt.rp of the fp32 quotient), saturated."""
    r = _div(amax.to(torch.float32), elem_max)
    zero = ~(r > 0)
    codes = formats.get("ue8m0").encode(torch.where(zero, torch.ones_like(r), r), saturate=True, rounding="ceil")
    return codes, formats.get("ue8m0").decode(codes)


def _resolve_order(act_order, scheme: Scheme, w: torch.Tensor) -> torch.Tensor | None:
    """The K permutation for act-order quantization, or None."""
    n, k = w.shape
    if act_order is None:
        act_order = scheme.act_order
    if isinstance(act_order, torch.Tensor):
        perm = act_order.to(device=w.device, dtype=torch.int64).reshape(-1)
        if perm.numel() != k or not torch.equal(torch.sort(perm).values, torch.arange(k, device=w.device)):
            raise ShapeError(f"act_order tensor must be a permutation of 0..{k - 1} (the order in which columns are "
                             f"grouped), got shape {tuple(act_order.shape)}")
        return perm
    if act_order:
        # Without a Hessian, order columns by descending L2 norm (GPTQ uses the Hessian diagonal).
        return torch.argsort(-w.norm(dim=0), stable=True)
    return None


def quantize(weight: torch.Tensor, scheme: str | Scheme, *, group_size: int | None = None,
             act_order: bool | torch.Tensor | None = None, bias: torch.Tensor | None = None) -> QuantizedWeight:
    """Quantize ``weight [N, K]`` (nn.Linear layout) with ``scheme`` (a Scheme or a preset/string name).

    ``weight [E, N, K]`` (mixture-of-experts) quantizes each expert exactly as a dense weight and returns them
    stacked (``num_experts == E``; :mod:`humming.core.quant.experts`); ``act_order`` may then be a permutation
    ``[K]`` shared by the experts or ``[E, K]``, and ``bias`` ``[E, N]`` (or ``[N]``, shared).

    group_size: override the scheme's group size: a positive int (None keeps the scheme's; zero, negative or
        non-int values are a SchemeError naming sizes that divide K and the per-channel scheme).
    A group of nonzero weights that dequantizes to all zeros (weights below the scales' smallest step) is reported
    by one LostGroupsWarning per call, with the count.
    act_order: True orders columns by descending norm before grouping (pass a permutation tensor ``[K]`` for a
        real GPTQ order, e.g. ``argsort(H.diag(), descending=True)``); False disables it; None follows the
        scheme. The result then carries ``g_idx`` with ``g_idx[perm[j]] = j // group_size``.
    bias: stored as-is on the result.
    """
    if isinstance(weight, torch.Tensor) and weight.dim() == 3:
        count = weight.shape[0]
        if count == 0:
            raise ShapeError(f"weight [E, N, K] has no experts (shape {tuple(weight.shape)})")
        orders, biases = per_expert(act_order, count, 1, "act_order"), per_expert(bias, count, 1, "bias")
        return QuantizedWeight.stack([quantize(w, scheme, group_size=group_size, act_order=o, bias=b)
                                      for w, o, b in zip(weight.unbind(0), orders, biases)])
    sch = _as_scheme(scheme)
    group_size = group_size_override(group_size, sch, weight.shape[-1] if isinstance(weight, torch.Tensor)
                                     and weight.dim() else None)
    if group_size is not None and group_size != sch.weight_scale.group_size:
        sch = sch.with_(group_size=group_size)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        raise ShapeError(f"weight must be a 2-D tensor [N, K] (out_features, in_features) or [E, N, K] (experts), "
                         f"got {getattr(weight, 'shape', type(weight))}")
    if not weight.is_floating_point():
        raise ShapeError(f"weight must be a float tensor, got {weight.dtype}")
    n, k = weight.shape
    if n == 0 or k == 0:
        raise ShapeError(f"weight must not be empty, got shape {tuple(weight.shape)}")
    ws = sch.weight_scale
    if ws.granularity == "group" and k % ws.group_size:
        raise indivisible_error(sch, k)
    w = weight.detach().to(torch.float32)
    if not bool(torch.isfinite(w).all()):
        raise ShapeError("weight contains NaN or infinity; quantization needs finite values")
    perm = _resolve_order(act_order, sch, w)
    if perm is not None and ws.granularity != "group":
        raise SchemeError(f"act_order needs group scales; {sch} has {ws.granularity} scales")
    sch = sch.with_(act_order=perm is not None) if sch.act_order != (perm is not None) else sch

    fmt = sch.weight_format
    qmax_code = (1 << fmt.bits) - 1
    wg, ungroup = _group_view(w, sch, perm)
    zeros = None
    gs_t = None

    if sch.zero_point is not None:
        lo, hi = wg.amin(-1), wg.amax(-1)
        if sch.zero_point == "int":
            lo, hi = lo.clamp(max=0), hi.clamp(min=0)
        rng = hi - lo
        s_raw = torch.where(rng > 0, _div(rng, qmax_code), torch.ones_like(rng))
        _check_scale_range(s_raw, sch)
        if sch.zero_point == "float" and fmt.bits == 1:
            # 1 bit: levels mean -/+ mean absolute deviation (min/max would spend both levels on outliers)
            mu = wg.double().mean(-1).float()  # float64 sums: the same result on every device
            mad = (wg - mu[..., None]).abs().double().mean(-1).float()
            s_raw = torch.where(mad > 0, 2 * mad, torch.ones_like(mad))
            lo = torch.where(mad > 0, mu - s_raw / 2, mu)  # a constant group is exact: level 0 is the mean
        stored, s = encode_scales(s_raw, ws.format)
        if sch.zero_point == "int":
            z = torch.round(-lo / s).clamp(0, qmax_code)
            q = (torch.round(wg / s[..., None]) + z[..., None]).clamp(0, qmax_code)
            zeros = z.to(torch.uint8)
        else:
            z = -lo / s
            q = torch.round(wg / s[..., None] + z[..., None]).clamp(0, qmax_code)
            zeros = z.to(torch.float32)
        codes = q.to(torch.uint8)
        deq = (q - z[..., None]) * s[..., None]
    else:
        amax = wg.abs().amax(-1)
        elem_max = _symmetric_max(fmt, sch)
        if sch.weight_global_scale:
            sf = formats.get(ws.format)
            tensor_amax = w.abs().amax()
            gs_t = _div(tensor_amax, elem_max * float(sf.max))
            gs_t = torch.where(gs_t > 0, gs_t, torch.ones_like(gs_t)).to(torch.float32)
        if ws.format == "ue8m0":
            stored, s = _mx_ceil_scale(amax, elem_max)
        else:
            s_raw = _div(amax, elem_max)
            if gs_t is not None:
                s_raw = s_raw / gs_t
            s_raw = torch.where(amax > 0, s_raw, torch.ones_like(s_raw))
            _check_scale_range(s_raw, sch)
            stored, s = encode_scales(s_raw, ws.format)
        denom = s if gs_t is None else s * gs_t
        codes = fmt.encode(wg / denom[..., None], saturate=True)
        deq = fmt.decode(codes) * denom[..., None]
    warn_lost_groups(wg, deq, sch)  # (a warning where whole groups of nonzero weights became zeros)

    codes = ungroup(codes)
    if ws.granularity == "channel":
        stored = stored.reshape(n, 1)
        if zeros is not None:
            zeros = zeros.reshape(n, 1)
    elif ws.granularity == "tensor":
        stored = stored.reshape(1, 1)
    g_idx = None
    if perm is not None:
        g = ws.group_size
        g_idx = torch.empty(k, dtype=torch.int32, device=w.device)
        g_idx[perm] = (torch.arange(k, device=w.device) // g).to(torch.int32)
    if bias is not None:
        if tuple(bias.shape) != (n,):
            raise ShapeError(f"bias must be [{n}], got {list(bias.shape)}")
        bias = bias.detach().to(w.device)
    return QuantizedWeight(sch, (n, k), pack_bits(codes, fmt.bits), stored.contiguous(),
                           zeros=None if zeros is None else zeros.contiguous(), global_scale=gs_t, g_idx=g_idx,
                           bias=bias)


# ----------------------------------------------------------------------------------- activations
@dataclass
class QuantizedActivation:
    """Quantized activations ``x [..., K]``.

    codes: uint8 ``[..., K]`` codes of ``format`` (``codes.view(torch.float8_e4m3fn)`` / ``.view(torch.int8)``
        gives the torch dtype where there is one).
    scales: stored scales: ``[..., 1]`` (dynamic_token), ``[..., K // group]`` (dynamic_group) or 0-dim
        (static_tensor); dtype as for weight scales of ``scale_format``.
    global_scale: None or float32 0-dim multiplier (two-level schemes).
    """

    codes: torch.Tensor
    scales: torch.Tensor
    global_scale: torch.Tensor | None
    format: str
    scale_format: str
    mode: str
    group_size: int | None
    dtype: torch.dtype  # dtype of the original x

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)

    def scale_values(self) -> torch.Tensor:
        return decode_scales(self.scales, self.scale_format)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """value(code) * scale (* global_scale) in float32, cast to ``dtype``."""
        v = formats.get(self.format).decode(self.codes)
        s = self.scale_values()
        if self.mode == "dynamic_group":
            v = (v.unflatten(-1, (-1, self.group_size)) * s[..., None]).flatten(-2)
        else:
            v = v * s
        if self.global_scale is not None:
            v = v * self.global_scale
        return v.to(dtype)

    def to(self, device) -> QuantizedActivation:
        gs = None if self.global_scale is None else self.global_scale.to(device)
        return QuantizedActivation(self.codes.to(device), self.scales.to(device), gs, self.format, self.scale_format,
                                   self.mode, self.group_size, self.dtype)

    def __repr__(self) -> str:
        g = f"{self.group_size}" if self.mode == "dynamic_group" else ""
        glob = f", global_scale={float(self.global_scale):.6g}" if self.global_scale is not None else ""
        return (f"QuantizedActivation({self.format} codes{list(self.codes.shape)}, {self.mode}{g} "
                f"{self.scale_format} scales{list(self.scales.shape)}{glob}, from {self.dtype})")


def quantize_activation(x: torch.Tensor, scheme: str | Scheme, *, scale=None, global_scale=None):
    """Quantize activations ``x [..., K]`` as ``scheme`` says.

    WnA16 schemes (``scheme.act is None``) return ``x`` itself, unchanged: the kernel consumes it as is.
    scale: the calibrated per-tensor scale of a static_tensor scheme (default: amax(x) / fmt.max, i.e.
        calibrated on this very x).
    global_scale: the fp32 global activation scale of a two-level scheme (default: computed dynamically as
        amax(x) / (fmt.max * scale_fmt.max)).
    """
    sch = _as_scheme(scheme)
    if sch.act is None:
        return x
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() < 1:
        raise ShapeError(f"activations must be a float tensor [..., K], got {getattr(x, 'dtype', type(x))}")
    fmt = sch.act_format
    a = sch.act_scale
    xf = x.detach().to(torch.float32)
    k = xf.shape[-1]
    elem_max = float(fmt.max)
    gs = None
    if a.mode == "static_tensor":
        if scale is None:
            amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=xf.device)
            s_raw = _div(amax, elem_max)
        else:
            s_raw = _scalar(scale, "scale").to(xf.device)
        stored, s = encode_scales(s_raw.reshape(()), a.format)
        codes = fmt.encode(xf / s, saturate=True)
        return QuantizedActivation(codes, stored, None, fmt.name, a.format, a.mode, None, x.dtype)
    if a.mode == "dynamic_token":
        amax = xf.abs().amax(-1, keepdim=True)
        if a.format == "ue8m0":
            stored, s = _mx_ceil_scale(amax, elem_max)
        else:
            stored, s = encode_scales(_div(amax, elem_max), a.format)
        codes = fmt.encode(xf / s, saturate=True)
        return QuantizedActivation(codes, stored, None, fmt.name, a.format, a.mode, None, x.dtype)
    # dynamic_group
    g = a.group_size
    if k % g:
        raise ShapeError(f"K={k} is not a multiple of the activation group size {g}")
    xg = xf.unflatten(-1, (k // g, g))
    amax = xg.abs().amax(-1)
    if a.global_scale:
        if global_scale is not None:
            gs = _scalar(global_scale, "global_scale").to(xf.device)
        else:
            sf = formats.get(a.format)
            t_amax = xf.abs().amax() if xf.numel() else torch.zeros((), device=xf.device)
            gs = _div(t_amax, elem_max * float(sf.max))
        gs = torch.where(gs > 0, gs, torch.ones_like(gs)).to(torch.float32)
    if a.format == "ue8m0":
        stored, s = _mx_ceil_scale(amax, elem_max)
    else:
        s_raw = _div(amax, elem_max)
        if gs is not None:
            s_raw = s_raw / gs
        s_raw = torch.where(amax > 0, s_raw, torch.ones_like(s_raw))
        stored, s = encode_scales(s_raw, a.format)
    denom = s if gs is None else s * gs
    codes = fmt.encode(xg / denom[..., None], saturate=True).flatten(-2)
    return QuantizedActivation(codes, stored, gs, fmt.name, a.format, a.mode, g, x.dtype)
