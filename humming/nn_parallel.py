"""Tensor- and expert-parallel humming layers over torch.distributed: each rank holds its shard of the quantized
weight (split without requantizing: humming.core.quant.sharding, humming.core.moe.sharding) and the layer combines
the ranks' results with the process group's collectives (NCCL on GPUs, gloo on CPUs).

- ``ColumnParallelQuantLinear``: the output features split; each rank returns its slice of y (``gather_output``:
  the whole y, by all-gather).
- ``RowParallelQuantLinear``: the input features split; each rank multiplies its slice of x (``input_is_parallel``:
  x is already the rank's slice, as a column-parallel layer before it leaves it) and the partial products are summed
  by all-reduce; the bias is added once. An act-order weight whose groups scatter over K is ordered by group first,
  and x with it (this needs the whole x: ``input_is_parallel=False``).
- ``ParallelQuantMoE``: a QuantMoE split by its intermediate size ("tensor") or its experts ("expert"); each rank
  computes its part of every token's output and the parts are summed by all-reduce.

Every rank builds the layer from the same whole QuantizedWeight (or from a checkpoint module read on the CPU, one
module at a time) and keeps only its shard."""
from __future__ import annotations

import torch
import torch.distributed as dist

from humming.core.quant.sharding import shard_linear
from humming.errors import ShapeError
from humming.nn_linear import QuantLinear
from humming.nn_moe import QuantMoE

__all__ = ["ColumnParallelQuantLinear", "RowParallelQuantLinear", "ParallelQuantMoE"]


def _rank_world(group) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise ShapeError("the parallel humming layers need torch.distributed initialised "
                         "(torch.distributed.init_process_group)")
    return dist.get_rank(group), dist.get_world_size(group)


class ColumnParallelQuantLinear(torch.nn.Module):
    """This rank's output features of ``qweight`` [N, K] (N / world of them) and of ``bias``."""

    def __init__(self, qweight, bias: torch.Tensor | None = None, *, group=None, gather_output: bool = False):
        super().__init__()
        self.group, self.gather_output = group, gather_output
        self.rank, self.world = _rank_world(group)
        part = shard_linear(qweight, self.rank, self.world, "column")
        n = part.shape[0]
        local_bias = None if bias is None else bias[self.rank * n:(self.rank + 1) * n]
        self.local = QuantLinear.from_quantized(part, local_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.local(x)
        if not self.gather_output or self.world == 1:
            return y
        parts = [torch.empty_like(y) for _ in range(self.world)]
        dist.all_gather(parts, y.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


class RowParallelQuantLinear(torch.nn.Module):
    """This rank's input features of ``qweight`` [N, K] (K / world of them); the output summed over the ranks."""

    def __init__(self, qweight, bias: torch.Tensor | None = None, *, group=None, input_is_parallel: bool = True):
        super().__init__()
        self.group, self.input_is_parallel = group, input_is_parallel
        self.rank, self.world = _rank_world(group)
        self.order = None  # act-order: the column order that puts each group's columns together
        if qweight.g_idx is not None and not _grouped(qweight.g_idx):
            if input_is_parallel:
                raise ShapeError("a row-parallel act-order weight whose groups scatter over K needs the whole x "
                                 "(input_is_parallel=False) to order it by group, or the previous layer's output "
                                 "ordered the same way")
            from humming.core.quant.slicing import permute_columns

            self.order = torch.argsort(qweight.g_idx.to(torch.int64), stable=True)
            qweight = permute_columns(qweight, self.order)
        part = shard_linear(qweight, self.rank, self.world, "row")
        self.k_part = part.shape[1]
        self.local = QuantLinear.from_quantized(part, bias if self.rank == 0 else None)  # (the sum adds it once)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            if self.order is not None:
                x = x.index_select(-1, self.order.to(x.device))
            x = x[..., self.rank * self.k_part:(self.rank + 1) * self.k_part]
        y = self.local(x.contiguous())
        if self.world > 1:
            dist.all_reduce(y, group=self.group)
        return y


def _grouped(g_idx: torch.Tensor) -> bool:
    """Whether act-order groups already lie in increasing runs (the columns need no reordering)."""
    g = g_idx.to(torch.int64)
    return bool((g[1:] >= g[:-1]).all())


class ParallelQuantMoE(torch.nn.Module):
    """This rank's part of a QuantMoE: ``mode`` "tensor" (the intermediate size split) or "expert" (the experts
    split, with an expert map); the ranks' outputs summed by all-reduce."""

    def __init__(self, moe: QuantMoE, *, mode: str = "tensor", group=None):
        super().__init__()
        if mode not in ("tensor", "expert"):
            raise ShapeError(f"mode must be 'tensor' or 'expert', got {mode!r}")
        self.group, self.mode = group, mode
        self.rank, self.world = _rank_world(group)
        self.local = (moe.shard_tensor_parallel if mode == "tensor" else moe.shard_expert_parallel)(self.rank,
                                                                                                   self.world)

    def forward(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        y = self.local(x, topk_ids, topk_weights)
        if self.world > 1:
            dist.all_reduce(y, group=self.group)
        return y
