"""Per-expert checkpoint tensors -> one expert-stacked QuantizedWeight.

Mixture-of-experts checkpoints of most layouts store each expert as its own linear layer
(``model.layers.0.mlp.experts.{e}.gate_proj.weight_packed``). A *prefix template* names one projection of one layer
with ``{e}`` where the expert index goes; :func:`expert_ids` finds the experts present, each is imported as a dense
weight, :func:`harmonize` gives them one scheme where their imports differ only in form, and
``QuantizedWeight.stack`` stacks them (:func:`humming.checkpoints.import_experts` does all three).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import torch

from humming.core.quant.experts import scheme_differences
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError

__all__ = ["PLACEHOLDER", "template_parts", "expert_ids", "resolve_experts", "harmonize"]

PLACEHOLDER = "{e}"


def template_parts(template: str) -> tuple[str, str]:
    """(text before ``{e}``, text after it) of a prefix template; SchemeError without exactly one ``{e}``."""
    if template.count(PLACEHOLDER) != 1:
        raise SchemeError(f"an expert prefix must contain {PLACEHOLDER} once, where the expert index goes (e.g. "
                          f"'model.layers.0.mlp.experts.{{e}}.gate_proj'), got {template!r}")
    before, _, after = template.partition(PLACEHOLDER)
    return before, after


def name_pattern(template: str) -> re.Pattern:
    """Tensor names of any expert under the template: group 1 is the expert index."""
    before, after = template_parts(template)
    return re.compile(re.escape(before) + r"(\d+)" + re.escape(after) + r"(?:[._]|$)")


def expert_ids(names: Iterable[str], template: str) -> list[int]:
    """The sorted expert indices that some tensor name under ``template`` has."""
    pattern = name_pattern(template)
    return sorted({int(m.group(1)) for name in names if (m := pattern.match(name))})


def resolve_experts(names: Iterable[str], template: str, experts: int | Sequence[int] | None) -> list[int]:
    """The experts to stack, in order: ``experts`` (a count E for 0..E-1, or the indices, e.g. an expert-parallel
    rank's), or every expert found, which must then be 0..E-1 without a gap."""
    if experts is not None:
        ids = list(range(experts)) if isinstance(experts, int) else [int(e) for e in experts]
        if not ids:
            raise SchemeError("experts= names no expert")
        return ids
    found = expert_ids(names, template)
    if not found:
        raise SchemeError(f"no tensor matches the expert prefix {template!r} (expected names like "
                          f"{template.replace(PLACEHOLDER, '0')}.<tensor>)")
    missing = sorted(set(range(found[-1] + 1)) - set(found))
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
        raise SchemeError(f"experts {shown} of 0..{found[-1]} are missing under {template!r}; pass experts= (the "
                          f"indices to stack) for a partial checkpoint")
    return found


def _with_g_idx(qw: QuantizedWeight) -> QuantizedWeight:
    """The same weight with its natural column order spelled out as an act-order g_idx."""
    k = qw.shape[1]
    g_idx = (torch.arange(k, device=qw.device) // qw.scheme.weight_scale.group_size).to(torch.int32)
    return QuantizedWeight(qw.scheme.with_(act_order=True), qw.shape, qw.packed, qw.scales, zeros=qw.zeros,
                           global_scale=qw.global_scale, g_idx=g_idx, bias=qw.bias, input_scale=qw.input_scale)


def _with_zeros(qw: QuantizedWeight, like: QuantizedWeight) -> QuantizedWeight:
    """Signed int codes as the unsigned codes ``q + 2**(b-1)`` with integer zero points ``2**(b-1)`` (exact), under
    ``like``'s scheme."""
    half = 1 << (qw.bits - 1)
    rows, groups = qw.scales.shape
    zeros = torch.full((rows, groups), half, dtype=torch.uint8, device=qw.device)
    return QuantizedWeight.from_codes(qw.codes() ^ half, like.scheme, qw.scales,
                                      zeros=zeros, global_scale=qw.global_scale, g_idx=qw.g_idx, bias=qw.bias,
                                      input_scale=qw.input_scale)


def harmonize(weights: Sequence[QuantizedWeight]) -> list[QuantizedWeight]:
    """Per-expert imports under one scheme where they differ only in form: a natural column order among act-order
    experts becomes an explicit g_idx, and symmetric int codes among experts with integer zero points (GPTQ
    detects symmetry per expert) become unsigned codes with zero points ``2**(b-1)``. Exact; other differences
    are left for ``QuantizedWeight.stack`` to report."""
    ws = list(weights)
    if any(w.scheme.act_order for w in ws):
        ws = [w if w.scheme.act_order or w.scheme.weight_scale.granularity != "group" else _with_g_idx(w) for w in ws]
    zp = next((w for w in ws if w.scheme.zero_point == "int" and w.scheme.weight.startswith("uint")), None)
    if zp is not None:
        signed = f"int{zp.bits}"
        ws = [_with_zeros(w, zp) if w.scheme.weight == signed and
              scheme_differences(w.scheme, zp.scheme) == ["weight", "zero_point"] else w for w in ws]
    return ws
