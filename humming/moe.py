"""Mixture-of-experts GEMMs on expert-stacked quantized weights (``humming.quantize(w [E, N, K], scheme)``).

    y = humming.moe_gemm(x, qw, topk_ids, topk_weights)    indexed: x [T, K] -> [T, top_k, N]
    y = humming.grouped_gemm(x, qw, expert_offsets)        rows contiguous per expert: [rows, K] -> [rows, N]
    y = humming.masked_gemm(x, qw, counts)                 x [E, cap, K], counts [E] -> [E, cap, N]
    r = humming.moe.route(topk_ids, E, humming.moe.block_m(qw, T, top_k, x.dtype))   routing, reusable

Each form is a routing of rows to experts (humming.core.moe.routing, built on the GPU without host
synchronisation) and one launch of the MoE kernel the registry chooses (humming.core.families.moe_wna16), so a
whole MoE layer captures in a CUDA graph. CPU tensors run the reference (humming.core.moe.reference)."""
from __future__ import annotations

import torch

from humming.core.moe import reference
from humming.core.moe.reference import local_ids
from humming.core.moe.routing import Routing, route, routing_from_counts, routing_from_offsets
from humming.core.moe.sharding import order_by_group
from humming.core.quant import arguments
from humming.core.runtime.layer import kept_prepared
from humming.core.runtime.moe_layer import MoeLayer
from humming.devices.current import resolve_profile
from humming.errors import DeviceMismatchError, ShapeError
from humming.moe_ops import WEIGHTS
from humming.options import resolve as resolve_options

__all__ = ["Routing", "route", "block_m", "moe_gemm", "grouped_gemm", "masked_gemm", "prepared", "order_by_group"]


def prepared(qw, dtype: torch.dtype, device, profile=None, options=None) -> MoeLayer:
    """The stacked weight ``qw`` prepared for (activation dtype, device, profile, options): made once, kept on the
    weight. ``dtype``: torch.float16 or torch.bfloat16; a weight on another device than ``device`` is copied there
    once (the MoE GEMMs themselves refuse x on another device than the weight). ShapeError naming the fix
    otherwise."""
    _stacked(qw, "humming.moe.prepared")
    return _prepared(qw, dtype, arguments.prepare_args(dtype, device, "humming.moe.prepared"), profile, options)


def _prepared(qw, dtype: torch.dtype, device, profile=None, options=None) -> MoeLayer:
    """``prepared`` with its arguments checked (the GEMMs' per-call path)."""
    return kept_prepared(qw, "_humming_moe_prepared", dtype, device, profile, options,
                         lambda dt, dev: MoeLayer(qw, dt, dev, resolve_profile(profile), resolve_options(options)))


def _stacked(qw, where: str) -> None:
    """``qw`` is an expert-stacked QuantizedWeight."""
    arguments.quantized_weight(qw, where)
    if not qw.num_experts:
        raise ShapeError(f"{where}: MoE GEMMs take expert-stacked weights: humming.quantize(w [E, N, K], scheme) or "
                         "QuantizedWeight.stack([...]); a dense weight goes to humming.gemm")


def block_m(qw, tokens: int, top_k: int, dtype: torch.dtype = torch.bfloat16, device="cuda", profile=None) -> int:
    """The token tile (routing block) the MoE kernel runs ``tokens`` tokens x ``top_k`` with."""
    return prepared(qw, dtype, device, profile).plan_for(tokens, top_k).tiles.bm


def _check_x(x, qw, where: str) -> tuple[int, int]:
    """The per-call checks of x and the stacked weight: an expert-stacked QuantizedWeight on x's device, x a float
    tensor [..., K] (float16 or bfloat16 for the kernels; the CPU reference takes any float). Returns (N, K)."""
    _stacked(qw, where)
    arguments.activation(x, where)
    n, k = qw.shape
    if x.dtype not in arguments.KERNEL_DTYPES and (x.is_cuda or not x.is_floating_point()):
        raise ShapeError(f"{where}: x must be float16 or bfloat16, got {x.dtype}; pass x.half() or x.bfloat16()")
    if x.shape[-1] != k:
        raise ShapeError(f"{where}: x has {x.shape[-1]} input features but the weight expects K={k}")
    arguments.weight_device(qw, x, where, "the expert weights")
    return n, k


