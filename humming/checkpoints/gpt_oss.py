"""gpt-oss MXFP4 weights (the MoE expert matrices of the gpt-oss checkpoints).

``<name>.blocks`` uint8 ``[..., N, G, 16]``: each 16-byte block holds 32 e2m1 codes of consecutive k (low nibble
= even element), ``<name>.scales`` uint8 ``[..., N, G]`` E8M0 exponents; K = 32 * G. Leading dims are experts.
``W[n, 32 g + j] = FP4_VALUES[nibble] * 2**(scales[n, g] - 127)``. The original checkpoint names them
``<name>.blocks``/``<name>.scales``; the transformers conversion ``<name>_blocks``/``<name>_scales`` (both are
found). Imported as w4a16-mxfp4: one expert-stacked QuantizedWeight (``num_experts = E``) for stacked blocks.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints._common import check_dtype, check_shape, lookup, make_scheme
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import ShapeError

__all__ = ["from_gpt_oss", "load", "FP4_VALUES"]

FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def from_gpt_oss(blocks: torch.Tensor, scales: torch.Tensor, *, bias: torch.Tensor | None = None,
                 expert: int | None = None) -> QuantizedWeight:
    """The QuantizedWeight of ``[N, G, 16]`` blocks; for ``[E, N, G, 16]`` the expert-stacked one
    (``num_experts = E``, bias ``[E, N]``), or with ``expert`` the dense weight of that expert alone."""
    layout = "gpt-oss MXFP4"
    check_dtype(blocks, (torch.uint8,), "blocks", layout)
    check_dtype(scales, (torch.uint8,), "scales", layout)
    if blocks.dim() not in (3, 4) or blocks.shape[-1] != 16:
        raise ShapeError(f"{layout}: blocks must be [..., N, G, 16] (16 bytes = 32 fp4 per block): [N, G, 16] or "
                         f"[E, N, G, 16], got {list(blocks.shape)}")
    check_shape(scales, tuple(blocks.shape[:-1]), "scales", layout, "one E8M0 exponent per block")
    if blocks.dim() == 4:
        e = blocks.shape[0]
        if bias is not None and (bias.dim() != 2 or bias.shape[0] != e):
            raise ShapeError(f"{layout}: stacked bias must be [E={e}, N], got {list(bias.shape)}")
        if expert is not None:
            if not 0 <= expert < e:
                raise ShapeError(f"{layout}: expert {expert} out of range [0, {e})")
            blocks, scales, bias = blocks[expert], scales[expert], None if bias is None else bias[expert]
    elif expert is not None:
        raise ShapeError(f"{layout}: expert={expert} needs stacked blocks [E, N, G, 16], got {list(blocks.shape)}")
    *lead, n, g, _ = blocks.shape
    # 32 nibbles a block, low nibble first: the bytes already are the canonical LSB-first 4-bit stream, whose int32
    # words (little-endian) are the packed codes
    packed = blocks.reshape(*lead, n, g * 16).contiguous().view(torch.int32)
    scheme = make_scheme("e2m1", group=32, scale_fmt="ue8m0")
    return QuantizedWeight(scheme, (n, 32 * g), packed, scales.contiguous(), bias=bias)


def load(tensors: Mapping[str, torch.Tensor], prefix: str, *, expert: int | None = None,
         bias_name: str | None = None) -> QuantizedWeight:
    """Import ``prefix.blocks``/``prefix.scales`` (or ``prefix_blocks``/``prefix_scales``); the bias is
    ``bias_name`` if given, else ``prefix_bias`` when present."""
    layout = "gpt-oss MXFP4"
    blocks = lookup(tensors, prefix, "blocks", layout, seps=(".", "_"))
    scales = lookup(tensors, prefix, "scales", layout, seps=(".", "_"))
    bias = tensors.get(bias_name) if bias_name else lookup(tensors, prefix, "bias", layout, required=False,
                                                           seps=("_",))
    return from_gpt_oss(blocks, scales, bias=bias, expert=expert)
