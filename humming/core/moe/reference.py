"""The MoE oracle: what the MoE kernels are checked against (float32 results; loops over experts are fine here).

Experts' weights (``weights``) come in three spellings, each ``[N, K]`` per expert:

- a float tensor ``[E, N, K]``;
- a list or tuple of per-expert dense :class:`~humming.QuantizedWeight` (or float ``[N, K]`` tensors);
- a stacked quantized weight: any object with ``num_experts`` (not None) and ``expert(e)`` returning expert ``e``'s
  dense :class:`~humming.QuantizedWeight`.

Each expert's rows go through :func:`humming.reference_gemm` (quantized experts, including its activation
quantization and the weight's own bias) or a float64-accumulated product rounded once to float32 (float experts).
Per-row activation scales (``dynamic_token``, ``dynamic_group``) do not depend on which rows an expert gets.
Tensor-level activation quantities that the weight does not carry (a ``static_tensor`` scale or a two-level global
scale with no calibrated ``input_scale``) are calibrated once over all rows that some expert multiplies, as a kernel
that quantizes its input once does, and passed to every expert.

Forms: :func:`reference_moe_gemm` (indexed: ``topk_ids`` per token), :func:`reference_grouped_gemm` (rows grouped
per expert by offsets), :func:`reference_masked_gemm` (``[E, cap, K]`` with a count per expert), and the full expert
MLP :func:`reference_moe_layer`. Rows no expert multiplies are zero.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from humming.core.moe.routing import check_ids
from humming.core.quant.quantize import QuantizedWeight, quantize_activation
from humming.core.quant.reference import reference_gemm
from humming.errors import SchemeError, ShapeError

__all__ = [
    "reference_moe_gemm",
    "reference_grouped_gemm",
    "reference_masked_gemm",
    "reference_moe_layer",
    "reference_activation",
    "ACTIVATIONS",
]

ACTIVATIONS = ("silu", "swiglu_clamped")


# ------------------------------------------------------------------------------------------------- experts
class _Experts:
    """Uniform access to the experts' weights, whichever spelling the caller used."""

    def __init__(self, weights: object, what: str):
        self.what = what
        if isinstance(weights, torch.Tensor):
            if not weights.is_floating_point() or weights.dim() != 3:
                raise ShapeError(f"{what} as a tensor must be float [E, N, K], got {weights.dtype} "
                                 f"{list(weights.shape)}")
            self.items: Sequence[object] = list(weights.unbind(0))
        elif isinstance(weights, (list, tuple)):
            self.items = list(weights)
        elif getattr(weights, "num_experts", None) is not None and callable(getattr(weights, "expert", None)):
            self.items = [weights.expert(e) for e in range(int(weights.num_experts))]
        else:
            raise ShapeError(f"{what} must be a float tensor [E, N, K], a list of per-expert QuantizedWeight, or a "
                             f"stacked QuantizedWeight (num_experts set); got {type(weights).__name__}")
        if not self.items:
            raise ShapeError(f"{what} has no experts")
        shapes = {self._shape(e, w) for e, w in enumerate(self.items)}
        if len(shapes) != 1:
            raise ShapeError(f"{what}: experts have different shapes {sorted(shapes)}; all must be [N, K] alike")
        self.n, self.k = shapes.pop()

    def _shape(self, e: int, w: object) -> tuple[int, int]:
        if isinstance(w, torch.Tensor):
            if not w.is_floating_point() or w.dim() != 2:
                raise ShapeError(f"{self.what}[{e}] must be a float [N, K] tensor, got {w.dtype} {list(w.shape)}")
            return int(w.shape[0]), int(w.shape[1])
        if isinstance(w, QuantizedWeight):
            if getattr(w, "num_experts", None) is not None:
                raise ShapeError(f"{self.what}[{e}] is a stacked QuantizedWeight; pass it alone, not in a list")
            return w.shape
        raise ShapeError(f"{self.what}[{e}] must be a QuantizedWeight or a float [N, K] tensor, "
                         f"got {type(w).__name__}")

    @property
    def num_experts(self) -> int:
        return len(self.items)

    def calibration(self, e: int, used: torch.Tensor):
        """The tensor-level activation quantity expert ``e`` needs and its weight lacks, calibrated over ``used``
        (every row some expert multiplies); None where there is none."""
        w = self.items[e]
        if not isinstance(w, QuantizedWeight) or w.scheme.act is None or w.input_scale is not None:
            return None
        sch = w.scheme
        if sch.act_scale.mode == "static_tensor":
            return quantize_activation(used, sch).scale_values().reshape(())
        if sch.act_scale.global_scale:
            return quantize_activation(used, sch).global_scale
        return None

    def gemm(self, e: int, rows: torch.Tensor, used: torch.Tensor) -> torch.Tensor:
        """float32 ``rows [r, K] @ W_e^T``: ``[r, N]``."""
        w = self.items[e]
        if isinstance(w, QuantizedWeight):
            return reference_gemm(rows, w, out_dtype=torch.float32, input_scale=self.calibration(e, used))
        y = rows.to(torch.float64) @ w.to(device=rows.device, dtype=torch.float64).t()
        return y.to(torch.float32)


