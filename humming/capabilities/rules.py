"""Target rules: which compile target can have which instructions, memory features and hidden
formats, and which backend may use which families and compilers. Loaded from `_targets.yaml`
(built-in, then one per HUMMING_PROFILE_PATH directory; later ones override by name)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from humming.capabilities.checks import Where, closest, to_version
from humming.capabilities.entries import covers, parse_entry, parse_tcgen05_kinds
from humming.capabilities.model import MmaInstruction
from humming.capabilities.schema import RULES
from humming.capabilities.yamlio import RULES_FILE, display_name, read_yaml


@dataclass(frozen=True)
class TargetRule:
    arch: str
    compute_capability: tuple[int, int]
    min_nvrtc: tuple[int, int]
    family: str | None
    binary_compat: str  # "exact": runs only on its own cc; "major": same major, equal or newer minor
    allowed: tuple[MmaInstruction, ...]
    memory: frozenset[str]
    hidden_formats: tuple[str, ...]

    def allows(self, ins: MmaInstruction) -> bool:
        return any(covers(a, ins) for a in self.allowed)

    def runs_on(self, cc: tuple[int, int]) -> bool:
        if self.binary_compat == "exact":
            return cc == self.compute_capability
        return cc[0] == self.compute_capability[0] and cc[1] >= self.compute_capability[1]


@dataclass(frozen=True)
class BackendRule:
    families: tuple[str, ...]
    compilers: tuple[str, ...]


@dataclass(frozen=True)
class Rules:
    targets: dict[str, TargetRule]
    backends: dict[str, BackendRule]
    files: tuple[str, ...]

    def target(self, arch: str, where: Where) -> TargetRule:
        if arch not in self.targets:
            where.fail(f"unknown target {arch!r}{closest(arch, self.targets)} (known: {', '.join(self.targets)}; "
                       f"a new target needs an entry in a {RULES_FILE} next to the profile)")
        return self.targets[arch]

    def targets_with(self, family: str, kind: str | None = None) -> list[str]:
        return [name for name, rule in self.targets.items()
                if any(a.family == family and (kind is None or a.kind == kind) for a in rule.allowed)]

    def targets_with_memory(self, word: str) -> list[str]:
        return [name for name, rule in self.targets.items() if word in rule.memory]


def _instruction_set(raw: dict, where: Where) -> list[MmaInstruction]:
    out: list[MmaInstruction] = []
    for family in ("mma_sync", "wgmma"):
        section = raw.get(family, {})
        if "remove" in section:
            where.key(family).key("remove").fail("instruction sets list what is allowed; they cannot remove")
        for i, entry in enumerate(section.get("shapes", [])):
            out += parse_entry(entry, family, where.key(family).key("shapes").item(i))
    tc = raw.get("tcgen05", {})
    if "kinds_remove" in tc:
        where.key("tcgen05").key("kinds_remove").fail("instruction sets list what is allowed; they cannot remove")
    for decls in parse_tcgen05_kinds(tc.get("kinds", {}), where.key("tcgen05"), "").values():
        out += [d.ins for d in decls]
    return out


def load_rules(dirs: list[Path], builtin: Path) -> Rules:
    sets: dict[str, tuple[dict, Where]] = {}
    targets: dict[str, tuple[dict, Where]] = {}
    backends: dict[str, dict] = {}
    files = []
    for directory in dirs:
        path = directory / RULES_FILE
        if not path.exists() and not path.is_symlink():
            continue  # (a FIFO, device or dangling link of that name is refused by read_yaml)
        shown = display_name(path, builtin)
        raw = read_yaml(path, shown) or {}
        top = Where(shown)
        RULES.check(raw, top)
        files.append(shown)
        for name, body in raw.get("instruction_sets", {}).items():
            sets[name] = (body, top.key("instruction_sets").key(name))
        for name, body in raw.get("targets", {}).items():
            targets[name] = (body, top.key("targets").key(name))
        backends.update(raw.get("backends", {}))
    expanded = {name: _instruction_set(body, where) for name, (body, where) in sets.items()}
    built: dict[str, TargetRule] = {}
    for arch, (body, where) in targets.items():
        allowed: list[MmaInstruction] = []
        for i, set_name in enumerate(body.get("instructions", [])):
            if set_name not in expanded:
                where.key("instructions").item(i).fail(
                    f"unknown instruction set {set_name!r} (known: {', '.join(expanded)}){closest(set_name, expanded)}")
            allowed += expanded[set_name]
        family = body.get("family")
        if family is not None and family not in targets:
            where.key("family").fail(f"family target {family!r} has no entry of its own")
        built[arch] = TargetRule(
            arch=arch, compute_capability=tuple(body["compute_capability"]), min_nvrtc=to_version(body["min_nvrtc"]),
            family=family, binary_compat=body["binary_compat"], allowed=tuple(allowed),
            memory=frozenset(body.get("memory", [])), hidden_formats=tuple(body.get("hidden_formats", [])),
        )
    backend_rules = {name: BackendRule(tuple(b["families"]), tuple(b["compilers"])) for name, b in backends.items()}
    return Rules(targets=built, backends=backend_rules, files=tuple(files))