def _output(out, shape: tuple, x: torch.Tensor, zero: bool) -> torch.Tensor:
    if out is None:
        return (torch.zeros if zero else torch.empty)(shape, dtype=x.dtype, device=x.device)
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape) or out.dtype != x.dtype:
        raise ShapeError(f"out must be a {x.dtype} tensor of shape {tuple(shape)}, got "
                         f"{getattr(out, 'dtype', type(out).__name__)} {tuple(getattr(out, 'shape', ()))}")
    if out.device != x.device:
        raise DeviceMismatchError(f"out is on {out.device}, x on {x.device}: give an output on x's device")
    if not out.is_contiguous():
        raise ShapeError("out must be contiguous (the kernels write whole rows); e.g. torch.empty(..., "
                         "device=x.device, dtype=x.dtype)")
    if zero:
        out.zero_()
    return out


def _rows(x: torch.Tensor) -> torch.Tensor:
    if not x.is_contiguous() or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)
    return x


def moe_gemm(x: torch.Tensor, qw, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None = None, *,
             routing: Routing | None = None, out: torch.Tensor | None = None, gather: bool = True,
             expert_map: torch.Tensor | None = None, profile=None, options=None) -> torch.Tensor:
    """The indexed MoE GEMM: ``out[t, j] = topk_weights[t, j] * (row(t, j) @ W_{topk_ids[t, j]}^T)``, [T, top_k, N].

    ``x``: [T, K] (``gather``: slot (t, j) reads x[t]: the gate/up projection) or [T * top_k, K] (``gather=False``:
    one row per slot, the down projection). ``topk_ids``: int [T, top_k]; an expert may repeat within a token.
    ``topk_weights``: float [T, top_k] multiplied in the epilogue, or None. ``routing``: a routing made by
    ``route`` for these ids (with ``block_m(...)``), reused across the GEMMs of a layer; made here otherwise.
    ``expert_map``: global -> local expert id (-1: not on this GPU); the weight holds the local experts and the rows
    of slots elsewhere are zero. ``out``: [T, top_k, N] of x's dtype."""
    if torch.compiler.is_compiling():  # traced: the custom op (its weight prepared before tracing)
        if routing is not None or out is not None or profile is not None or options is not None:
            raise ShapeError("under torch.compile, moe_gemm takes no routing, out, profile or options")
        h = qw.__dict__.get("_humming_moe_handle")
        if h is None:
            raise ShapeError("under torch.compile, prepare the weight first: humming.moe_ops.handle(qw) or "
                             "QuantMoE.prepare()")
        return torch.ops.humming.moe_gemm(x, topk_ids, topk_weights, expert_map, h, gather)
    n, k = _check_x(x, qw, "humming.moe_gemm")
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2:
        raise ShapeError(f"topk_ids must be an integer tensor [T, top_k], got {getattr(topk_ids, 'shape', topk_ids)}")
    tokens, top_k = topk_ids.shape
    rows = tokens if gather else tokens * top_k
    if x.dim() != 2 or x.shape[0] != rows:
        raise ShapeError(f"x must be [{rows}, {k}] ({'one row per token' if gather else 'one row per slot'}, "
                         f"{tokens} tokens x top_k {top_k}), got {tuple(x.shape)}")
    arguments.same_device(x, "humming.moe_gemm", topk_ids=topk_ids, topk_weights=topk_weights, expert_map=expert_map)
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ShapeError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
    if topk_weights is not None and (tuple(topk_weights.shape) != (tokens, top_k)
                                     or not topk_weights.is_floating_point()):
        raise ShapeError(f"topk_weights must be a float tensor [{tokens}, {top_k}] like topk_ids, got "
                         f"{topk_weights.dtype} {tuple(topk_weights.shape)}")
    if not x.is_cuda:
        ids = topk_ids if expert_map is None else local_ids(topk_ids, expert_map)
        y = reference.reference_moe_gemm(x, qw, ids, topk_weights, gather=gather)
        return y if out is None else out.copy_(y)
    layer = _prepared(qw, x.dtype, x.device, profile, options)
    plan = layer.plan_for(tokens, top_k)
    y = _output(out, (tokens, top_k, n), x, zero=expert_map is not None)
    if tokens == 0:
        return y
    if routing is None:
        routing = route(topk_ids, layer.experts, plan.tiles.bm, expert_map=expert_map)
    elif routing.num_tokens != tokens or routing.top_k != top_k:
        raise ShapeError(f"the routing is for {routing.num_tokens} tokens x top_k {routing.top_k}; topk_ids is "
                         f"[{tokens}, {top_k}]")
    w = None if topk_weights is None else topk_weights.to(torch.float32).contiguous()
    _launch(layer, x, routing, y, plan, top_k if gather else 1, w, every_row=expert_map is None)
    return y


