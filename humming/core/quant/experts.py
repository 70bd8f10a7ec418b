"""Expert-stacked quantized weights (mixture-of-experts layers).

One :class:`~humming.core.quant.quantize.QuantizedWeight` holds the ``[N, K]`` weights of E experts of one scheme:
``qw.num_experts == E`` and every tensor of the dense layout (:mod:`humming.core.quant.quantize`) gains a leading
expert dimension, while ``qw.shape`` stays the per-expert ``(N, K)``:

``packed``        int32 ``[E, N, ceil(K * bits / 32)]``
``scales``        ``[E, *dense scale shape]`` (e.g. ``[E, N, K // group]``, ``[E, 1, 1]`` per tensor)
``zeros``         ``[E, N, G]`` or None
``global_scale``  float32 ``[E]`` or None (one multiplier per expert)
``input_scale``   float32 ``[E]`` or None (one calibrated activation scale per expert)
``g_idx``         int32 ``[E, K]`` or None (act-order: each expert has its own column order)
``bias``          ``[E, N]`` or None

Expert e is ``t[e]`` of each tensor. ``qw.expert(e)`` is that dense weight (views, no copy);
``QuantizedWeight.stack(weights)`` builds a stacked weight from dense ones of one scheme and shape;
``quantize(w [E, N, K], scheme)`` quantizes every expert exactly as a dense weight and stacks the results, so each
expert's codes and scales are bit for bit those of ``quantize(w[e], scheme)``. Dense weights have
``num_experts is None``. A stacked weight is not a GEMM operand of ``humming.gemm`` / ``reference_gemm``: expert
GEMMs are ``humming.moe_gemm`` / ``grouped_gemm`` / ``masked_gemm``.
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from humming.core.quant.weight_checks import validate_weight
from humming.errors import SchemeError, ShapeError

__all__ = ["ExpertStack", "dense_only", "per_expert", "scheme_differences"]

_TENSORS = ("packed", "scales", "zeros", "global_scale", "g_idx", "bias", "input_scale")


def scheme_differences(a, b) -> list[str]:
    """The fields (other than the name) on which two schemes differ."""
    fa, fb = a.to_flat(), b.to_flat()
    return [key for key in fa if key != "name" and fa[key] != fb.get(key)]


def dense_only(qw, what: str) -> None:
    """Raise ShapeError when ``qw`` is expert-stacked: ``what`` multiplies by one dense weight."""
    count = getattr(qw, "num_experts", None)
    if count is not None:
        n, k = qw.shape
        raise ShapeError(f"{what} multiplies by one dense [N, K] weight, but this weight stacks {count} experts of "
                         f"{n}x{k}: use humming.moe_gemm / grouped_gemm / masked_gemm for expert GEMMs, or "
                         f"qw.expert(e) for one expert's dense weight")


def _ids(indices: list[int]) -> str:
    shown = ", ".join(map(str, indices[:8]))
    return shown + (f", ... ({len(indices)} in all)" if len(indices) > 8 else "")


def per_expert(value, count: int, dense_dim: int, what: str) -> list:
    """A per-expert argument split into ``count`` values: None or a non-tensor is shared by every expert, a tensor
    of ``dense_dim`` dimensions too, and a tensor of ``dense_dim + 1`` dimensions gives expert e its row e."""
    if not isinstance(value, torch.Tensor):
        return [value] * count
    if value.dim() == dense_dim:
        return [value] * count
    if value.dim() == dense_dim + 1 and value.shape[0] == count:
        return list(value.unbind(0))
    raise ShapeError(f"{what} of {count} experts must have {dense_dim} dimensions (shared by every expert) or "
                     f"{dense_dim + 1} with {count} first (one per expert), got shape {list(value.shape)}")


class ExpertStack:
    """The expert-stacked side of QuantizedWeight (a mixin: it builds weights of the class it is part of)."""

    num_experts: int | None

    def expert(self, e: int):
        """Expert ``e``'s dense QuantizedWeight: views of this weight's tensors (no copy), checked for shapes and
        dtypes only (the stacked weight's values were checked when it was built)."""
        count = self.num_experts
        if count is None:
            raise ShapeError("expert(e) needs an expert-stacked weight; this one is dense (num_experts is None)")
        e = operator.index(e)
        if not 0 <= e < count:
            raise ShapeError(f"expert {e} is out of range [0, {count})")
        t = {name: (None if v is None else v[e]) for name, v in self._tensors().items()}
        qw = type(self)(self.scheme, self.shape, t.pop("packed"), t.pop("scales"), validate=False, **t)
        validate_weight(qw, values=False)
        return qw

    def experts(self) -> list:
        """Every expert's dense QuantizedWeight (views), in order."""
        if self.num_experts is None:
            raise ShapeError("experts() needs an expert-stacked weight; this one is dense (num_experts is None)")
        return [self.expert(e) for e in range(self.num_experts)]

    @classmethod
    def stack(cls, weights: Sequence):
        """One expert-stacked weight from dense weights of one scheme and shape (expert e = ``weights[e]``); the
        tensors are copied into new stacked ones. ShapeError for differing shapes, devices or dtypes, stacked
        inputs, or an optional tensor (zeros, global_scale, g_idx, bias, input_scale) given for some experts
        only; SchemeError for differing schemes."""
        ws = list(weights)
        if not ws:
            raise ShapeError("stack needs at least one expert's weight")
        first = ws[0]
        for i, w in enumerate(ws):
            if not isinstance(w, cls):
                raise ShapeError(f"stack takes QuantizedWeights; item {i} is a {type(w).__name__}")
            if w.num_experts is not None:
                raise ShapeError(f"item {i} is already expert-stacked ({w.num_experts} experts); stack dense weights "
                                 f"(qw.experts() splits a stacked one)")
            if w.shape != first.shape:
                raise ShapeError(f"expert {i} is {w.shape[0]}x{w.shape[1]} but expert 0 is "
                                 f"{first.shape[0]}x{first.shape[1]}: the experts of a stacked weight share one shape")
            diff = scheme_differences(first.scheme, w.scheme)
            if diff:
                raise SchemeError(f"expert {i} has scheme {w.scheme}, expert 0 {first.scheme} (they differ on "
                                  f"{', '.join(diff)}): the experts of a stacked weight share one scheme")
            if w.device != first.device:
                raise ShapeError(f"expert {i} is on {w.device}, expert 0 on {first.device}: move them to one device")
        stacked: dict[str, torch.Tensor | None] = {}
        for name in _TENSORS:
            parts = [w._tensors()[name] for w in ws]
            given = [i for i, p in enumerate(parts) if p is not None]
            if not given:
                stacked[name] = None
                continue
            if len(given) != len(parts):
                missing = [i for i, p in enumerate(parts) if p is None]
                raise ShapeError(f"{name} is given for experts {_ids(given)} but not for experts {_ids(missing)}: "
                                 f"give it for every expert or for none")
            dtypes = sorted({str(p.dtype).replace("torch.", "") for p in parts})
            if len(dtypes) > 1:
                raise ShapeError(f"{name} has different dtypes across experts ({', '.join(dtypes)}); convert them "
                                 f"to one")
            stacked[name] = torch.stack(parts)
        return cls(first.scheme, first.shape, stacked.pop("packed"), stacked.pop("scales"), num_experts=len(ws),
                   **stacked)
