"""A merged profile -> Capabilities, checked against the target rules (what the target can have)."""
from __future__ import annotations

from humming.capabilities.ceilings import check_limits
from humming.capabilities.checks import Where, to_version
from humming.capabilities.document import EXTENSION_MMA_FAMILY, ProfileDoc
from humming.capabilities.entries import Declared
from humming.capabilities.inherit import Merged
from humming.capabilities.model import Capabilities, Formats, Limits, MatchRule, Memory, Target
from humming.capabilities.rules import Rules, TargetRule

# Limits a kernel cannot be planned without: every verified device profile must declare them.
REQUIRED_LIMITS = ("smem_per_block_kb", "max_threads_per_block", "registers_per_thread", "warp_size")


class _Locator:
    """Points errors at the profile being built, saying where an inherited value came from."""

    def __init__(self, leaf: ProfileDoc):
        self.leaf = leaf

    def __call__(self, where: Where) -> Where:
        if where.file == self.leaf.display:
            return where
        return Where(self.leaf.display, f"{where.path} (inherited from {where.file})")


def _impossible(d: Declared, rule: TargetRule, rules: Rules) -> str:
    ins = d.ins
    same_family = [a for a in rule.allowed if a.family == ins.family]
    if not same_family:
        where = ", ".join(rules.targets_with(ins.family)) or "no known target"
        return f"{ins.family} exists only on targets: {where}"
    if ins.kind and not any(a.kind == ins.kind for a in same_family):
        kinds = sorted({a.kind for a in same_family if a.kind})
        return (f"{rule.arch} has {ins.family} kinds: {', '.join(kinds) or 'none'}; "
                f"kind::{ins.kind} exists on: {', '.join(rules.targets_with(ins.family, ins.kind)) or 'no known target'}")
    forms = [a.describe() for a in same_family
             if a.kind == ins.kind and a.a_type == ins.a_type and a.b_type == ins.b_type]
    if not forms:
        return f"{rule.arch} has no {ins.family} form for {ins.a_type} x {ins.b_type}"
    return f"{rule.arch} allows for these types: " + "; ".join(forms)


def _check_instructions(decls: list[Declared], rule: TargetRule | None, backend: str, rules: Rules,
                        locate: _Locator) -> None:
    families = rules.backends[backend].families
    for d in decls:
        if d.ins.family not in families:
            locate(d.where).fail(f"{d.ins.describe()}: backend {backend} has no {d.ins.family} instructions "
                                 f"(its families: {', '.join(families)})")
        if d.ins.family == EXTENSION_MMA_FAMILY or rule is None:
            continue  # vendor extensions are the backend's business; no target, nothing to check against
        if not rule.allows(d.ins):
            locate(d.where).fail(f"{d.ins.describe()} is impossible on target {rule.arch}: "
                                 f"{_impossible(d, rule, rules)}")


def _target(m: Merged, rules: Rules, backend: str, concrete: bool, locate: _Locator,
            top: Where) -> tuple[Target, TargetRule | None]:
    def value(key, default=None):
        return m.target[key][0] if key in m.target else default

    def at(key):
        return locate(m.target[key][1]) if key in m.target else top.key("target").key(key)

    compilers = rules.backends[backend].compilers
    compiler = value("compiler", compilers[0])
    if compiler not in compilers:
        at("compiler").fail(f"backend {backend} compiles with {', '.join(compilers)}, not {compiler!r}")
    fallback = value("fallback_compiler")
    if fallback is not None and fallback not in compilers:
        at("fallback_compiler").fail(f"backend {backend} compiles with {', '.join(compilers)}, not {fallback!r}")
    arch = value("arch")
    if arch is None:
        if concrete:
            at("arch").fail("required for a verified device profile (only 'verified: false' may leave it null)")
        return Target(None, value("family"), None, None, compiler, fallback), None
    rule = rules.target(arch, at("arch"))
    family = value("family", rule.family)
    if family is not None:
        rules.target(family, at("family"))
    min_nvrtc = rule.min_nvrtc
    if "min_nvrtc" in m.target:
        min_nvrtc = to_version(value("min_nvrtc"))
        if min_nvrtc < rule.min_nvrtc:
            at("min_nvrtc").fail(f"target {arch} needs NVRTC >= {rule.min_nvrtc[0]}.{rule.min_nvrtc[1]}, "
                                 f"not {min_nvrtc[0]}.{min_nvrtc[1]}")
    return Target(arch, family, rule.compute_capability, min_nvrtc, compiler, fallback), rule