def _run(x: torch.Tensor, experts: _Experts, rows: list[torch.Tensor], outs: list[torch.Tensor],
         num_out: int) -> torch.Tensor:
    """float32 ``[num_out, N]``: ``out[outs[e]] = x[rows[e]] @ W_e^T`` for each expert; other rows zero."""
    out = torch.zeros(num_out, experts.n, dtype=torch.float32, device=x.device)
    every = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.int64, device=x.device)
    if every.numel() == 0:
        return out
    used = x[torch.unique(every)]
    for e, (r, o) in enumerate(zip(rows, outs)):
        if r.numel():
            out[o] = experts.gemm(e, x[r], used)
    return out


# ------------------------------------------------------------------------------------------------- checks
def _check_x(x: object, dim: int, hint: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ShapeError(f"x must be a float tensor {hint}, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() != dim:
        raise ShapeError(f"x must be {dim}-D {hint}, got shape {tuple(x.shape)}")
    return x


def _check_k(x: torch.Tensor, experts: _Experts) -> None:
    if x.shape[-1] != experts.k:
        raise ShapeError(f"x has K={x.shape[-1]} features, {experts.what} expects K={experts.k} "
                         f"(x {tuple(x.shape)}, experts {experts.num_experts} x {experts.n} x {experts.k})")


def _check_int(t: object, what: str, dim: int, hint: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.int32, torch.int64) or t.dim() != dim:
        raise ShapeError(f"{what} must be an int32/int64 {dim}-D tensor {hint}, got "
                         f"{getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))}")
    return t


def _check_topk_weights(topk_weights: object, shape: tuple[int, int]) -> torch.Tensor:
    if not isinstance(topk_weights, torch.Tensor) or not topk_weights.is_floating_point():
        raise ShapeError(f"topk_weights must be a float tensor [T, top_k], "
                         f"got {getattr(topk_weights, 'dtype', type(topk_weights).__name__)}")
    if tuple(topk_weights.shape) != shape:
        raise ShapeError(f"topk_weights must be {list(shape)} like topk_ids, got {list(topk_weights.shape)}")
    return topk_weights


def _per_expert_bias(bias: torch.Tensor | None, what: str, shape: tuple[int, int]) -> torch.Tensor | None:
    if bias is None:
        return None
    if not isinstance(bias, torch.Tensor) or not bias.is_floating_point() or tuple(bias.shape) != shape:
        raise ShapeError(f"{what} must be a float tensor {list(shape)}, got "
                         f"{getattr(bias, 'dtype', type(bias).__name__)} {list(getattr(bias, 'shape', []))}")
    return bias


# ------------------------------------------------------------------------------------------------- indexed form
def _moe_gemm_fp32(x: torch.Tensor, experts: _Experts, topk_ids: torch.Tensor, gather: bool) -> torch.Tensor:
    num_tokens, top_k = topk_ids.shape
    ids = topk_ids.reshape(-1).to(device=x.device, dtype=torch.int64)
    slots = [torch.nonzero(ids == e).flatten() for e in range(experts.num_experts)]
    rows = [s // top_k for s in slots] if gather else slots
    out = _run(x, experts, rows, slots, num_tokens * top_k)
    return out.reshape(num_tokens, top_k, experts.n)


def _validate_moe(x: object, experts: _Experts, topk_ids: object, gather: bool) -> torch.Tensor:
    _check_int(topk_ids, "topk_ids", 2, "[T, top_k]")
    check_ids(topk_ids, experts.num_experts)
    num_tokens, top_k = (int(d) for d in topk_ids.shape)
    rows = num_tokens if gather else num_tokens * top_k
    hint = "[T, K]" if gather else "[T * top_k, K] (one row per slot)"
    x = _check_x(x, 2, hint)
    if x.shape[0] != rows:
        raise ShapeError(f"x must be {hint} with {rows} rows for topk_ids {list(topk_ids.shape)}, "
                         f"got {x.shape[0]} rows")
    _check_k(x, experts)
    return x


def reference_moe_gemm(x: torch.Tensor, weights: object, topk_ids: torch.Tensor,
                       topk_weights: torch.Tensor | None = None, *, gather: bool = True) -> torch.Tensor:
    """The indexed MoE GEMM: ``out[t, j] = topk_weights[t, j] * (row(t, j) @ W_{topk_ids[t, j]}^T)``, ``[T, top_k, N]``.

    x: ``[T, K]`` with gather=True (slot ``(t, j)`` reads row ``x[t]``: the gate/up projection), or
        ``[T * top_k, K]`` with gather=False (slot ``s = t * top_k + j`` reads row ``x[s]``: the down projection).
    weights: see the module docstring. topk_ids: int32/int64 ``[T, top_k]`` expert ids in ``[0, E)``; -1 gives a
        zero row; other ids raise :class:`ShapeError`. topk_weights: float ``[T, top_k]`` or None (no scaling).
    Computed in float32 (see the module docstring), returned in x's dtype.
    """
    experts = _Experts(weights, "weights")
    x = _validate_moe(x, experts, topk_ids, gather)
    out = _moe_gemm_fp32(x, experts, topk_ids, gather)
    if topk_weights is not None:
        out = out * _check_topk_weights(topk_weights, tuple(topk_ids.shape)).to(out)[..., None]
    return out.to(x.dtype)


# ------------------------------------------------------------------------------------------------- grouped forms
def reference_grouped_gemm(x: torch.Tensor, weights: object, expert_offsets: torch.Tensor) -> torch.Tensor:
    """The grouped contiguous GEMM: rows ``[offsets[e], offsets[e + 1])`` of ``x [rows, K]`` times expert ``e``;
    ``[rows, N]`` in x's dtype, zero outside ``[offsets[0], offsets[E])``.

    expert_offsets: int32/int64 ``[E + 1]``, non-decreasing, within ``[0, rows]`` (else :class:`ShapeError`).
    """
    experts = _Experts(weights, "weights")
    x = _check_x(x, 2, "[rows, K]")
    _check_k(x, experts)
    _check_int(expert_offsets, "expert_offsets", 1, "[E + 1]")
    e = experts.num_experts
    if expert_offsets.shape[0] != e + 1:
        raise ShapeError(f"expert_offsets must be [{e + 1}] for {e} experts, got {list(expert_offsets.shape)}")
    offsets = [int(v) for v in expert_offsets.tolist()]
    num_rows = int(x.shape[0])
    if any(b < a for a, b in zip(offsets, offsets[1:])) or offsets[0] < 0 or offsets[-1] > num_rows:
        raise ShapeError(f"expert_offsets must be non-decreasing within [0, {num_rows}], got {offsets}")
    rows = [torch.arange(a, b, device=x.device) for a, b in zip(offsets, offsets[1:])]
    return _run(x, experts, rows, rows, num_rows).to(x.dtype)


def reference_masked_gemm(x: torch.Tensor, weights: object, counts: torch.Tensor) -> torch.Tensor:
    """The masked grouped GEMM: ``out[e, i] = x[e, i] @ W_e^T`` for ``i < counts[e]``, zero rows after;
    ``[E, cap, N]`` in x's dtype.

    x: ``[E, cap, K]``. counts: int32/int64 ``[E]``, non-negative (else :class:`ShapeError`); a count above
    ``cap`` is clamped to ``cap``, as :func:`humming.core.moe.routing.routing_from_counts` does.
    """
    experts = _Experts(weights, "weights")
    x = _check_x(x, 3, "[E, cap, K]")
    _check_k(x, experts)
    e, cap = experts.num_experts, int(x.shape[1])
    if x.shape[0] != e:
        raise ShapeError(f"x must be [E={e}, cap, K] for {e} experts, got {list(x.shape)}")
    _check_int(counts, "counts", 1, "[E]")
    if counts.shape[0] != e:
        raise ShapeError(f"counts must be [{e}], got {list(counts.shape)}")
    values = [int(v) for v in counts.tolist()]
    if min(values) < 0:
        raise ShapeError(f"counts must be non-negative, got {values}")
    rows = [torch.arange(i * cap, i * cap + min(c, cap), device=x.device) for i, c in enumerate(values)]
    out = _run(x.reshape(e * cap, -1), experts, rows, rows, e * cap)
    return out.reshape(e, cap, experts.n).to(x.dtype)


# ------------------------------------------------------------------------------------------------- the expert MLP
def reference_activation(h: torch.Tensor, activation: str = "silu", *, interleaved: bool = False,
                         alpha: float = 1.702, limit: float = 7.0) -> torch.Tensor:
    """The gated activation between the two GEMMs: ``h [..., 2I]`` -> float32 ``[..., I]``.

    Gate and up halves: ``gate = h[..., :I]``, ``up = h[..., I:]``; with ``interleaved`` (the published gpt-oss
    checkpoints' layout of ``mlp1`` / ``gate_up_proj``) ``gate = h[..., 0::2]``, ``up = h[..., 1::2]``.

    - ``"silu"``: ``silu(gate) * up`` with ``silu(g) = g * sigmoid(g)``.
    - ``"swiglu_clamped"`` (gpt-oss): ``g = min(gate, limit)``, ``u = clamp(up, -limit, limit)``,
      ``g * sigmoid(alpha * g) * (u + 1)``.
    """
    if activation not in ACTIVATIONS:
        raise SchemeError(f"activation {activation!r} is unknown; use one of {ACTIVATIONS}")
    if not isinstance(h, torch.Tensor) or not h.is_floating_point() or h.dim() < 1 or h.shape[-1] % 2:
        raise ShapeError(f"h must be a float tensor [..., 2 * I] with an even last dimension, got "
                         f"{getattr(h, 'dtype', type(h).__name__)} {list(getattr(h, 'shape', []))}")
    h = h.to(torch.float32)
    half = h.shape[-1] // 2
    gate, up = (h[..., 0::2], h[..., 1::2]) if interleaved else (h[..., :half], h[..., half:])
    if activation == "silu":
        return torch.nn.functional.silu(gate) * up
    gate = gate.clamp(max=limit)
    up = up.clamp(min=-limit, max=limit)
    return gate * torch.sigmoid(alpha * gate) * (up + 1)


def reference_moe_layer(x: torch.Tensor, w13: object, w2: object, topk_ids: torch.Tensor,
                        topk_weights: torch.Tensor, *, activation: str = "silu", interleaved: bool = False,
                        w13_bias: torch.Tensor | None = None, w2_bias: torch.Tensor | None = None,
                        swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0) -> torch.Tensor:
    """The mixture-of-experts MLP, ``[T, H]`` in x's dtype::

        h[t, j]  = x[t] @ W13_e^T + b13_e                        e = topk_ids[t, j]; W13_e [2I, H]
        a[t, j]  = act(h[t, j])                                  see reference_activation; [I]
        o[t, j]  = a[t, j] @ W2_e^T + b2_e                       W2_e [H, I]
        y[t]     = sum_j topk_weights[t, j] * o[t, j]            slots with id -1 contribute nothing

    w13: experts ``[E, 2I, H]`` (rows ``[0, I)`` gate, ``[I, 2I)`` up; interleaved: even rows gate, odd rows up, the
    gpt-oss checkpoint layout); w2: experts ``[E, H, I]``; either in any spelling of the module docstring (a
    quantized expert's own bias is added as well, by reference_gemm). w13_bias ``[E, 2I]``, w2_bias ``[E, H]``:
    optional float biases (gpt-oss has both). activation: ``"silu"`` or ``"swiglu_clamped"`` with ``swiglu_alpha``
    and ``swiglu_limit``. Intermediates stay float32; the down projection's activation quantization (if its scheme
    has one) applies to ``a``.
    """
    e13, e2 = _Experts(w13, "w13"), _Experts(w2, "w2")
    if e13.num_experts != e2.num_experts:
        raise ShapeError(f"w13 has {e13.num_experts} experts, w2 has {e2.num_experts}")
    if e13.n % 2:
        raise ShapeError(f"w13 must be [E, 2 * I, H] (gate and up); its N={e13.n} is odd")
    inter = e13.n // 2
    if (e2.n, e2.k) != (e13.k, inter):
        raise ShapeError(f"w2 must be [E, H={e13.k}, I={inter}] to match w13 [E, {e13.n}, {e13.k}], "
                         f"got [E, {e2.n}, {e2.k}]")
    x = _validate_moe(x, e13, topk_ids, True)
    num_tokens, top_k = (int(d) for d in topk_ids.shape)
    weights = _check_topk_weights(topk_weights, (num_tokens, top_k))
    b13 = _per_expert_bias(w13_bias, "w13_bias", (e13.num_experts, e13.n))
    b2 = _per_expert_bias(w2_bias, "w2_bias", (e2.num_experts, e2.n))

    ids = topk_ids.to(device=x.device, dtype=torch.int64)
    safe = ids.clamp(min=0)
    h = _moe_gemm_fp32(x, e13, topk_ids, True)
    if b13 is not None:
        h = h + b13.to(device=x.device, dtype=torch.float32)[safe]
    a = reference_activation(h, activation, interleaved=interleaved, alpha=swiglu_alpha, limit=swiglu_limit)
    o = _moe_gemm_fp32(a.reshape(num_tokens * top_k, inter), e2, topk_ids, False)
    if b2 is not None:
        o = o + b2.to(device=x.device, dtype=torch.float32)[safe]
    scale = torch.where(ids >= 0, weights.to(device=x.device, dtype=torch.float32), 0.0)
    return (o * scale[..., None]).sum(1).to(x.dtype)


def local_ids(topk_ids: torch.Tensor, expert_map: torch.Tensor) -> torch.Tensor:
    """Global expert ids mapped to local ones through ``expert_map`` (-1, and ids outside the map: -1)."""
    ids = topk_ids.long()
    table = expert_map.to(device=ids.device, dtype=torch.long)
    inside = (ids >= 0) & (ids < table.numel())
    return torch.where(inside, table[ids.clamp(0, max(table.numel() - 1, 0))], torch.full_like(ids, -1))