def _launch(layer: MoeLayer, x: torch.Tensor, routing: Routing, y: torch.Tensor, plan, a_div: int,
            topk_weights: torch.Tensor | None = None, every_row: bool = True) -> None:
    """The activations' step (quantized once, where the scheme says) and the launch, into ``y`` (through a buffer
    of the kernel's type where that is not y's)."""
    a, gscale = layer.activations(_rows(x.reshape(-1, x.shape[-1])), plan)
    dest = y if y.dtype == layer.kernel_dtype else torch.zeros(y.shape, dtype=layer.kernel_dtype, device=y.device)
    layer.run(a, routing, dest, plan, a_div, topk_weights, every_row=every_row, gscale=gscale)
    if dest is not y:
        y.copy_(dest)


def grouped_gemm(x: torch.Tensor, qw, expert_offsets: torch.Tensor, *, out: torch.Tensor | None = None,
                 profile=None, options=None) -> torch.Tensor:
    """Rows contiguous per expert: expert e multiplies rows [expert_offsets[e], expert_offsets[e + 1]) of x [rows, K]
    (``expert_offsets``: int [E + 1], from 0 to rows). Returns [rows, N]; rows outside every range are zero."""
    n, k = _check_x(x, qw, "humming.grouped_gemm")
    if x.dim() != 2:
        raise ShapeError(f"x must be [rows, K], got {tuple(x.shape)}")
    experts = qw.num_experts
    if not isinstance(expert_offsets, torch.Tensor) or tuple(expert_offsets.shape) != (experts + 1,):
        raise ShapeError(f"expert_offsets must be an integer tensor [{experts + 1}] (E + 1 row offsets), got "
                         f"{getattr(expert_offsets, 'shape', expert_offsets)}")
    arguments.same_device(x, "humming.grouped_gemm", expert_offsets=expert_offsets)
    if not x.is_cuda:
        y = reference.reference_grouped_gemm(x, qw, expert_offsets)
        return y if out is None else out.copy_(y)
    rows = x.shape[0]
    layer = _prepared(qw, x.dtype, x.device, profile, options)
    plan = layer.plan_for(rows, 1)
    y = _output(out, (rows, n), x, zero=True)
    if rows:
        _launch(layer, x, routing_from_offsets(expert_offsets, rows, plan.tiles.bm), y, plan, 1, every_row=False)
    return y


def masked_gemm(x: torch.Tensor, qw, counts: torch.Tensor, *, out: torch.Tensor | None = None, profile=None,
                options=None) -> torch.Tensor:
    """A fixed capacity of rows per expert: x [E, cap, K], expert e multiplies its first counts[e] rows
    (``counts``: int [E], on the GPU; larger counts are clamped to cap). Returns [E, cap, N]; other rows are zero."""
    n, k = _check_x(x, qw, "humming.masked_gemm")
    experts = qw.num_experts
    if x.dim() != 3 or x.shape[0] != experts:
        raise ShapeError(f"x must be [{experts}, capacity, {k}] (one slab per expert), got {tuple(x.shape)}")
    if not isinstance(counts, torch.Tensor) or tuple(counts.shape) != (experts,):
        raise ShapeError(f"counts must be an integer tensor [{experts}], got {getattr(counts, 'shape', counts)}")
    arguments.same_device(x, "humming.masked_gemm", counts=counts)
    if not x.is_cuda:
        y = reference.reference_masked_gemm(x, qw, counts)
        return y if out is None else out.copy_(y)
    cap = x.shape[1]
    layer = _prepared(qw, x.dtype, x.device, profile, options)
    plan = layer.plan_for(experts * cap, 1)
    y = _output(out, (experts, cap, n), x, zero=True)
    if cap:
        _launch(layer, x, routing_from_counts(counts, cap, plan.tiles.bm), y, plan, 1, every_row=False)
    return y


@torch.library.custom_op("humming::moe_gemm", mutates_args=())
def _moe_gemm_op(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None,
                 expert_map: torch.Tensor | None, weight: int, gather: bool) -> torch.Tensor:
    """moe_gemm of the stacked weight with handle ``weight`` (humming.moe_ops), as traced graphs call it."""
    return moe_gemm(x, WEIGHTS[weight], topk_ids, topk_weights, gather=gather, expert_map=expert_map)


@_moe_gemm_op.register_fake
def _(x, topk_ids, topk_weights, expert_map, weight, gather):
    return x.new_empty((topk_ids.shape[0], topk_ids.shape[1], WEIGHTS[weight].shape[0]))
