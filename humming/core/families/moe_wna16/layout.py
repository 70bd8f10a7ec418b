"""The MoE WnA16 weights: every expert in the mma.sync tile layout (humming.core.families.mma_wna16.layout), padded
to whole 64 x 64 atoms once, when the weight is prepared, and stacked expert after expert, so that one kernel reaches
expert e at a fixed stride.

Padding: output features N and input features K that are multiples of 16 (any real model's) are padded to
multiples of 64 with code 0 (a finite value in every format) and the last scale / zero row or column repeated. The
kernel reads activations only up to the real K (zeros past it), so padded input columns add nothing; padded output
columns are computed and never stored.

Act-order experts (GPTQ ``desc_act``): each expert's input columns are sorted by group first, so its groups are
contiguous runs (then padded like any weight); the activations follow each expert's own order at run time
(``ExpertWeights.perm``, humming.core.moe.permute_kernel)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.common.layout import ATOM_K, ATOM_N, WeightLayout
from humming.core.families.mma_wna16.layout import layout_for, prepare
from humming.core.quant.padding import ALIGN, padded_weight
from humming.errors import ShapeError, UnsupportedOnDevice


def padded_shape(n: int, k: int) -> tuple[int, int]:
    """(N, K) padded to whole weight atoms; an odd number of K atoms from 16 on gets one more (at most 1/16 more
    bytes), so that two warps can split every K stage (gpt-oss: K 2880 = 45 atoms -> 46)."""
    if n % ALIGN or k % ALIGN:
        raise ShapeError(f"MoE weights need N and K that are multiples of {ALIGN}, got N={n} K={k}")
    atoms_k = -(-k // ATOM_K)
    if atoms_k % 2 and atoms_k >= 16:
        atoms_k += 1
    return -(-n // ATOM_N) * ATOM_N, atoms_k * ATOM_K


def moe_layout(scheme, n: int, k: int, act: str) -> WeightLayout:
    """The layout of one padded expert (step-major pair order: the tile kernel's cheaper reads)."""
    n_pad, k_pad = padded_shape(n, k)
    return layout_for(scheme, n_pad, k_pad, act)


@dataclass
class ExpertWeights:
    """Stacked, padded experts as the MoE tile kernel reads them: ``qweight`` int32 [E, words of one expert];
    ``scales`` / ``zeros`` [E, rows, N_pad] (or None); ``channel_scale`` fp32 [E, N_pad] (or None); ``bias`` [E, N_pad]
    (or None); ``expert_scale`` fp32 [E]: each expert's global factor on its accumulators."""

    layout: WeightLayout
    n: int
    k: int
    qweight: torch.Tensor
    scales: torch.Tensor | None
    zeros: torch.Tensor | None
    channel_scale: torch.Tensor | None
    bias: torch.Tensor | None
    expert_scale: torch.Tensor
    # act-order experts: int32 [E, K], the activation column of each sorted weight column per expert (the rows of A
    # are permuted per slot before the GEMM, humming.core.moe.permute_kernel); None otherwise
    perm: torch.Tensor | None = None

    @property
    def num_experts(self) -> int:
        return self.qweight.shape[0]

    def stride(self, t: torch.Tensor | None) -> int:
        """Elements between two experts of a stacked table (0 for None)."""
        return 0 if t is None else t[0].numel()

    def tensors(self) -> list[torch.Tensor | None]:
        return [self.qweight, self.scales, self.zeros, self.channel_scale, self.bias, self.expert_scale]


def _stack(parts: list) -> torch.Tensor | None:
    return None if parts[0] is None else torch.stack(parts).contiguous()


def stacked_experts(qw, pad_to, prepare_one) -> ExpertWeights:
    """Every expert of the stacked QuantizedWeight ``qw`` (act-order experts sorted by group first) padded to
    ``pad_to(n, k)`` and repacked by ``prepare_one(dense weight)`` (a family's packed weight: qweight, scales,
    zeros, channel_scale, bias, out_scale; absent ones None), stacked at fixed strides."""
    if not getattr(qw, "num_experts", None):
        raise ShapeError("a MoE GEMM needs expert-stacked weights: humming.quantize(w [E, N, K], scheme) or "
                         "QuantizedWeight.stack([...])")
    qw, perm = sorted_by_group(qw)
    n, k = qw.shape
    n_pad, k_pad = pad_to(n, k)
    packed = [prepare_one(padded_weight(qw.expert(e), n_pad, k_pad)) for e in range(qw.num_experts)]
    if any(getattr(p, "perm", None) is not None for p in packed):  # (sorted_by_group left natural orders)
        raise UnsupportedOnDevice("an expert kept a column permutation after sorting its groups")
    first = packed[0]
    return ExpertWeights(
        layout=first.layout, n=n, k=k,
        qweight=torch.stack([p.qweight.reshape(-1) for p in packed]).contiguous(),
        scales=_stack([p.scales for p in packed]), zeros=_stack([getattr(p, "zeros", None) for p in packed]),
        channel_scale=_stack([p.channel_scale for p in packed]), bias=_stack([p.bias for p in packed]),
        expert_scale=torch.tensor([float(p.out_scale) for p in packed], dtype=torch.float32,
                                  device=first.qweight.device),
        perm=perm)


def prepare_experts(qw, act_dtype: torch.dtype) -> ExpertWeights:
    """Repack a stacked QuantizedWeight (``num_experts`` set) for the MoE tile kernel."""
    return stacked_experts(qw, padded_shape, lambda w: prepare(w, act_dtype))


ACT_ORDER_REASON = ("act-order experts: each expert's input columns sorted by group when prepared; before the GEMM one "
                    "kernel writes every routed row in its expert's column order (slots x K x 2 bytes more traffic)")


def sorted_by_group(qw):
    """(the stacked weight with every expert's input columns sorted by its act-order group, so that its g_idx is the
    natural order and is dropped; int32 [E, K]: the original column of each sorted column, or None where ``qw`` has
    no g_idx, or a natural one). ShapeError where a g_idx does not form groups of exactly group_size columns."""
    from humming.core.quant.slicing import permute_columns

    qw = qw.natural_order()
    if qw.g_idx is None:
        return qw, None
    perm = torch.argsort(qw.g_idx.to(torch.int64), dim=-1, stable=True)
    ordered = permute_columns(qw, perm).natural_order()
    if ordered.g_idx is not None:
        raise ShapeError(f"an expert's act-order g_idx does not form groups of exactly {qw.group_size} columns")
    return ordered, perm.to(torch.int32).contiguous()
