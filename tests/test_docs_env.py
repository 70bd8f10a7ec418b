"""The environment switches the package reads and the ones its documentation names are the same set: every
``"HUMMING_..."`` string in humming/ is named in README.md or docs/, and every switch README.md names exists."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"HUMMING_[A-Z0-9_]+")


def _code_switches() -> set[str]:
    found = set()
    for path in (ROOT / "humming").rglob("*.py"):
        found |= set(re.findall(r"[\"'](HUMMING_[A-Z0-9_]+)[\"']", path.read_text()))
    return found


def test_every_switch_the_code_reads_is_documented():
    docs = (ROOT / "README.md").read_text() + "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    missing = sorted(name for name in _code_switches() if name not in set(NAME.findall(docs)))
    assert not missing, f"switches read by humming/ but named nowhere in README.md or docs/*.md: {missing}"


def test_every_switch_the_readme_names_exists():
    code = "".join(p.read_text() for p in (ROOT / "humming").rglob("*.py"))
    unknown = sorted(name for name in set(NAME.findall((ROOT / "README.md").read_text())) if name not in code)
    assert not unknown, f"README.md names switches the package never reads: {unknown}"