def _memory(m: Merged, rule: TargetRule | None, rules: Rules, locate: _Locator) -> Memory:
    values = {k: v for k, (v, _) in m.memory.items()}
    if rule is not None:
        for key, (value, where) in m.memory.items():
            word = "tmem" if key == "tmem_kb" else key
            if value and word not in rule.memory:
                shown = "true" if value is True else value
                locate(where).fail(f"{key}: {shown} is impossible on target {rule.arch} "
                                   f"({word} exists on: {', '.join(rules.targets_with_memory(word)) or 'none'})")
    return Memory(**values)


def _formats(m: Merged, rule: TargetRule | None, locate: _Locator) -> Formats:
    hidden, where = m.formats.get("hidden", ([], None))
    if rule is not None:
        for i, fmt in enumerate(hidden):
            if fmt not in rule.hidden_formats:
                locate(where.item(i)).fail(
                    f"hidden format {fmt} is impossible on target {rule.arch} "
                    f"(its hidden formats: {', '.join(rule.hidden_formats) or 'none'})")
    return Formats(hidden=tuple(hidden))


def build(chain: list[ProfileDoc], merged: Merged, rules: Rules) -> Capabilities:
    leaf = chain[-1]
    top = leaf.where
    locate = _Locator(leaf)
    for key in ("vendor", "backend"):
        if key not in merged.scalars:
            top.key(key).fail("missing (declare it here or in a parent profile)")
    vendor = merged.scalars["vendor"][0]
    backend, backend_at = merged.scalars["backend"]
    if backend not in rules.backends:
        locate(backend_at).fail(f"no target rules for backend {backend!r} (rules: {', '.join(rules.backends)})")
    verified = merged.scalars.get("verified", (True, None))[0]
    abstract = leaf.raw.get("abstract", False)
    concrete = verified and not abstract
    target, rule = _target(merged, rules, backend, concrete, locate, top)
    decls = merged.instructions()
    _check_instructions(decls, rule, backend, rules, locate)
    check_limits(merged.limits, backend, target.arch, target.compute_capability, locate)
    limits = {k: v for k, (v, _) in merged.limits.items()}
    if concrete:
        for key in REQUIRED_LIMITS:
            if limits.get(key) is None:
                top.key("limits").key(key).fail(
                    "required for a verified device profile (declare it here or in a parent; "
                    "null only with 'verified: false')")
    match = leaf.raw.get("match", {})
    names = match.get("names", [])
    return Capabilities(
        name=leaf.name,
        vendor=vendor,
        backend=backend,
        target=target,
        mma=tuple(d.ins for d in decls),
        memory=_memory(merged, rule, rules, locate),
        limits=Limits(**limits),
        formats=_formats(merged, rule, locate),
        match=MatchRule(
            vendor=match.get("vendor", vendor),
            compute_capability=(tuple(match["compute_capability"]) if match.get("compute_capability")
                                else None) if "compute_capability" in match else target.compute_capability,
            names=tuple([names] if isinstance(names, str) else names),
        ),
        vendor_extensions=tuple(ext for ext, _ in merged.extensions.values()),
        verified=verified,
        abstract=abstract,
        display_name=leaf.raw.get("display_name"),
        lineage=tuple(doc.name for doc in reversed(chain)),
        notes=tuple(merged.notes),
        sources=tuple(merged.sources),
        source=str(leaf.path),
    )

