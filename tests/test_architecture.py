"""The shape of the package: imports point down (no cycle among humming's modules, function-local imports counted),
files with one job (none over 700 lines), a small public API module."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "humming"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the humming modules it imports anywhere in its body (a package's __init__ counts as the package)."""
    mods = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        is_pkg = f.name == "__init__.py"
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = m.split(".") if is_pkg else m.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r and r != m and r != "humming" and not m.startswith(r + "."):
                    graph[m].add(r)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_humming_modules():
    found = cycles(import_graph())
    assert not found, "import cycles (imports must point down):\n" + "\n".join(", ".join(c) for c in found)


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_core_imports_no_upper_layer():
    """humming/core imports neither the public modules above it nor a vendor backend."""
    upper = {"humming.api", "humming.nn", "humming.device", "humming.tuner", "humming.aot", "humming.cli",
             "humming.actquant", "humming.checkpoints", "humming.formats", "humming.schemes"}
    graph = import_graph()
    bad = [(m, t) for m, ts in graph.items() if m.startswith("humming.core") for t in ts
           if t in upper or t.startswith(("humming.cli.", "humming.checkpoints.", "humming.devices.nvidia",
                                          "humming.devices.thead_ppu"))]
    assert not bad, bad


def test_devices_and_capabilities_import_nothing_above_them():
    """The backends and the capability model sit below the core: they import neither it nor the public modules (what
    a backend needs from the core, e.g. a number format's data, the core passes in)."""
    graph = import_graph()
    low = ("humming.devices", "humming.capabilities")
    allowed = ("humming.devices", "humming.capabilities", "humming.errors", "humming.settings")
    bad = [(m, t) for m, ts in graph.items() if m.startswith(low) for t in ts if not t.startswith(allowed)]
    assert not bad, bad


def test_no_file_over_700_lines_and_a_small_api():
    long = {str(f.relative_to(ROOT)): n for f in PKG.rglob("*.py") if (n := len(f.read_text().splitlines())) > 700}
    assert not long, f"files with more than one job? {long}"
    assert len((PKG / "api.py").read_text().splitlines()) < 300
