"""What every routing form shares: the :class:`Routing` of slots sorted by expert in blocks of ``block_m`` (the layout
:mod:`humming.core.moe.routing` describes), the static length :func:`capacity` of its ``sorted_ids``, and the host-side
checks of the forms' arguments (named :class:`~humming.errors.ShapeError` on a bad one). Both the torch forms
(:mod:`humming.core.moe.routing`) and the kernels (:mod:`humming.core.moe.route_kernel`) build on it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.errors import ShapeError

__all__ = ["Routing", "capacity", "check_block_m", "check_count", "check_int_tensor", "check_size"]

_ID_DTYPES = (torch.int32, torch.int64)
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Routing:
    """Slots sorted by expert in blocks of ``block_m`` (see :mod:`humming.core.moe.routing`).

    sorted_ids: int32 ``[capacity]``: slot ids sorted by local expert, stable; each expert's run padded to a
        multiple of ``block_m`` with the sentinel ``num_slots``; entries past ``num_padded`` are the sentinel too.
    expert_ids: int32 ``[capacity // block_m]``: the local expert of each block of ``block_m`` entries; -1 for
        blocks past the used length.
    num_padded: int32 ``[1]``: the used length of ``sorted_ids``.
    num_experts: the number of local experts.
    """

    sorted_ids: torch.Tensor
    expert_ids: torch.Tensor
    num_padded: torch.Tensor
    block_m: int
    num_tokens: int
    top_k: int
    num_experts: int

    @property
    def num_slots(self) -> int:
        """``num_tokens * top_k``; also the padding sentinel in ``sorted_ids``."""
        return self.num_tokens * self.top_k

    @property
    def capacity(self) -> int:
        """``len(sorted_ids)``: :func:`capacity` of this routing's slots, experts and block size."""
        return int(self.sorted_ids.shape[0])


def capacity(num_slots: int, num_experts: int, block_m: int) -> int:
    """The static length of ``sorted_ids``: ``round_up(num_slots + min(num_experts, num_slots) * (block_m - 1),
    block_m)`` (0 for no slots). It bounds the used length of any routing: only a non-empty expert pads its run, by
    less than ``block_m``, and at most ``min(num_experts, num_slots)`` experts are non-empty. Slots that all go to
    different experts fill it exactly."""
    check_block_m(block_m)
    if num_slots < 0 or num_experts < 0:
        raise ShapeError(f"num_slots and num_experts must be non-negative, got {num_slots} and {num_experts}")
    if num_slots == 0:
        return 0
    bound = num_slots + min(num_experts, num_slots) * (block_m - 1)
    return -(-bound // block_m) * block_m


# ------------------------------------------------------------------------------------------------- host checks
def check_block_m(block_m: int) -> None:
    """``block_m`` is a positive power of two (a kernel's token tile)."""
    if isinstance(block_m, bool) or not isinstance(block_m, int) or block_m <= 0 or block_m & (block_m - 1):
        raise ShapeError(f"block_m must be a positive power of two (the kernel's token tile), got {block_m!r}; "
                         f"use 16, 32, 64 or 128")


def check_count(value: int, what: str, minimum: int) -> None:
    """``value`` (named ``what``) is an integer of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ShapeError(f"{what} must be an integer >= {minimum}, got {value!r}")


def check_int_tensor(t: object, what: str, dim: int, shape_hint: str) -> torch.Tensor:
    """``t`` (named ``what``) is an int32 or int64 tensor of ``dim`` dimensions; returns it."""
    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{what} must be a tensor {shape_hint}, got {type(t).__name__}")
    if t.dtype not in _ID_DTYPES:
        raise ShapeError(f"{what} must be int32 or int64 {shape_hint}, got {t.dtype}")
    if t.dim() != dim:
        raise ShapeError(f"{what} must be {dim}-D {shape_hint}, got shape {tuple(t.shape)}")
    return t


def check_size(num_slots: int, cap: int) -> None:
    """A routing of ``cap`` entries is indexable with int32."""
    if cap > _INT32_MAX:
        raise ShapeError(f"routing of {num_slots} slots needs {cap} int32 entries, more than int32 indexes; "
                         f"split the batch")


def route_arguments(topk_ids, num_experts: int, block_m: int, expert_map) -> tuple[int, int, int, int]:
    """The checks of a routing's arguments (ids [T, top_k], the expert count, block_m, an optional expert map on the
    ids' device); returns (num_tokens, top_k, num_slots, capacity)."""
    check_int_tensor(topk_ids, "topk_ids", 2, "[num_tokens, top_k]")
    check_count(num_experts, "num_experts", 1)
    check_block_m(block_m)
    if expert_map is not None:
        check_int_tensor(expert_map, "expert_map", 1, "[num_global_experts]")
        if expert_map.device != topk_ids.device:
            raise ShapeError(f"expert_map is on {expert_map.device}, topk_ids on {topk_ids.device}; "
                             f"move them to one device")
    num_tokens, top_k = (int(d) for d in topk_ids.shape)
    num_slots = num_tokens * top_k
    cap = capacity(num_slots, num_experts, block_m)
    check_size(num_slots, cap)
    return num_tokens, top_k, num_slots, cap
