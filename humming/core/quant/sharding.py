"""Splitting a dense quantized linear weight over tensor-parallel ranks, without requantizing.

- column-parallel (the output features N split): rank ``r`` of ``world`` keeps rows ``[r N / world, (r + 1) N /
  world)``; concatenating the ranks' outputs (an all-gather) gives the whole output.
- row-parallel (the input features K split): rank ``r`` keeps columns ``[r K / world, (r + 1) K / world)`` and
  multiplies the same slice of x; summing the ranks' outputs (an all-reduce) gives the whole output, so only rank
  0 keeps the weight's own bias. The slice must hold whole scale groups; an act-order weight whose groups scatter
  over K is refused (humming.core.quant.slicing.slice_columns says how to order it first).

Mixture-of-experts layers split their intermediate size or their experts: humming.core.moe.sharding."""
from __future__ import annotations

import operator

from humming.core.quant.slicing import slice_columns, take_rows
from humming.errors import ShapeError

__all__ = ["PARALLEL", "checked_rank", "shard_linear"]

PARALLEL = ("column", "row")


def checked_rank(rank: int, world: int) -> tuple[int, int]:
    """(rank, world) as ints with 0 <= rank < world, or ShapeError."""
    try:
        rank, world = operator.index(rank), operator.index(world)
    except TypeError:
        raise ShapeError(f"rank and world must be integers, got {rank!r} and {world!r}") from None
    if world < 1 or not 0 <= rank < world:
        raise ShapeError(f"rank must lie in [0, world) with world >= 1, got rank {rank} of world {world}")
    return rank, world


def shard_linear(qw, rank: int, world: int, parallel: str):
    """Rank ``rank``'s part of a ``world``-way ``parallel`` ("column" or "row") split of the dense weight ``qw``."""
    rank, world = checked_rank(rank, world)
    if parallel not in PARALLEL:
        raise ShapeError(f"parallel must be one of {PARALLEL}, got {parallel!r}")
    if qw.num_experts is not None:
        raise ShapeError("shard_linear splits a dense weight; an expert-stacked one is split by "
                         "humming.core.moe.sharding")
    n, k = qw.shape
    size = n if parallel == "column" else k
    if size % world:
        what = "output features N" if parallel == "column" else "input features K"
        raise ShapeError(f"{parallel}-parallel over {world} ranks: the {what} ({size}) must be a multiple of {world}")
    part = size // world
    lo, hi = rank * part, (rank + 1) * part
    if parallel == "column":
        return take_rows(qw, [(lo, hi)], what=f"column-parallel rank {rank} of {world}")
    out = slice_columns(qw, lo, hi, what=f"row-parallel rank {rank} of {world}")
    if rank and out.bias is not None:  # (the all-reduce adds the bias once)
        out.bias = None
    return out
