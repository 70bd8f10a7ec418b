"""GPTQ checkpoints (AutoGPTQ / GPTQModel / optimum "gptq" layout).

Tensors of one linear layer ``prefix.*`` (W is ``[N, K]``, b = bits, G = number of groups):

``qweight``  int32 ``[K * b / 32, N]``: column n is an LSB-first bitstream of the K codes (3-bit codes cross
             word boundaries, 32 codes per 3 words)
``qzeros``   int32 ``[G, ceil(N * b / 32)]``: row g is an LSB-first bitstream of the N zero points
``scales``   float16 (or bf16/fp32) ``[G, N]``
``g_idx``    int32 ``[K]`` (optional): the group of each input column; a permutation of groups with desc_act

Dequantization (v1, the original format): ``W[n, k] = scales[g, n] * (q[k, n] - (z[g, n] + 1))`` with
``g = g_idx[k]``; gptq_v2 (GPTQModel) stores the true zero: ``W = scales * (q - z)``.

The import is exact: codes become the canonical uint codes with integer zeros ``z + 1`` (v1) or ``z`` (v2).
When every zero equals ``2**(b-1)`` (symmetric quantization, the common case) the weight is instead stored as
signed int codes without zero points (``q - 2**(b-1)``, e.g. the ``w4a16`` preset), which kernels run faster;
pass ``sym=False`` to keep the zero points. A natural g_idx (``k // group_size``) is dropped; any other
becomes ``qw.g_idx`` with ``act_order=True``.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints._common import (
    check_dtype,
    check_ndim,
    check_shape,
    infer_group,
    lookup,
    make_scheme,
    nontrivial_g_idx,
    scale_format,
)
from humming.core.quant.packing import packed_length, unpack_bits
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

__all__ = ["from_gptq", "load"]

SUPPORTED_BITS = (2, 3, 4, 8)


def from_gptq(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor | None = None,
              *, bits: int = 4, group_size: int | None = None, version: int = 1, sym: bool | None = None,
              bias: torch.Tensor | None = None) -> QuantizedWeight:
    """Import one GPTQ linear layer (see the module docstring). group_size=None infers it from K and the
    scales (-1 or None with one scale row: per channel)."""
    layout = f"GPTQ{'' if version == 1 else ' v2'}"
    if version not in (1, 2):
        raise SchemeError(f"GPTQ version must be 1 or 2 (gptq_v2), got {version}")
    if bits not in SUPPORTED_BITS:
        raise SchemeError(f"{layout}: bits={bits} is not a GPTQ width; use one of {SUPPORTED_BITS}")
    check_dtype(qweight, (torch.int32,), "qweight", layout)
    check_ndim(qweight, 2, "qweight", layout, "[K * bits / 32, N]")
    rows, n = qweight.shape
    if (rows * 32) % bits:
        raise ShapeError(f"{layout}: qweight has {rows} rows, which is not a whole number of {bits}-bit codes")
    k = rows * 32 // bits
    fmt = scale_format(scales, "scales", layout)
    check_ndim(scales, 2, "scales", layout, "[groups, N]")
    if scales.shape[1] != n:
        raise ShapeError(f"{layout}: scales must be [groups, N={n}] (N from qweight), got {list(scales.shape)}")
    n_groups = scales.shape[0]
    check_dtype(qzeros, (torch.int32,), "qzeros", layout)
    check_shape(qzeros, (n_groups, packed_length(n, bits)), "qzeros", layout,
                f"{n_groups} groups x {n} zero points of {bits} bits")
    group = infer_group(k, n_groups, group_size, layout)
    gi = nontrivial_g_idx(g_idx, k, group, n_groups, layout)

    q = unpack_bits(qweight, bits, k, dim=0)  # [K, N] uint8
    z = unpack_bits(qzeros, bits, n, dim=1).to(torch.int32)  # [G, N]
    if version == 1:
        z = z + 1
    half = 1 << (bits - 1)
    symmetric = bool(torch.all(z == half))
    if sym is True and not symmetric:
        raise SchemeError(f"{layout}: sym=True but the zero points are not all {half} "
                          f"(found {sorted(set(z.unique().tolist()))[:6]}); pass sym=None or False")
    use_signed = symmetric and sym is not False
    codes = q.t().contiguous()
    scales_t = scales.t().contiguous()
    if use_signed:
        scheme = make_scheme(f"int{bits}", group=group, scale_fmt=fmt, act_order=gi is not None)
        codes = codes ^ half  # q - 2**(b-1) in two's complement
        zeros = None
    else:
        if int(z.max()) > 255:
            raise SchemeError(f"{layout}: a zero point of {int(z.max())} does not fit; this v1 checkpoint has a "
                              f"wrapped zero (true zero 0 stored as -1); re-export it as gptq_v2")
        scheme = make_scheme(f"uint{bits}", group=group, scale_fmt=fmt, zero_point="int", act_order=gi is not None)
        zeros = z.t().contiguous().to(torch.uint8)
    return QuantizedWeight.from_codes(codes, scheme, scales_t, zeros=zeros, g_idx=gi, bias=bias)


def load(tensors: Mapping[str, torch.Tensor], prefix: str = "", *, bits: int = 4, group_size: int | None = None,
         version: int = 1, sym: bool | None = None) -> QuantizedWeight:
    """Import ``prefix.{qweight,qzeros,scales[,g_idx,bias]}`` from a mapping of tensors."""
    layout = "GPTQ" if version == 1 else "GPTQ v2"
    return from_gptq(
        lookup(tensors, prefix, "qweight", layout),
        lookup(tensors, prefix, "qzeros", layout),
        lookup(tensors, prefix, "scales", layout),
        lookup(tensors, prefix, "g_idx", layout, required=False),
        bits=bits, group_size=group_size, version=version, sym=sym,
        bias=lookup(tensors, prefix, "bias", layout, required=False),
    )
