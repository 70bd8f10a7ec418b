"""Weights padded to whole 64 x 64 weight atoms, once, when they are prepared.

Real models have output and input features that are multiples of 16 but not of 64 (vocabulary slices, tensor-parallel
shards such as Qwen3-MoE's intermediate size 768 / 8 = 96). Every kernel family reads weights in 64 x 64 atoms, so
such a weight is padded: codes 0 (a finite value in every format) in the new rows and columns, its last scale / zero
row and column repeated. The kernels that take padded weights (``Family.tails``) read activations only up to the real
K (zeros past it), so the padded input columns add nothing, and store only the real N output columns."""
from __future__ import annotations

import torch

from humming.errors import ShapeError

ALIGN = 16  # N and K of a padded weight: 16-byte activation rows, two-column output stores
ATOM = 64  # the weight atom's side


def padded_dims(n: int, k: int) -> tuple[int, int]:
    """(N, K) rounded up to whole weight atoms; a ShapeError naming the fix where they are not multiples of 16."""
    bad = [f"{name}={v}" for name, v in (("N", n), ("K", k)) if v % ALIGN]
    if bad:
        raise ShapeError(f"{' and '.join(bad)} {'are' if len(bad) > 1 else 'is'} not a multiple of {ALIGN}: the kernels read 16-byte rows and store "
                         f"two columns at a time; pad the weight's {'output' if n % ALIGN else 'input'} features to a "
                         f"multiple of {ALIGN} (zeros)")
    return -(-n // ATOM) * ATOM, -(-k // ATOM) * ATOM


def pad_note(n: int, k: int, n_pad: int, k_pad: int) -> str:
    """The plan's reason for a padded weight: what was padded and what it costs."""
    extra = n_pad * k_pad / (n * k) - 1
    parts = [f"N {n} -> {n_pad}" if n_pad != n else "", f"K {k} -> {k_pad}" if k_pad != k else ""]
    return (f"padded once at prepare ({', '.join(p for p in parts if p)}): {extra:.1%} more weight bytes and MMA work; "
            f"activations read up to K={k}, outputs stored up to N={n}")


def grow_table(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A 2-D table (scales, zeros) grown to [rows, cols] by repeating its last row and column."""
    if t.shape[0] < rows:
        t = torch.cat([t, t[-1:].expand(rows - t.shape[0], t.shape[1])], 0)
    if t.shape[1] < cols:
        t = torch.cat([t, t[:, -1:].expand(t.shape[0], cols - t.shape[1])], 1)
    return t.contiguous()


def padded_weight(qw, n_to: int, k_to: int):
    """A dense (one expert's) QuantizedWeight padded to [n_to, k_to] (the module docstring); itself where no padding
    is needed. Act-order weights (a K permutation) are refused: their padded columns would have no activation."""
    from humming.core.quant.quantize import QuantizedWeight

    n, k = qw.shape
    if (n, k) == (n_to, k_to):
        return qw
    if qw.g_idx is not None:
        raise ShapeError(f"act-order (g_idx) weights need N and K that are multiples of {ATOM}, got N={n} K={k}; "
                         f"pad the layer's features or export without desc_act")
    codes = torch.nn.functional.pad(qw.codes(), (0, k_to - k, 0, n_to - n))
    rows, cols = QuantizedWeight.scale_shape(qw.scheme, n_to, k_to)
    scales = grow_table(qw.scales, rows, cols)
    zeros = None if qw.zeros is None else grow_table(qw.zeros, rows, cols)
    bias = None if qw.bias is None else torch.nn.functional.pad(qw.bias, (0, n_to - n))
    return QuantizedWeight.from_codes(codes, qw.scheme, scales, zeros=zeros, global_scale=qw.global_scale, bias=bias,
                                      input_scale=qw.input_scale)
