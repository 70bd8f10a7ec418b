"""Splitting a mixture-of-experts layer's quantized weights over ranks, without requantizing.

``w13``: expert-stacked ``[E, 2I, H]`` (gate rows ``[0, I)``, up rows ``[I, 2I)``; ``interleaved``: gate row ``i``
at ``2i``, up row ``i`` at ``2i + 1``); ``w2``: expert-stacked ``[E, H, I]``; their own biases (``qw.bias``) travel
with them. Each function returns one rank's weights; summing the ranks' layer outputs (the all-reduce of a
distributed MoE layer) gives the unsharded layer's output.

- :func:`tensor_parallel` splits the intermediate size I: rank ``r`` of ``world`` keeps intermediate channels
  ``[r * I / world, (r + 1) * I / world)``: those gate and up rows of w13 (and of its bias) and those columns (K) of
  w2. The down projection's bias is added once, so only rank 0 keeps it. The column split must hold whole scale
  groups of w2 (``I / world`` a multiple of its group size; :mod:`humming.core.quant.slicing`). An act-order w2
  (``g_idx``) scatters its groups over I, so the intermediate channels of every expert are first ordered by w2's
  group (w13's rows and w2's columns by one permutation, which leaves the layer's output unchanged); its groups
  then lie in whole ``group_size`` runs, split like contiguous groups.
  Where w2 quantizes its input per token (``dynamic_token``), each rank quantizes only its slice of the
  intermediate activations, so the sum matches the unsharded layer up to that activation quantization, as in any
  tensor-parallel split; per-tensor static, weight-only and group-wise input quantization with groups inside a slice
  match exactly.
- :func:`expert_parallel` gives rank ``r`` the experts ``[r * E / world, (r + 1) * E / world)`` and an
  ``expert_map`` (global expert id -> local id, -1 for the other ranks' experts); a layer that already has an
  expert map is split among its local experts and the maps compose.
"""
from __future__ import annotations

import torch

from humming.core.quant.sharding import checked_rank
from humming.core.quant.slicing import permute_columns, permute_rows, slice_columns, slice_experts, take_rows
from humming.errors import ShapeError

__all__ = ["tensor_parallel", "expert_parallel", "order_by_group"]


def _intermediate(w13, w2) -> int:
    for name, qw in (("w13", w13), ("w2", w2)):
        if getattr(qw, "num_experts", None) is None:
            raise ShapeError(f"{name} must be an expert-stacked QuantizedWeight (humming.quantize(w [E, N, K]))")
    if w13.num_experts != w2.num_experts or w13.shape[0] != 2 * w2.shape[1] or w13.shape[1] != w2.shape[0]:
        raise ShapeError(f"w13 must be [E, 2I, H] and w2 [E, H, I] with one E; got w13 [{w13.num_experts}, "
                         f"{w13.shape[0]}, {w13.shape[1]}], w2 [{w2.num_experts}, {w2.shape[0]}, {w2.shape[1]}]")
    return w2.shape[1]


def order_by_group(w13, w2, *, interleaved: bool = False):
    """``(w13, w2)`` with every expert's intermediate channels ordered by w2's act-order group (stable), so that
    w2's ``g_idx`` is non-decreasing; the layer computes the same output. Unchanged when w2 has no ``g_idx``.
    SchemeError where w13's scales cannot follow its rows (block scales)."""
    inter = _intermediate(w13, w2)
    if w2.g_idx is None:
        return w13, w2
    perm = torch.argsort(w2.g_idx.to(torch.int64), dim=-1, stable=True)
    if interleaved:
        rows = torch.stack([2 * perm, 2 * perm + 1], dim=-1).flatten(-2)
    else:
        rows = torch.cat([perm, perm + inter], dim=-1)
    return permute_rows(w13, rows), permute_columns(w2, perm)


def tensor_parallel(w13, w2, rank: int, world: int, *, interleaved: bool = False):
    """Rank ``rank``'s ``(w13, w2)`` of a ``world``-way split of the intermediate size I (module docstring).
    ShapeError when I is not a multiple of ``world`` or a slice would split a scale group."""
    rank, world = checked_rank(rank, world)
    inter = _intermediate(w13, w2)
    if inter % world:
        raise ShapeError(f"tensor parallelism splits the intermediate size I={inter} over {world} ranks; "
                         f"I must be a multiple of the world size")
    if world == 1:
        return w13, w2
    w13, w2 = order_by_group(w13, w2, interleaved=interleaved)
    part = inter // world
    a, b = rank * part, (rank + 1) * part
    where = f"rank {rank} of {world} (I={inter} split into {part}-channel slices)"
    rows = [(2 * a, 2 * b)] if interleaved else [(a, b), (inter + a, inter + b)]
    w13_r = take_rows(w13, rows, what=f"w13 of {where}")
    w2_r = slice_columns(w2, a, b, what=f"w2 of {where}")
    if rank:
        w2_r.bias = None  # the down projection's bias is added once, by rank 0
    return w13_r, w2_r


def expert_parallel(w13, w2, rank: int, world: int, expert_map: torch.Tensor | None = None):
    """Rank ``rank``'s ``(w13, w2, expert_map)`` of a ``world``-way split of the experts (module docstring).
    ``expert_map``: the layer's own map (global -> its local ids), composed with the split; None: the layer holds
    every expert. ShapeError when E is not a multiple of ``world``."""
    rank, world = checked_rank(rank, world)
    _intermediate(w13, w2)
    count = w13.num_experts
    if count % world:
        raise ShapeError(f"expert parallelism splits {count} experts over {world} ranks; the number of experts "
                         f"must be a multiple of the world size")
    part = count // world
    start, stop = rank * part, (rank + 1) * part
    if expert_map is None:
        mapped = torch.full((count,), -1, dtype=torch.int32, device=w13.device)
        mapped[start:stop] = torch.arange(part, dtype=torch.int32, device=w13.device)
    else:
        if not isinstance(expert_map, torch.Tensor) or expert_map.dim() != 1 or expert_map.is_floating_point():
            raise ShapeError(f"expert_map must be an integer tensor [num_global_experts], got "
                             f"{getattr(expert_map, 'dtype', type(expert_map).__name__)}")
        here = (expert_map >= start) & (expert_map < stop)
        mapped = torch.where(here, expert_map - start, torch.full_like(expert_map, -1))
    return slice_experts(w13, start, stop), slice_experts(w2, start, stop), mapped
