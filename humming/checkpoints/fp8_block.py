"""Block-scaled FP8 checkpoints: DeepSeek-V3 / R1 and the other Hugging Face ``quant_method: fp8`` models with
``weight_block_size`` (fine-grained FP8).

Tensors of one linear layer ``prefix.*``:

``weight``            float8_e4m3fn ``[N, K]``
``weight_scale_inv``  float32 (or bf16/f16) ``[ceil(N / bn), ceil(K / bk)]``: one scale per ``bn x bk`` block
                      (``weight_block_size``, 128x128 in DeepSeek-V3); despite its name a multiplier

``W[n, k] = weight[n, k] * weight_scale_inv[n // bn, k // bk]``. Imported as the ``w8a8-fp8-block`` preset (FP8
activations quantized per token and 128-wide group, as these models run), with ``block=`` for other block sizes.
Scales of 16-bit types are widened to float32 (exactly). Expert-stacked tensors (``weight [E, N, K]``, scales
``[E, ceil(N / bn), ceil(K / bk)]``) import as one expert-stacked weight; per-expert tensors
(``...experts.{e}.gate_proj.weight``) stack with :func:`humming.checkpoints.import_experts`.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from humming.checkpoints._common import check_dtype, check_shape, lookup
from humming.core.quant.quantize import QuantizedWeight
from humming.core.quant.schemes import get as get_scheme
from humming.errors import ShapeError

__all__ = ["from_fp8_block", "load"]

_SCALE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def from_fp8_block(weight: torch.Tensor, weight_scale_inv: torch.Tensor, *, block: tuple[int, int] = (128, 128),
                   bias: torch.Tensor | None = None) -> QuantizedWeight:
    """Import ``weight [N, K]`` (or ``[E, N, K]``: expert-stacked) and its per-block scales (see the module
    docstring)."""
    layout = "block FP8"
    check_dtype(weight, (torch.float8_e4m3fn,), "weight", layout)
    if weight.dim() not in (2, 3):
        raise ShapeError(f"{layout}: weight must be [N, K] or [E, N, K], got shape {list(weight.shape)}")
    check_dtype(weight_scale_inv, _SCALE_DTYPES, "weight_scale_inv", layout)
    bn, bk = (int(v) for v in block)
    *lead, n, k = weight.shape
    check_shape(weight_scale_inv, (*lead, -(-n // bn), -(-k // bk)), "weight_scale_inv", layout,
                f"one scale per {bn}x{bk} block of a {n}x{k} weight")
    scheme = get_scheme("w8a8-fp8-block")
    if (bn, bk) != scheme.weight_scale.block:
        scheme = scheme.with_(block=(bn, bk), act_group_size=bk)
    return QuantizedWeight.from_codes(weight.view(torch.uint8), scheme,
                                      weight_scale_inv.to(torch.float32).contiguous(), bias=bias)


def load(tensors: Mapping[str, torch.Tensor], prefix: str = "", *,
         block: tuple[int, int] = (128, 128)) -> QuantizedWeight:
    """Import ``prefix.{weight,weight_scale_inv[,bias]}``; ``block``: the config's ``weight_block_size``."""
    layout = "block FP8"
    return from_fp8_block(lookup(tensors, prefix, "weight", layout),
                          lookup(tensors, prefix, "weight_scale_inv", layout), block=block,
                          bias=lookup(tensors, prefix, "bias", layout, required=False))
