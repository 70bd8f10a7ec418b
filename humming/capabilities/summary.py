"""Human-readable answers about a profile: which families take which operand classes, and where a
newer instruction family lacks a type so an older ("legacy") one must be used."""
from __future__ import annotations

from humming.capabilities import vocabulary as V
from humming.capabilities.model import Capabilities, MmaInstruction


def _in_class(ins: MmaInstruction, types: tuple[str, ...]) -> bool:
    return ins.a_type in types and ins.b_type in types


def type_support(caps: Capabilities) -> dict[str, tuple[str, ...]]:
    """Operand class ("int8", "fp8", ...) -> families with an MMA taking it for A and B, newest first."""
    out = {}
    for cls, types in V.TYPE_CLASSES.items():
        fams = {ins.family for ins in caps.mma if _in_class(ins, types)}
        out[cls] = tuple(f for f in V.MMA_FAMILIES if f in fams)
    return out


def newest_family(caps: Capabilities) -> str | None:
    declared = set(caps.families())
    return next((f for f in V.MMA_FAMILIES if f in declared and f != "ppu_mma"), None)


def legacy_paths(caps: Capabilities) -> list[str]:
    """Sentences for operand classes the newest declared family cannot take but an older one can."""
    newest = newest_family(caps)
    lines = []
    for cls, fams in type_support(caps).items():
        if not fams or newest is None or newest in fams:
            continue
        older = fams[0]
        forms = [ins for ins in caps.mma if ins.family == older and _in_class(ins, V.TYPE_CLASSES[cls])]
        example = max(forms, key=lambda ins: ins.m * ins.n * ins.k)  # the largest form is the one used
        missing = f"{newest} has no {cls} form"
        if newest == "tcgen05" and cls in V.TCGEN05_KIND_FOR_CLASS:
            missing = f"tcgen05 kind::{V.TCGEN05_KIND_FOR_CLASS[cls]} is not declared for {cls}"
        lines.append(f"{cls.upper()}: {missing}; {cls.upper()} GEMM uses the legacy {older} path "
                     f"(e.g. {example.describe()})")
    return lines


def support_cell(caps: Capabilities, cls: str) -> str:
    """A short table cell: '-' when absent, else the newest family, '(legacy)' if not the newest."""
    fams = type_support(caps)[cls]
    if not fams:
        return "-"
    newest = newest_family(caps)
    return fams[0] if fams[0] == newest or newest is None else f"{fams[0]} (legacy)"


def describe_memory(caps: Capabilities) -> str:
    words = [w.replace("_", ".") if w == "cp_async" else w for w in V.MEMORY_FEATURES if getattr(caps.memory, w)]
    if caps.memory.tmem_kb:
        words.append(f"tmem {caps.memory.tmem_kb} KB")
    return ", ".join(words) or "none declared"


def describe_mma(caps: Capabilities) -> str:
    parts = []
    for fam in caps.families():
        forms = [ins for ins in caps.mma if ins.family == fam]
        kinds = list(dict.fromkeys(ins.kind for ins in forms if ins.kind))
        text = f"{fam} ({len(forms)} forms"
        if kinds:
            text += "; kinds " + ", ".join(kinds)
        parts.append(text + ")")
    return ", ".join(parts) or "none declared"
