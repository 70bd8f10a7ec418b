"""Mixture-of-experts routing: which slots each expert multiplies, in the block layout an indexed MoE kernel reads.

A *slot* is one (token, choice) pair: slot ``s = token * top_k + j`` is token ``token``'s ``j``-th expert choice
(``topk_ids[token, j]``). :func:`route` sorts the slots by (local) expert, stably (ascending slot id within an
expert), and pads each expert's run to a multiple of ``block_m`` with the sentinel ``num_slots``, so that every block
of ``block_m`` consecutive entries belongs to one expert::

    sorted_ids  [capacity]            slot ids, expert 0's run, expert 1's run, ... then sentinels
    expert_ids  [capacity // block_m] the local expert of each block; -1 past the used length
    num_padded  [1]                   the used length (sum over experts of their padded run)

Two more forms produce the same :class:`Routing` where rows are already grouped per expert (slot id = row,
``top_k = 1``): :func:`routing_from_offsets` (grouped contiguous: expert ``e`` owns rows
``[offsets[e], offsets[e + 1])``) and :func:`routing_from_counts` (masked: ``x`` is ``[E, cap, K]`` flattened to
``[E * cap, K]``, row ``e * cap + i`` is valid iff ``i < counts[e]``).

Every function here runs on the tensors' own device with no host synchronisation. On a CUDA device each form is one
launch of a generated kernel (:mod:`humming.core.moe.route_kernel`) where its sizes fit that one-block kernel
(``fits_route`` / ``fits_layout`` there: up to 1024 experts and 131072 slots, or 2**24 entries for the grouped forms),
with the same result. Elsewhere (CPU, ``meta``, larger sizes, a device without the kernel) the torch ops below build
it: no ``.item()``, ``.tolist()``, boolean-mask indexing, ``nonzero``, ``bincount`` or ``unique``, no loop over
experts or tokens; only ``scatter_add_``, ``cumsum``, ``cummax``, stable ``sort``, ``searchsorted``, ``gather`` and
arithmetic. Every output size follows from the input shapes (see :func:`capacity`), so routing captures in a CUDA
graph and runs on the ``meta`` device. Ids cannot be range-checked without a synchronisation; routing drops out-of-range ids (like -1)
instead of failing, and :func:`check_ids` / :func:`check_expert_map` check them for debugging and tests.

``block_m`` must be a positive power of two (the kernels' token tiles are).
"""
from __future__ import annotations

import torch

from humming.core.moe import route_kernel
from humming.core.moe.routing_base import (
    Routing,
    capacity,
    check_block_m,
    check_count,
    check_int_tensor,
    check_size,
    route_arguments,
)
from humming.errors import ShapeError

__all__ = [
    "Routing",
    "capacity",
    "route",
    "routing_from_offsets",
    "routing_from_counts",
    "check_ids",
    "check_expert_map",
]


def _kernels_for(t: torch.Tensor):
    """:mod:`humming.core.moe.route_kernel` when ``t`` is a CUDA tensor on a device with the routing kernels, else
    None (the torch ops)."""
    if not t.is_cuda:
        return None
    return route_kernel if route_kernel.available(t.device) else None


