"""A quantized mixture-of-experts MLP (humming.nn.QuantMoE): the gate+up GEMM, the gated activation, the down GEMM
with the router weights in its epilogue, and the sum over the top-k slots, on one routing made on the GPU."""
from __future__ import annotations

import copy

import torch

from humming.core.moe.activation_kernel import gated_activation
from humming.core.moe.reference import ACTIVATIONS, local_ids, reference_activation, reference_moe_layer
from humming.core.moe.sharding import order_by_group
from humming.errors import SchemeError, ShapeError


def _with_bias(qw, bias: torch.Tensor | None, what: str):
    """The stacked weight with ``bias`` [E, N] as its own (applied in the GEMM's epilogue, before the router weight)."""
    if bias is None:
        return qw
    want = (qw.num_experts, qw.shape[0])
    if tuple(bias.shape) != want:
        raise ShapeError(f"{what} must be {list(want)}, got {list(bias.shape)}")
    out = copy.copy(qw)
    out.__dict__.pop("_humming_moe_prepared", None)
    out.__dict__.pop("_humming_prepared", None)
    out.bias = bias.to(device=qw.packed.device)
    return out


class QuantMoE(torch.nn.Module):
    """``y[t] = sum_j topk_weights[t, j] * (act(x[t] @ W13_e^T + b13_e) @ W2_e^T + b2_e)``, e = topk_ids[t, j].

    ``w13``: stacked experts [E, 2I, H] (rows [0, I) gate, [I, 2I) up; ``interleaved``: even rows gate, odd rows up,
    as gpt-oss stores them); ``w2``: stacked experts [E, H, I]; ``activation``: "silu" (silu(gate) * up) or
    "swiglu_clamped" (gpt-oss, with ``swiglu_alpha`` and ``swiglu_limit``; humming.core.moe.reference defines both);
    ``w13_bias`` [E, 2I] / ``w2_bias`` [E, H]: optional. ``expert_map``: global -> local expert id (-1: not on this
    GPU) for expert parallelism: this module holds the local experts and returns their part of the sum. An
    act-order w2 is folded into the intermediate order (humming.core.moe.sharding.order_by_group). CUDA inputs
    run humming's MoE kernels (no host synchronisation: the layer captures in a CUDA graph); CPU inputs the
    reference."""

    def __init__(self, w13, w2, *, activation: str = "silu", interleaved: bool = False,
                 w13_bias: torch.Tensor | None = None, w2_bias: torch.Tensor | None = None,
                 swiglu_alpha: float = 1.702, swiglu_limit: float = 7.0, expert_map: torch.Tensor | None = None):
        super().__init__()
        for name, qw in (("w13", w13), ("w2", w2)):
            if not getattr(qw, "num_experts", None):
                raise ShapeError(f"{name} must be an expert-stacked QuantizedWeight (humming.quantize(w [E, N, K]))")
        if w13.num_experts != w2.num_experts:
            raise ShapeError(f"w13 has {w13.num_experts} experts, w2 has {w2.num_experts}")
        two_i, hidden = w13.shape
        if two_i % 2 or tuple(w2.shape) != (hidden, two_i // 2):
            raise ShapeError(f"w13 must be [E, 2I, H] and w2 [E, H, I]; got w13 [E, {two_i}, {hidden}], "
                             f"w2 [E, {w2.shape[0]}, {w2.shape[1]}]")
        if activation not in ACTIVATIONS:
            raise SchemeError(f"activation {activation!r} is unknown; use one of {ACTIVATIONS}")
        w13, w2 = _with_bias(w13, w13_bias, "w13_bias"), _with_bias(w2, w2_bias, "w2_bias")
        if w2.g_idx is not None:  # act-order down projection: the intermediate channels ordered by its groups (the
            try:                  # same output; its g_idx becomes natural)
                w13, w2 = order_by_group(w13, w2, interleaved=interleaved)
            except SchemeError:   # w13's scales cannot follow its rows (block scales): the MoE kernels permute
                pass              # each routed row of h instead (humming.core.moe.permute_kernel)
        self.w13, self.w2 = w13, w2.natural_order()
        self.num_experts, self.hidden, self.intermediate = w13.num_experts, hidden, two_i // 2
        self.activation, self.interleaved = activation, interleaved
        self.swiglu_alpha, self.swiglu_limit = swiglu_alpha, swiglu_limit
        self.expert_map = expert_map

    @classmethod
    def from_experts(cls, w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor, scheme, **kwargs) -> QuantMoE:
        """Quantize float experts: ``w1`` gate [E, I, H], ``w2`` down [E, H, I], ``w3`` up [E, I, H] (the
        Mixtral / Qwen / DeepSeek naming); gate and up become one GEMM. Other keywords: ``group_size`` for
        humming.quantize, the rest for the constructor."""
        from humming.core.quant.quantize import quantize

        group_size = kwargs.pop("group_size", None)
        if w1.shape != w3.shape or w1.dim() != 3:
            raise ShapeError(f"w1 and w3 must both be [E, I, H], got {list(w1.shape)} and {list(w3.shape)}")
        w13 = quantize(torch.cat([w1, w3], dim=1), scheme, group_size=group_size)
        return cls(w13, quantize(w2, scheme, group_size=group_size), **kwargs)

    def _with_weights(self, w13, w2, expert_map: torch.Tensor | None) -> QuantMoE:
        return type(self)(w13, w2, activation=self.activation, interleaved=self.interleaved,
                          swiglu_alpha=self.swiglu_alpha, swiglu_limit=self.swiglu_limit, expert_map=expert_map)

    def shard_tensor_parallel(self, rank: int, world: int) -> QuantMoE:
        """A new layer holding rank ``rank``'s part of a ``world``-way tensor-parallel split of the intermediate size
        (humming.core.moe.sharding.tensor_parallel; this layer is unchanged): summing the ranks' outputs (an
        all-reduce) gives this layer's output. ShapeError when I / world is not whole or splits a scale group."""
        from humming.core.moe.sharding import tensor_parallel

        w13, w2 = tensor_parallel(self.w13, self.w2, rank, world, interleaved=self.interleaved)
        return self._with_weights(w13, w2, self.expert_map)

    def shard_expert_parallel(self, rank: int, world: int) -> QuantMoE:
        """A new layer holding rank ``rank``'s experts of a ``world``-way expert-parallel split, with the expert map
        from global ids to them (humming.core.moe.sharding.expert_parallel; this layer is unchanged): summing the
        ranks' outputs gives this layer's output. ShapeError when E / world is not whole."""
        from humming.core.moe.sharding import expert_parallel

        w13, w2, expert_map = expert_parallel(self.w13, self.w2, rank, world, self.expert_map)
        return self._with_weights(w13, w2, expert_map)

    def _apply(self, fn, recurse=True):  # .cuda() / .to() move the quantized tensors too
        super()._apply(fn, recurse)
        probe = fn(torch.empty(0, device=self.w13.packed.device))
        if probe.device != self.w13.packed.device:
            self.w13, self.w2 = self.w13.to(probe.device), self.w2.to(probe.device)
            if self.expert_map is not None:
                self.expert_map = self.expert_map.to(probe.device)
        return self

    def prepare(self) -> QuantMoE:
        """Make the weights' handles for the ``humming::moe_gemm`` custom op (every eager call does; call it before a
        ``torch.compile`` that comes before any eager call)."""
        from humming.moe_ops import handle

        handle(self.w13)
        handle(self.w2)
        return self

    def forward(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        """x [T, H], topk_ids int [T, top_k], topk_weights float [T, top_k] -> [T, H]."""
        if torch.compiler.is_compiling():  # the GEMMs as custom ops, each routing its own rows
            return self._mlp(x, topk_ids, topk_weights, None, None)
        self.prepare()  # (a later torch.compile of the module finds the handles made)
        if not x.is_cuda:
            ids = topk_ids if self.expert_map is None else local_ids(topk_ids, self.expert_map)
            return reference_moe_layer(x, self.w13, self.w2, ids, topk_weights, activation=self.activation,
                                       interleaved=self.interleaved, swiglu_alpha=self.swiglu_alpha,
                                       swiglu_limit=self.swiglu_limit)
        from humming import moe

        tokens, top_k = topk_ids.shape
        if x.dim() != 2 or x.shape != (tokens, self.hidden):
            raise ShapeError(f"x must be [{tokens}, {self.hidden}] (tokens x hidden), got {list(x.shape)}")
        if tokens == 0:
            return x.new_zeros((0, self.hidden))
        bm13 = moe.block_m(self.w13, tokens, top_k, x.dtype, x.device)
        bm2 = moe.block_m(self.w2, tokens, top_k, x.dtype, x.device)
        routing = moe.route(topk_ids, self.num_experts, bm13, expert_map=self.expert_map)
        down_routing = routing if bm2 == bm13 else moe.route(topk_ids, self.num_experts, bm2,
                                                              expert_map=self.expert_map)
        return self._mlp(x, topk_ids, topk_weights, routing, down_routing)

    def _mlp(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, routing, down_routing
             ) -> torch.Tensor:
        """Gate+up GEMM, activation, down GEMM with the router weights, sum over the top-k slots; ``routing`` /
        ``down_routing``: the GEMMs' routings (None: each GEMM routes its own rows, as traced graphs do)."""
        from humming import moe

        tokens, top_k = topk_ids.shape
        h = moe.moe_gemm(x, self.w13, topk_ids, routing=routing, expert_map=self.expert_map)
        if torch.compiler.is_compiling():  # the compiler fuses the torch ops itself
            a = reference_activation(h.view(tokens * top_k, -1), self.activation, interleaved=self.interleaved,
                                     alpha=self.swiglu_alpha, limit=self.swiglu_limit).to(x.dtype)
        else:  # one launch on CUDA
            a = gated_activation(h.view(tokens * top_k, -1), self.activation, interleaved=self.interleaved,
                                 alpha=self.swiglu_alpha, limit=self.swiglu_limit)
        o = moe.moe_gemm(a, self.w2, topk_ids, topk_weights, routing=down_routing, gather=False,
                         expert_map=self.expert_map)
        return o.sum(dim=1)
