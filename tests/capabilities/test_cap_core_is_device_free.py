"""The HAL rule: humming/core/ never names an architecture number or a device (DESIGN.md, rule 1).

Device knowledge lives in YAML profiles. A line may opt out with a `# hal: allow (reason)` comment and
a file with `# hal: allow-file (reason)`; comments and docstrings are not scanned.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hal_scan import scan_file

from humming.capabilities import list_profiles

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "humming" / "core"
CORE_FILES = sorted(CORE.rglob("*.py"))

# Files that broke the rule when this test was written, awaiting their owners' decision (move the
# knowledge to data, or mark it with `hal: allow-file` and a reason). Strict xfail: once a file is
# clean, this entry must go.
PENDING: dict[str, str] = {}


def _profile_words() -> set[str]:
    """Device names from every profile's match patterns, so a new profile extends the check."""
    words = set()
    for caps in list_profiles():
        for pattern in caps.match.names:
            words.update(w for w in pattern.replace("*", " ").replace("?", " ").split() if len(w) >= 3)
    return words


@pytest.mark.parametrize("path", CORE_FILES, ids=[p.relative_to(ROOT).as_posix() for p in CORE_FILES])
def test_core_file_names_no_architecture_or_device(path: Path):
    shown = path.relative_to(ROOT).as_posix()
    violations = scan_file(path, ROOT, _profile_words())
    if shown in PENDING:
        if violations:
            pytest.xfail(f"{PENDING[shown]}: " + "; ".join(str(v) for v in violations[:3]))
        pytest.fail(f"{shown} is clean now: remove it from PENDING")
    assert not violations, "humming/core must ask the capabilities instead:\n" + "\n".join(map(str, violations))


def test_the_scanner_catches_what_it_should(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        '"""Docstrings may say sm_90a and H100."""\n'
        "# comments may say Blackwell\n"
        "if arch == 'sm_90a':\n"
        "    pass\n"
        "if caps.compute_capability >= (9, 0):\n"
        "    pass\n"
        "NAME = 'NVIDIA H200'\n"
        "target = f'sm_{base}'\n"
        "ok = 'sm_90a'  # hal: allow (example)\n"
        "shape = (16, 8, 16)\n"
    )
    lines = sorted({v.line for v in scan_file(bad, tmp_path)})
    assert lines == [3, 5, 7, 8]
    allowed = tmp_path / "allowed.py"
    allowed.write_text("# hal: allow-file (toolchain table)\nX = 'sm_90a'\n")
    assert scan_file(allowed, tmp_path) == []
