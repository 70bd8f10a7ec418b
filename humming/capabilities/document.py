"""One profile file, checked and parsed, before inheritance is applied."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from humming.capabilities.checks import Where
from humming.capabilities.entries import Declared, parse_entry, parse_shapes, parse_tcgen05_kinds
from humming.capabilities.model import VendorExtension
from humming.capabilities.schema import PROFILE
from humming.capabilities.yamlio import read_yaml
from humming.errors import ProfileError

EXTENSION_MMA_FAMILY = "ppu_mma"  # the family of MMAs a vendor extension declares


@dataclass
class ProfileDoc:
    name: str
    extends: str | None
    path: Path
    display: str
    raw: dict
    mma_sync: list[Declared] = field(default_factory=list)
    mma_sync_remove: list[tuple[dict, Where]] = field(default_factory=list)
    wgmma: list[Declared] = field(default_factory=list)
    wgmma_remove: list[tuple[dict, Where]] = field(default_factory=list)
    tcgen05_kinds: dict[str, list[Declared]] = field(default_factory=dict)
    tcgen05_remove: list[tuple[str, Where]] = field(default_factory=list)
    extensions: dict[str, tuple[VendorExtension, list[Declared]]] = field(default_factory=dict)

    @property
    def where(self) -> Where:
        return Where(self.display)


def _removals(section: dict, where: Where, key: str) -> list:
    return [(item, where.key(key).item(i)) for i, item in enumerate(section.get(key, []))]


def parse_document(path: Path, display: str) -> ProfileDoc:
    raw = read_yaml(path, display)
    if raw is None:
        raise ProfileError(f"{display}: <top>: the file is empty; a profile needs at least 'name'")
    top = Where(display)
    PROFILE.check(raw, top)
    name = raw["name"]
    doc = ProfileDoc(name=name, extends=raw.get("extends"), path=path, display=display, raw=raw)
    if doc.extends == name:
        top.key("extends").fail(f"profile {name!r} extends itself")
    for family in ("mma_sync", "wgmma"):
        section = raw.get(family, {})
        setattr(doc, family, parse_shapes(section, family, top.key(family), name))
        setattr(doc, f"{family}_remove", _removals(section, top.key(family), "remove"))
    tc = raw.get("tcgen05", {})
    doc.tcgen05_kinds = parse_tcgen05_kinds(tc.get("kinds", {}), top.key("tcgen05"), name)
    doc.tcgen05_remove = _removals(tc, top.key("tcgen05"), "kinds_remove")
    for kind, where in doc.tcgen05_remove:
        if kind in doc.tcgen05_kinds:
            where.fail(f"kind {kind!r} is both declared and removed in this file")
    for ext_name, body in raw.get("vendor_extensions", {}).items():
        w = top.key("vendor_extensions").key(ext_name)
        ext = VendorExtension(name=ext_name, spelling=body.get("spelling"), description=body.get("description"),
                              confirmed=body.get("confirmed", True), data=dict(body.get("data", {})))
        decls: list[Declared] = []
        for i, entry in enumerate(body.get("mma", [])):
            wi = w.key("mma").item(i)
            decls += [Declared(ins, wi, name)
                      for ins in parse_entry(entry, EXTENSION_MMA_FAMILY, wi, extension=ext_name)]
        doc.extensions[ext_name] = (ext, decls)
    return doc
