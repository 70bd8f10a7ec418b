"""The environment humming reads is its deployment settings and nothing else: every ``HUMMING_*`` name under humming/
is a setting of humming/settings.py (``SETTINGS``), there are at most 15 of them, humming/settings.py is the only
module that touches ``os.environ``, and the tuning knobs (humming.core.tuning.knobs.KNOBS) and the values of
device_profiles/tuning/defaults.yaml name the same knobs."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from humming import settings
from humming.core.tuning import knobs

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "humming"
NAME = re.compile(r"HUMMING_[A-Z0-9_]+")
MOST_SETTINGS = 15


def _texts():
    """(path, text) of every text file under humming/ (sources, generated-source templates, shipped data)."""
    for path in sorted(PACKAGE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            yield path, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # (binary files)
            continue


def test_every_humming_name_in_the_package_is_a_setting():
    """Code, comments, docstrings, messages and generated sources (the macro HUMMING_PPU_EXTENSIONS is a setting
    too) name no variable that settings.py does not declare: kernel variants are tuning knobs, numerics call
    options."""
    declared = {s.name for s in settings.SETTINGS}
    unknown = {}
    for path, text in _texts():
        for name in set(NAME.findall(text)) - declared:
            unknown.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert not unknown, f"HUMMING_* names under humming/ that are not settings of humming/settings.py: {unknown}"
    scanned = "".join(text for _, text in _texts())
    assert "HUMMING_PPU_EXTENSIONS" in scanned and "HUMMING_CACHE_DIR" in scanned  # (the scan reads the package)


def test_at_most_15_settings():
    names = [s.name for s in settings.SETTINGS]
    assert len(names) <= MOST_SETTINGS, f"{len(names)} settings (at most {MOST_SETTINGS}): {names}"
    assert len(set(names)) == len(names), names
    assert all(NAME.fullmatch(name) for name in names), names
    assert all(s.doc for s in settings.SETTINGS)


def _environ_uses(tree: ast.AST) -> list[int]:
    """Lines where the module reads the process environment: ``os.environ`` (any use) or ``from os import
    environ``."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
                and node.value.id == "os"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name == "environ" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_only_settings_reads_the_environment():
    users = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = _environ_uses(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        if lines:
            users[str(path.relative_to(ROOT))] = lines
    assert "humming/settings.py" in users  # (the scan finds what it looks for)
    others = {path: lines for path, lines in users.items() if path != "humming/settings.py"}
    assert not others, f"modules other than humming/settings.py that use os.environ (file: lines): {others}"


def test_environ_scan_catches_the_spellings():
    code = "import os\nfrom os import environ\na = os.environ.get('X')\nb = dict(os.environ)\nc = os.path.sep\n"
    assert _environ_uses(ast.parse(code)) == [2, 3, 4]


def test_every_knob_has_a_default_and_every_default_is_a_knob():
    values = knobs.defaults()  # device_profiles/tuning/defaults.yaml, each value checked against its knob
    missing = sorted(set(knobs.KNOBS) - set(values))
    unknown = sorted(set(values) - set(knobs.KNOBS))
    assert not missing, f"knobs without a value in device_profiles/tuning/defaults.yaml: {missing}"
    assert not unknown, f"keys of device_profiles/tuning/defaults.yaml that are not knobs: {unknown}"
    for name, value in values.items():
        assert knobs.KNOBS[name].check(value, "defaults.yaml") == value
