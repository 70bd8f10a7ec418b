"""Instruction entries of a profile (already shape-checked by schema.py) -> MmaInstruction objects.

One entry may expand to several instructions: `types: [f16, bf16]` gives f16 x f16 and bf16 x bf16;
`a_types` x `b_types` gives every pair; each `scales` option gives its own block-scaled form.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from humming.capabilities.checks import Where, to_version
from humming.capabilities.model import MmaInstruction

_BLOCK_SCALED_KINDS = ("mxf8f6f4", "mxf4", "mxf4nvf4")


@dataclass(frozen=True)
class Declared:
    """An instruction with the place that declared it, so later errors can point at the right file."""

    ins: MmaInstruction
    where: Where
    profile: str


def _n_values(raw: Any) -> tuple[int, ...]:
    if isinstance(raw, dict):
        return tuple(range(raw["min"], raw["max"] + 1, raw["step"]))
    return tuple(sorted(set(raw)))


def _type_pairs(entry: dict, where: Where) -> list[tuple[str, str]]:
    has_types = "types" in entry
    has_ab = "a_types" in entry or "b_types" in entry
    if has_types and has_ab:
        where.fail("give either 'types' (A and B the same) or 'a_types' + 'b_types', not both")
    if has_types:
        return [(t, t) for t in entry["types"]]
    if "a_types" in entry and "b_types" in entry:
        return list(itertools.product(entry["a_types"], entry["b_types"]))
    if has_ab:
        where.fail("'a_types' and 'b_types' go together")
    where.fail("missing operand types: give 'types' or 'a_types' + 'b_types'")


def parse_entry(entry: dict, family: str, where: Where, kind: str | None = None,
                extension: str | None = None) -> list[MmaInstruction]:
    kind = entry.get("kind", kind)
    shape = tuple(entry["shape"])
    n_values: tuple[int, ...] = ()
    if "n_values" in entry:
        if family == "mma_sync":
            where.key("n_values").fail("mma.sync has fixed shapes; n_values is for wgmma/tcgen05")
        n_values = _n_values(entry["n_values"])
        if max(n_values) != shape[1]:
            where.key("shape").fail(f"n={shape[1]} must be the largest of n_values (max {max(n_values)})")
    scaled = kind in _BLOCK_SCALED_KINDS
    if scaled and "scales" not in entry:
        where.fail(f"kind {kind} is block-scaled: declare its 'scales' (format and vec)")
    if not scaled and "scales" in entry:
        where.key("scales").fail(f"scales are only for block-scaled kinds ({', '.join(_BLOCK_SCALED_KINDS)})")
    base_min = to_version(entry["min_nvrtc"]) if "min_nvrtc" in entry else None
    scale_options: list[tuple[str | None, tuple[int, ...], Any]] = [(None, (), base_min)]
    if scaled:
        scale_options = []
        for option in entry["scales"]:
            own = to_version(option["min_nvrtc"]) if "min_nvrtc" in option else None
            newest = max((v for v in (base_min, own) if v is not None), default=None)
            scale_options.append((option["format"], tuple(sorted(set(option["vec"]))), newest))
    acc = tuple(entry["acc"])
    return [
        MmaInstruction(family=family, shape=shape, a_type=a, b_type=b, acc_types=acc, kind=kind,
                       scale_format=fmt, scale_vec=vec, extension=extension, n_values=n_values, min_nvrtc=mv)
        for a, b in _type_pairs(entry, where)
        for fmt, vec, mv in scale_options
    ]


def parse_shapes(section: dict, family: str, where: Where, profile: str) -> list[Declared]:
    out = []
    for i, entry in enumerate(section.get("shapes", [])):
        w = where.key("shapes").item(i)
        out += [Declared(ins, w, profile) for ins in parse_entry(entry, family, w)]
    return out


def parse_tcgen05_kinds(kinds: dict, where: Where, profile: str) -> dict[str, list[Declared]]:
    out: dict[str, list[Declared]] = {}
    for kind, value in kinds.items():
        w = where.key("kinds").key(kind)
        entries = value if isinstance(value, list) else [value]
        out[kind] = []
        for i, entry in enumerate(entries):
            wi = w.item(i) if isinstance(value, list) else w
            out[kind] += [Declared(ins, wi, profile) for ins in parse_entry(entry, "tcgen05", wi, kind=kind)]
    return out


def selector_matches(selector: dict, ins: MmaInstruction) -> bool:
    """mma_sync.remove / wgmma.remove: every given field must match."""
    if "shape" in selector and tuple(selector["shape"]) != ins.shape:
        return False
    if "type" in selector and selector["type"] not in (ins.a_type, ins.b_type):
        return False
    if "kind" in selector and selector["kind"] != ins.kind:
        return False
    return True


def covers(allowed: MmaInstruction, ins: MmaInstruction) -> bool:
    """True when `allowed` (a target rule) permits the declared `ins`."""
    if (allowed.family, allowed.kind, allowed.a_type, allowed.b_type, allowed.scale_format) != (
        ins.family, ins.kind, ins.a_type, ins.b_type, ins.scale_format
    ):
        return False
    if not set(ins.acc_types) <= set(allowed.acc_types):
        return False
    if not set(ins.scale_vec) <= set(allowed.scale_vec):
        return False
    if allowed.min_nvrtc and (ins.min_nvrtc is None or ins.min_nvrtc < allowed.min_nvrtc):
        return False
    if allowed.n_values:
        ns = ins.n_values or (ins.n,)
        return ins.m == allowed.m and ins.k == allowed.k and set(ns) <= set(allowed.n_values)
    return ins.shape == allowed.shape and not ins.n_values
