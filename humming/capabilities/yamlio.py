"""Reading YAML safely and strictly, and locating the built-in profile directory."""
from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

import yaml

from humming.errors import ProfileError

RULES_FILE = "_targets.yaml"  # files starting with "_" are not profiles


class _StrictSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader (no Python objects, ever) that also rejects a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *anchor' may be overridden by own keys
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, (str, int, float, bool)) or key is None:
                continue  # the base class reports unhashable keys
            if key in seen:
                raise ProfileError(f"key {key!r} given twice (lines {seen[key]} and {line})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path, display: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{display}: cannot read: {exc.strerror or exc}") from None
    try:
        return yaml.load(text, Loader=_StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except ProfileError as exc:
        raise ProfileError(f"{display}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProfileError(f"{display}: {where}: invalid YAML: {problem}") from None


def builtin_profile_dir() -> Path:
    """The shipped profiles: package data humming.device_profiles when installed, else <repo>/device_profiles."""
    try:
        root = importlib.resources.files("humming.device_profiles")
        path = Path(str(root))
        if path.is_dir() and any(path.rglob("*.yaml")):
            return path
    except (ModuleNotFoundError, TypeError, ValueError):
        pass
    return Path(__file__).resolve().parents[2] / "device_profiles"


def display_name(path: Path, builtin: Path) -> str:
    """How a file is named in messages: device_profiles/nvidia/b300.yaml for built-ins, else the path."""
    try:
        return "device_profiles/" + path.resolve().relative_to(builtin.resolve()).as_posix()
    except ValueError:
        return str(path)


def profile_files(directory: Path) -> list[Path]:
    """Every *.yaml / *.yml below `directory` that is a profile (not _targets.yaml or other _files, nor the tuning
    data in a `tuning/` folder)."""
    if not directory.is_dir():
        return []
    files = [p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()]
    return sorted(p for p in files if not p.name.startswith("_") and TUNING_DIR not in p.relative_to(directory).parts)


TUNING_DIR = "tuning"  # device_profiles/tuning/: kernel-variant defaults and measured entries (humming.core.tuning)
