"""Reading YAML safely and strictly, and locating the built-in profile directory."""
from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

import yaml

from humming.capabilities.excerpt import clip
from humming.capabilities.loader import load_bounded
from humming.errors import ProfileError

RULES_FILE = "_targets.yaml"  # files starting with "_" are not profiles


MAX_FILE_BYTES = 1 << 20  # 1 MiB; the largest built-in profile file is under 10 KB


def _read_text(path: Path, display: str) -> str:
    """The file as UTF-8 text; ProfileError if it cannot be read, is larger than MAX_FILE_BYTES or is not UTF-8."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"{display}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ProfileError(f"{display}: larger than {MAX_FILE_BYTES} bytes; a profile is a small text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ProfileError(f"{display}: line {line}: not UTF-8 text (byte {data[exc.start]:#04x} at offset "
                           f"{exc.start}); save the file as UTF-8") from None


def read_yaml(path: Path, display: str) -> Any:
    """The YAML document in `path`, read safely (see humming.capabilities.loader for the bounds); every failure
    is a ProfileError naming `display`."""
    text = _read_text(path, display)
    try:
        return load_bounded(text)
    except ProfileError as exc:
        raise ProfileError(f"{display}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "YAML"
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProfileError(f"{display}: {where}: invalid YAML: {clip(problem, 200)}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # e.g. an integer of more than 4300 digits
        raise ProfileError(f"{display}: YAML value cannot be read: {clip(str(exc), 200)}") from None


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
