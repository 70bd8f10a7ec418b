"""Apply `extends`: merge a chain of profile documents, oldest ancestor first.

Rules: mappings (target, memory, limits, formats) merge key by key, the child winning; setting
`target.arch` resets the inherited family and min_nvrtc to the new target's defaults. Instruction
lists accumulate; `remove` / `kinds_remove` take inherited ones away (and must remove something);
tcgen05 kinds and vendor extensions replace the parent's of the same name. Notes and sources
accumulate, the child's first. `name`, `abstract`, `display_name` and `match` are never inherited.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from humming.capabilities.checks import Where
from humming.capabilities.document import ProfileDoc
from humming.capabilities.entries import Declared, selector_matches
from humming.capabilities.model import VendorExtension

Located = tuple[Any, Where]


@dataclass
class Merged:
    scalars: dict[str, Located] = field(default_factory=dict)
    target: dict[str, Located] = field(default_factory=dict)
    memory: dict[str, Located] = field(default_factory=dict)
    limits: dict[str, Located] = field(default_factory=dict)
    formats: dict[str, Located] = field(default_factory=dict)
    mma_sync: list[Declared] = field(default_factory=list)
    wgmma: list[Declared] = field(default_factory=list)
    tcgen05: dict[str, list[Declared]] = field(default_factory=dict)
    extensions: dict[str, tuple[VendorExtension, list[Declared]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def instructions(self) -> list[Declared]:
        out = self.mma_sync + self.wgmma
        for decls in self.tcgen05.values():
            out += decls
        for _, decls in self.extensions.values():
            out += decls
        return out


def _signature(d: Declared) -> tuple:
    i = d.ins
    return (i.family, i.shape, i.a_type, i.b_type, i.kind, i.scale_format, i.scale_vec, i.extension)


def _update(into: dict[str, Located], section: dict, where: Where) -> None:
    for key, value in section.items():
        into[key] = (value, where.key(key))


def _remove(current: list[Declared], removals: list[tuple[dict, Where]], family: str) -> list[Declared]:
    for selector, where in removals:
        kept = [d for d in current if not selector_matches(selector, d.ins)]
        if len(kept) == len(current):
            where.fail(f"removes nothing: no inherited {family} instruction matches {selector}")
        current = kept
    return current


def _add(current: list[Declared], new: list[Declared]) -> list[Declared]:
    seen = {_signature(d): d for d in current}
    for d in new:
        if _signature(d) in seen:
            first = seen[_signature(d)]
            d.where.fail(f"{d.ins.describe()} is already declared ({first.where.file}: {first.where.path}); "
                         "declare each instruction once")
        seen[_signature(d)] = d
    return current + new


def apply(merged: Merged, doc: ProfileDoc) -> None:
    raw, top = doc.raw, doc.where
    for key in ("vendor", "backend", "verified"):
        if key in raw:
            merged.scalars[key] = (raw[key], top.key(key))
    target = raw.get("target", {})
    if "arch" in target:
        for key in ("family", "min_nvrtc"):
            merged.target.pop(key, None)
    _update(merged.target, target, top.key("target"))
    _update(merged.memory, raw.get("memory", {}), top.key("memory"))
    _update(merged.limits, raw.get("limits", {}), top.key("limits"))
    _update(merged.formats, raw.get("formats", {}), top.key("formats"))
    merged.mma_sync = _add(_remove(merged.mma_sync, doc.mma_sync_remove, "mma_sync"), doc.mma_sync)
    merged.wgmma = _add(_remove(merged.wgmma, doc.wgmma_remove, "wgmma"), doc.wgmma)
    for kind, where in doc.tcgen05_remove:
        if kind not in merged.tcgen05:
            declared = ", ".join(merged.tcgen05) or "none"
            where.fail(f"kind {kind!r} is not declared by any parent (declared kinds: {declared})")
        del merged.tcgen05[kind]
    merged.tcgen05.update(doc.tcgen05_kinds)
    merged.extensions.update(doc.extensions)
    for key, into in (("notes", merged.notes), ("sources", merged.sources)):
        value = raw.get(key, [])
        own = [t for t in ([value] if isinstance(value, str) else value) if t not in into]
        into[:0] = own  # the most specific profile's notes come first


def merge(chain: list[ProfileDoc]) -> Merged:
    """`chain` is ordered oldest ancestor first, the profile itself last."""
    merged = Merged()
    for doc in chain:
        apply(merged, doc)
    return merged
