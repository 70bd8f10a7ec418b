"""Parts of a quantized weight taken without requantizing: some of its experts, rows (N) or columns (K), and rows or
columns reordered. Every function returns a new :class:`~humming.core.quant.quantize.QuantizedWeight` (dense or
expert-stacked like its input, the same scheme) whose dequantized values are exactly the matching part of the
input's; the input is unchanged.

Rows are whole entries of every per-row tensor (codes, row-wise scales and zeros, bias); block scales cover ``bn``
rows each, so a row range must start on a block boundary and end on one (or at N). Columns are codes inside each
row's bitstream: a column range whose ends fall on word boundaries is a slice of the int32 words, any other is
unpacked and packed again. Column ranges must hold whole scale groups (group scales: ``start`` and ``stop`` multiples
of the group size; block scales: of ``bk``, or ``stop == K``); an act-order weight (``g_idx``) keeps the groups its
columns reference, each of which must lie wholly inside the range, and gets ``g_idx`` renumbered to index its own
scales. Errors are :class:`~humming.errors.ShapeError` naming the constraint, or
:class:`~humming.errors.SchemeError` where the scheme's scale layout cannot be reordered.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from humming.core.quant.packing import pack_bits, packed_length
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

__all__ = ["slice_experts", "take_rows", "permute_rows", "slice_columns", "permute_columns", "cat_rows"]


def _rebuild(qw: QuantizedWeight, shape: tuple[int, int], **changes) -> QuantizedWeight:
    t = qw._tensors()
    t.update(changes)
    return QuantizedWeight(qw.scheme, shape, t.pop("packed"), t.pop("scales"), num_experts=qw.num_experts, **t)


def _range(start: int, stop: int, size: int, what: str, axis: str) -> tuple[int, int]:
    start, stop = int(start), int(stop)
    if not 0 <= start < stop <= size:
        raise ShapeError(f"{what}: {axis} range [{start}, {stop}) must be non-empty and within [0, {size})")
    return start, stop


def _index(perm: torch.Tensor, qw: QuantizedWeight, size: int, what: str) -> torch.Tensor:
    """A permutation of ``size`` as int64 ``[size]`` (every expert) or ``[E, size]`` (one per expert)."""
    e = qw.num_experts
    shapes = [(size,)] + ([] if e is None else [(e, size)])
    if not isinstance(perm, torch.Tensor) or tuple(perm.shape) not in shapes or perm.is_floating_point():
        raise ShapeError(f"{what} must be an integer tensor of shape {' or '.join(map(str, map(list, shapes)))}, "
                         f"got {getattr(perm, 'dtype', type(perm).__name__)} {list(getattr(perm, 'shape', []))}")
    perm = perm.to(device=qw.device, dtype=torch.int64)
    want = torch.arange(size, device=qw.device).expand_as(perm)
    if not torch.equal(torch.sort(perm, dim=-1).values, want):
        raise ShapeError(f"{what} must be a permutation of 0..{size - 1} (per expert where it has a row per expert)")
    return perm


def _gather(t: torch.Tensor | None, idx: torch.Tensor, dim: int) -> torch.Tensor | None:
    """``t`` indexed along ``dim`` by ``idx``: ``[n]`` (shared) or ``[E, n]`` (per expert, ``t``'s first dim E)."""
    if t is None:
        return None
    if idx.dim() == 1:
        return t.index_select(dim, idx.to(t.device))
    raw = t.view(torch.uint8) if t.is_floating_point() and t.element_size() == 1 else t  # (fp8: no CPU gather)
    dim = dim % t.dim()
    shape = [idx.shape[0]] + [1] * (t.dim() - 1)
    shape[dim] = idx.shape[1]
    return torch.take_along_dim(raw, idx.to(t.device).reshape(shape), dim=dim).view(t.dtype)


# ------------------------------------------------------------------------------------------------- experts
def slice_experts(qw: QuantizedWeight, start: int, stop: int) -> QuantizedWeight:
    """Experts ``[start, stop)`` of an expert-stacked weight, as a stacked weight of ``stop - start`` experts."""
    if qw.num_experts is None:
        raise ShapeError("slice_experts needs an expert-stacked weight; this one is dense (num_experts is None)")
    start, stop = _range(start, stop, qw.num_experts, "slice_experts", "expert")
    t = {name: (None if v is None else v[start:stop]) for name, v in qw._tensors().items()}
    return QuantizedWeight(qw.scheme, qw.shape, t.pop("packed"), t.pop("scales"), num_experts=stop - start, **t)


# ------------------------------------------------------------------------------------------------- rows (N)
def _rows(qw: QuantizedWeight, idx: torch.Tensor, scale_idx: torch.Tensor | None) -> QuantizedWeight:
    """Rows ``idx`` of every per-row tensor; ``scale_idx``: the scale rows (None: the scales are not per row)."""
    dim = 0 if qw.num_experts is None else 1
    scales, zeros = qw.scales, qw.zeros
    if scale_idx is not None:
        scales, zeros = _gather(scales, scale_idx, dim), _gather(zeros, scale_idx, dim)
    n = idx.shape[-1]
    return _rebuild(qw, (n, qw.shape[1]), packed=_gather(qw.packed, idx, dim), scales=scales, zeros=zeros,
                    bias=_gather(qw.bias, idx, dim))


def take_rows(qw: QuantizedWeight, ranges: Sequence[tuple[int, int]], *, what: str = "weight") -> QuantizedWeight:
    """Rows ``[s0, e0) + [s1, e1) + ...`` (of every expert), in that order: an ``[sum(e - s), K]`` weight.

    Block scales (``bn`` rows each) need every range to start on a multiple of ``bn`` and end on one (the last may
    end at N instead); ``what`` names the weight in errors."""
    n = qw.shape[0]
    ranges = [_range(s, e, n, what, "row") for s, e in ranges]
    if not ranges:
        raise ShapeError(f"{what}: take_rows needs at least one row range")
    idx = torch.cat([torch.arange(s, e, device=qw.device) for s, e in ranges])
    ws = qw.scheme.weight_scale
    if ws.granularity == "tensor":
        return _rows(qw, idx, None)
    if ws.granularity != "block":
        return _rows(qw, idx, idx)
    bn = ws.block[0]
    for i, (s, e) in enumerate(ranges):
        last = i == len(ranges) - 1
        if s % bn or (e % bn and not (last and e == n)):
            raise ShapeError(f"{what}: rows [{s}, {e}) split a {bn}-row scale block: with {bn}x{ws.block[1]} block "
                             f"scales a row range must start and end on multiples of {bn} (only the last may end "
                             f"at N={n})")
    blocks = torch.cat([torch.arange(s // bn, -(-e // bn), device=qw.device) for s, e in ranges])
    return _rows(qw, idx, blocks)


def permute_rows(qw: QuantizedWeight, perm: torch.Tensor) -> QuantizedWeight:
    """Rows reordered: row ``i`` of the result is row ``perm[i]`` (``perm`` ``[N]``, or ``[E, N]``: one order per
    expert). Block scales share one scale over several rows and cannot be reordered (SchemeError)."""
    ws = qw.scheme.weight_scale
    if ws.granularity == "block":
        raise SchemeError(f"{qw.scheme.name}: {ws.describe()} share one scale over {ws.block[0]} rows; their rows "
                          f"cannot be reordered")
    idx = _index(perm, qw, qw.shape[0], "perm")
    return _rows(qw, idx, None if ws.granularity == "tensor" else idx)


def _same(tensors: list, name: str, what: str) -> torch.Tensor | None:
    """The one value every weight holds for ``name`` (all None, or all equal), or ShapeError."""
    first = tensors[0]
    for t in tensors[1:]:
        if (t is None) != (first is None) or (t is not None and not torch.equal(t.to(first.device), first)):
            raise ShapeError(f"{what}: the weights differ in {name}; they can only be joined where it is shared "
                             f"(requantize them with one {name})")
    return first


def cat_rows(weights: Sequence[QuantizedWeight], *, what: str = "weights") -> QuantizedWeight:
    """The weights' rows one after another (of every expert): an ``[sum N, K]`` weight, e.g. gate and up projections
    as one gate+up weight. They must share the scheme, K, the expert count and what is not per row (a global
    scale, act-order ``g_idx``, a static input scale, per-tensor scales); with block scales every weight but the
    last must end on a whole block."""
    weights = list(weights)
    if not weights:
        raise ShapeError(f"{what}: cat_rows needs at least one weight")
    first = weights[0]
    for qw in weights[1:]:
        if qw.scheme != first.scheme or qw.shape[1] != first.shape[1] or qw.num_experts != first.num_experts:
            raise ShapeError(f"{what}: cat_rows needs one scheme, K and expert count; got {first.scheme} "
                             f"{list(first.shape)} x {first.num_experts} and {qw.scheme} {list(qw.shape)} x "
                             f"{qw.num_experts}")
    ws = first.scheme.weight_scale
    if ws.granularity == "block":
        bad = [qw.shape[0] for qw in weights[:-1] if qw.shape[0] % ws.block[0]]
        if bad:
            raise ShapeError(f"{what}: N={bad[0]} is not a whole number of {ws.block[0]}-row scale blocks")
    dim = 0 if first.num_experts is None else 1

    def joined(name: str) -> torch.Tensor | None:
        parts = [getattr(qw, name) for qw in weights]
        if all(p is None for p in parts):
            return None
        if name == "bias" and any(p is None for p in parts):  # a missing bias is zeros
            parts = [torch.zeros(*([qw.num_experts] if dim else []), qw.shape[0], dtype=next(
                p for p in parts if p is not None).dtype, device=qw.device) if p is None else p
                for p, qw in zip(parts, weights)]
        return torch.cat(parts, dim)

    per_row_scales = ws.granularity != "tensor"
    scales = joined("scales") if per_row_scales else _same([qw.scales for qw in weights], "scales", what)
    zeros = joined("zeros") if per_row_scales else _same([qw.zeros for qw in weights], "zeros", what)
    return QuantizedWeight(first.scheme, (sum(qw.shape[0] for qw in weights), first.shape[1]), joined("packed"),
                           scales, zeros=zeros, bias=joined("bias"), num_experts=first.num_experts,
                           global_scale=_same([qw.global_scale for qw in weights], "global_scale", what),
                           g_idx=_same([qw.g_idx for qw in weights], "g_idx", what),
                           input_scale=_same([qw.input_scale for qw in weights], "input_scale", what))


# ------------------------------------------------------------------------------------------------- columns (K)
def _code_columns(qw: QuantizedWeight, start: int, stop: int) -> torch.Tensor:
    bits, k = qw.bits, qw.shape[1]
    if (start * bits) % 32 == 0 and ((stop * bits) % 32 == 0 or stop == k):
        return qw.packed[..., start * bits // 32: packed_length(stop, bits)].contiguous()
    return pack_bits(qw.codes()[..., start:stop], bits)


def _act_order_groups(qw: QuantizedWeight, start: int, stop: int, what: str):
    """(scales, zeros, g_idx) of columns ``[start, stop)`` of an act-order weight: the groups they reference."""
    stacked = qw.num_experts is not None
    g_idx = qw.g_idx if stacked else qw.g_idx[None]
    scales = qw.scales if stacked else qw.scales[None]
    zeros = None if qw.zeros is None else (qw.zeros if stacked else qw.zeros[None])
    groups, need = scales.shape[-1], (stop - start) // qw.group_size
    out_s, out_z, out_g = [], [], []
    for e in range(g_idx.shape[0]):
        full = g_idx[e].to(torch.int64)
        part = full[start:stop]
        used, inside = torch.unique(part, return_counts=True)
        split = int((torch.bincount(full, minlength=groups)[used] != inside).sum())
        if used.numel() != need or split:
            who = f"expert {e}'s" if stacked else "its"
            raise ShapeError(f"{what}: columns [{start}, {stop}) of an act-order (g_idx) weight must hold whole "
                             f"scale groups ({need} of them), but {who} columns reference {used.numel()} groups, "
                             f"{split} of them only in part: act-order scatters each group over K, so a K slice "
                             f"would need every group's scales (vLLM's is_k_full=False), which this layout does not "
                             f"hold; order the columns by group first (permute_columns with argsort(g_idx); a MoE "
                             f"layer's tensor-parallel split does so), or use a weight without act-order")
        out_s.append(scales[e][..., used])
        if zeros is not None:
            out_z.append(zeros[e][..., used])
        out_g.append(torch.searchsorted(used, part).to(torch.int32))

    def join(parts):
        return None if not parts else (torch.stack(parts) if stacked else parts[0])

    return join(out_s), join(out_z), join(out_g)


def slice_columns(qw: QuantizedWeight, start: int, stop: int, *, what: str = "weight") -> QuantizedWeight:
    """Columns ``[start, stop)`` (of every expert): an ``[N, stop - start]`` weight; see the module docstring for
    the scale-group constraints. ``what`` names the weight in errors."""
    n, k = qw.shape
    start, stop = _range(start, stop, k, what, "column")
    ws = qw.scheme.weight_scale
    scales, zeros, g_idx = qw.scales, qw.zeros, qw.g_idx
    if ws.granularity == "group":
        g = ws.group_size
        if start % g or stop % g:
            raise ShapeError(f"{what}: columns [{start}, {stop}) split a scale group: with group_size {g} a column "
                             f"range must start and end on multiples of {g}")
        if g_idx is not None:
            scales, zeros, g_idx = _act_order_groups(qw, start, stop, what)
        else:
            scales = scales[..., start // g: stop // g]
            zeros = None if zeros is None else zeros[..., start // g: stop // g]
    elif ws.granularity == "block":
        bk = ws.block[1]
        if start % bk or (stop % bk and stop != k):
            raise ShapeError(f"{what}: columns [{start}, {stop}) split a {bk}-column scale block: with "
                             f"{ws.block[0]}x{bk} block scales a column range must start and end on multiples of "
                             f"{bk} (or end at K={k})")
        scales = scales[..., start // bk: -(-stop // bk)]
    return _rebuild(qw, (n, stop - start), packed=_code_columns(qw, start, stop),
                    scales=scales.contiguous(), zeros=None if zeros is None else zeros.contiguous(), g_idx=g_idx)


def permute_columns(qw: QuantizedWeight, perm: torch.Tensor) -> QuantizedWeight:
    """Columns reordered: column ``j`` of the result is column ``perm[j]`` (``perm`` ``[K]``, or ``[E, K]``: one
    order per expert). An act-order weight's ``g_idx`` moves with its columns; per-channel and per-tensor scales
    are unchanged; contiguous group scales and block scales tie columns to their position (SchemeError)."""
    ws = qw.scheme.weight_scale
    if ws.granularity == "block" or (ws.granularity == "group" and qw.g_idx is None):
        raise SchemeError(f"{qw.scheme.name}: {ws.describe()} tie each column to its position; only act-order "
                          f"(g_idx), per-channel or per-tensor weights can reorder their columns")
    idx = _index(perm, qw, qw.shape[1], "perm")
    packed = pack_bits(_gather(qw.codes(), idx, -1), qw.bits)
    return _rebuild(qw, qw.shape, packed=packed, g_idx=_gather(qw.g_idx, idx, -1))
