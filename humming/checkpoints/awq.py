"""AWQ checkpoints (AutoAWQ "GEMM" layout).

``qweight`` int32 ``[K, N / 8]``: each word holds 8 4-bit codes of consecutive output columns, in the nibble
order ``(0, 2, 4, 6, 1, 3, 5, 7)`` (nibble i, bits 4i..4i+3, holds column ``8w + order[i]``; unpacking reads
nibble ``(0, 4, 1, 5, 2, 6, 3, 7)[j]`` for column j);
``qzeros`` int32 ``[G, N / 8]``, same packing; ``scales`` float16 ``[G, N]``.
Dequantization: ``W[n, k] = (q[k, n] - z[k // g, n]) * scales[k // g, n]`` (true zeros, no +1).
Imported as uint4 codes with integer zero points (the ``w4a16-zp`` preset). The AutoAWQ "GEMV" layout is not
supported.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints._common import check_dtype, check_ndim, check_shape, infer_group, lookup, make_scheme
from humming.checkpoints._common import scale_format as _scale_format
from humming.core.quant.packing import AWQ_ORDER, unpack_bits
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

__all__ = ["from_awq", "load", "AWQ_ORDER"]


def from_awq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, *, bits: int = 4,
             group_size: int | None = None, bias: torch.Tensor | None = None) -> QuantizedWeight:
    layout = "AWQ"
    if bits != 4:
        raise SchemeError(f"{layout}: only 4-bit AWQ checkpoints exist in this layout, got bits={bits}")
    check_dtype(qweight, (torch.int32,), "qweight", layout)
    check_ndim(qweight, 2, "qweight", layout, "[K, N / 8]")
    k, words = qweight.shape
    fmt = _scale_format(scales, "scales", layout)
    check_ndim(scales, 2, "scales", layout, "[groups, N]")
    n_groups, n = scales.shape
    if words * 8 != n:
        raise ShapeError(f"{layout}: qweight [K, N/8] has {words} words per row but scales say N={n} "
                         f"(expected {n // 8 if n % 8 == 0 else 'N divisible by 8'})")
    check_dtype(qzeros, (torch.int32,), "qzeros", layout)
    check_shape(qzeros, (n_groups, words), "qzeros", layout, "[groups, N / 8]")
    group = infer_group(k, n_groups, group_size, layout)
    q = unpack_bits(qweight, 4, n, dim=1, order=AWQ_ORDER)  # [K, N]
    z = unpack_bits(qzeros, 4, n, dim=1, order=AWQ_ORDER)  # [G, N]
    scheme = make_scheme("uint4", group=group, scale_fmt=fmt, zero_point="int")
    return QuantizedWeight.from_codes(q.t().contiguous(), scheme, scales.t().contiguous(),
                                      zeros=z.t().contiguous(), bias=bias)


def load(tensors: Mapping[str, torch.Tensor], prefix: str = "", *, group_size: int | None = None) -> QuantizedWeight:
    layout = "AWQ"
    return from_awq(
        lookup(tensors, prefix, "qweight", layout),
        lookup(tensors, prefix, "qzeros", layout),
        lookup(tensors, prefix, "scales", layout),
        group_size=group_size,
        bias=lookup(tensors, prefix, "bias", layout, required=False),
    )