# ------------------------------------------------------------------------------------------------- the layout
def _layout(counts: torch.Tensor, source_start: torch.Tensor, source: torch.Tensor | None, num_slots: int,
            block_m: int, cap: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The padded block layout of experts with ``counts[e]`` entries each (int64 ``[E]``, each >= 0).

    Expert ``e``'s ``i``-th entry is ``source[source_start[e] + i]`` (or ``source_start[e] + i`` without a source).
    The caller guarantees ``sum(counts) <= num_slots`` and that every such index is in range. Each position
    ``p < cap`` looks up its expert with a search over the padded run ends: a gather, not a scatter, so every
    position is written exactly once.
    """
    device = counts.device
    padded = (counts + (block_m - 1)) // block_m * block_m
    pad_end = torch.cumsum(padded, 0)
    pad_start = pad_end - padded
    num_experts = counts.shape[0]

    pos = torch.arange(cap, device=device, dtype=torch.int64)
    expert = torch.searchsorted(pad_end, pos, right=True)  # the run that holds p; num_experts past the used length
    e = expert.clamp(max=num_experts - 1)
    rank = pos - pad_start.gather(0, e)
    valid = (expert < num_experts) & (rank < counts.gather(0, e))
    index = torch.where(valid, source_start.gather(0, e) + rank, 0)
    if source is not None:  # invalid positions read source[0], which exists whenever cap > 0
        index = source.gather(0, index)
    sorted_ids = torch.where(valid, index, num_slots).to(torch.int32)

    block_expert = expert[::block_m]  # cap is a multiple of block_m: one entry per block
    expert_ids = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    num_padded = pad_end[-1:].clamp(max=cap).to(torch.int32)
    return sorted_ids, expert_ids, num_padded


# ------------------------------------------------------------------------------------------------- indexed form
def route(topk_ids: torch.Tensor, num_experts: int, block_m: int, *,
          expert_map: torch.Tensor | None = None) -> Routing:
    """Sort the slots of ``topk_ids [T, top_k]`` (int32/int64 expert ids) by expert into blocks of ``block_m``.

    num_experts: the number of local experts; ids (after ``expert_map``) outside ``[0, num_experts)`` are dropped.
    expert_map: int32/int64 ``[num_global_experts]``: global -> local expert id, -1 for an expert not on this
        device. Slots whose global id is outside the map or maps to -1 (or out of range) are left out of
        ``sorted_ids``; the kernel writes no output row for them.
    A token may name the same expert more than once; each such slot appears. Runs on ``topk_ids``' device with no
    host synchronisation: one kernel launch on CUDA where the sizes fit it, torch ops elsewhere (see the module
    docstring).
    """
    num_tokens, top_k, num_slots, cap = route_arguments(topk_ids, num_experts, block_m, expert_map)
    kernels = _kernels_for(topk_ids)
    if kernels is not None and kernels.fits_route(num_slots, num_experts):
        return kernels.launch_route(topk_ids, num_experts, block_m, expert_map, cap)
    device = topk_ids.device

    ids = topk_ids.reshape(-1).to(torch.int64)
    if expert_map is not None:
        num_global = int(expert_map.shape[0])
        in_map = (ids >= 0) & (ids < num_global)
        if num_global:
            mapped = expert_map.to(torch.int64).gather(0, ids.clamp(0, num_global - 1))
        else:
            mapped = torch.full_like(ids, -1)
        ids = torch.where(in_map, mapped, -1)
    # invalid slots go to bucket num_experts, which sorts last and is never laid out
    key = torch.where((ids >= 0) & (ids < num_experts), ids, num_experts)
    counts = torch.zeros(num_experts + 1, device=device, dtype=torch.int64)
    counts.scatter_add_(0, key, torch.ones_like(key))
    order = torch.sort(key, stable=True).indices  # slot ids by expert, ascending within an expert
    count_start = torch.cumsum(counts, 0) - counts

    sorted_ids, expert_ids, num_padded = _layout(counts[:num_experts], count_start[:num_experts], order,
                                                 num_slots, block_m, cap)
    return Routing(sorted_ids, expert_ids, num_padded, block_m, num_tokens, top_k, num_experts)


# ------------------------------------------------------------------------------------------------- grouped forms
def routing_from_offsets(expert_offsets: torch.Tensor, num_rows: int, block_m: int) -> Routing:
    """The routing of rows already grouped per expert: expert ``e`` owns rows ``[offsets[e], offsets[e + 1])``.

    expert_offsets: int32/int64 ``[E + 1]`` cumulative row starts (``offsets[0] == 0``, ``offsets[E] == num_rows``
        when every row belongs to an expert). Without a synchronisation they cannot be checked; they are clamped
        to ``[0, num_rows]`` and made non-decreasing (running maximum), so bad offsets drop rows but never index
        out of range. Rows outside ``[offsets[0], offsets[E])`` are in no expert's run.
    Slot id = row; ``top_k = 1``, ``num_tokens = num_rows``.
    """
    check_int_tensor(expert_offsets, "expert_offsets", 1, "[num_experts + 1]")
    check_count(num_rows, "num_rows", 0)
    check_block_m(block_m)
    num_experts = int(expert_offsets.shape[0]) - 1
    if num_experts < 1:
        raise ShapeError(f"expert_offsets must be [num_experts + 1] with at least one expert, "
                         f"got shape {tuple(expert_offsets.shape)}")
    cap = capacity(num_rows, num_experts, block_m)
    check_size(num_rows, cap)
    kernels = _kernels_for(expert_offsets)
    if kernels is not None and kernels.fits_layout(cap, num_experts):
        return kernels.routing_from_offsets_cuda(expert_offsets, num_rows, block_m)
    offsets = torch.cummax(expert_offsets.to(torch.int64).clamp(0, num_rows), 0).values
    counts = offsets[1:] - offsets[:-1]
    sorted_ids, expert_ids, num_padded = _layout(counts, offsets[:-1], None, num_rows, block_m, cap)
    return Routing(sorted_ids, expert_ids, num_padded, block_m, num_rows, 1, num_experts)


def routing_from_counts(counts: torch.Tensor, capacity_per_expert: int, block_m: int) -> Routing:
    """The routing of the masked form: ``x [E, cap, K]`` flattened to ``[E * cap, K]``, row ``e * cap + i`` valid iff
    ``i < counts[e]``.

    counts: int32/int64 ``[E]``; clamped to ``[0, capacity_per_expert]`` (a count above the capacity keeps the
        first ``cap`` rows). Slot id = row; ``top_k = 1``, ``num_tokens = E * cap``.
    """
    check_int_tensor(counts, "counts", 1, "[num_experts]")
    check_count(capacity_per_expert, "capacity_per_expert", 0)
    check_block_m(block_m)
    num_experts = int(counts.shape[0])
    if num_experts < 1:
        raise ShapeError("counts must name at least one expert, got shape (0,)")
    num_rows = num_experts * capacity_per_expert
    cap = capacity(num_rows, num_experts, block_m)
    check_size(num_rows, cap)
    kernels = _kernels_for(counts)
    if kernels is not None and kernels.fits_layout(cap, num_experts):
        return kernels.routing_from_counts_cuda(counts, capacity_per_expert, block_m)
    c = counts.to(torch.int64).clamp(0, capacity_per_expert)
    start = torch.arange(num_experts, device=counts.device, dtype=torch.int64) * capacity_per_expert
    sorted_ids, expert_ids, num_padded = _layout(c, start, None, num_rows, block_m, cap)
    return Routing(sorted_ids, expert_ids, num_padded, block_m, num_rows, 1, num_experts)


# ------------------------------------------------------------------------------------------------- debug checks
def check_ids(topk_ids: torch.Tensor, num_experts: int) -> None:
    """Raise :class:`ShapeError` naming the first id of ``topk_ids`` outside ``[-1, num_experts)`` (-1 means "no
    expert"). Synchronises with the device: for debugging and tests, not the hot path."""
    check_int_tensor(topk_ids, "topk_ids", 2, "[num_tokens, top_k]")
    check_count(num_experts, "num_experts", 1)
    bad = (topk_ids < -1) | (topk_ids >= num_experts)
    if bool(bad.any()):
        t, j = (int(v) for v in torch.nonzero(bad)[0])
        raise ShapeError(f"topk_ids[{t}, {j}] = {int(topk_ids[t, j])} is not an expert id: ids must lie in "
                         f"[0, {num_experts}) or be -1 (no expert)")


def check_expert_map(expert_map: torch.Tensor, num_local_experts: int) -> None:
    """Raise :class:`ShapeError` naming the first entry of ``expert_map`` outside ``[-1, num_local_experts)``, or a
    local expert that two global experts map to. Synchronises with the device: for debugging and tests."""
    check_int_tensor(expert_map, "expert_map", 1, "[num_global_experts]")
    check_count(num_local_experts, "num_local_experts", 1)
    bad = (expert_map < -1) | (expert_map >= num_local_experts)
    if bool(bad.any()):
        g = int(torch.nonzero(bad)[0, 0])
        raise ShapeError(f"expert_map[{g}] = {int(expert_map[g])} is not a local expert id: entries must lie in "
                         f"[0, {num_local_experts}) or be -1 (not on this device)")
    local = expert_map[expert_map >= 0]
    if local.numel() != torch.unique(local).numel():
        values, counts = torch.unique(local, return_counts=True)
        dup = int(values[counts > 1][0])
        raise ShapeError(f"expert_map sends several global experts to local expert {dup}; each local expert holds "
                         f"one global expert's weights")
