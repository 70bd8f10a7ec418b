"""Reading YAML safely and strictly, and locating the built-in profile directory."""
from __future__ import annotations

import importlib.resources
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from humming.capabilities.excerpt import clip
from humming.capabilities.loader import load_bounded
from humming.errors import ProfileError

RULES_FILE = "_targets.yaml"  # files starting with "_" are not profiles


MAX_FILE_BYTES = 1 << 20  # 1 MiB; the largest built-in profile file is under 10 KB


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    for test, word in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "not a regular file"


def _read_text(path: Path, display: str) -> str:
    """The file as UTF-8 text; ProfileError if it is not a regular file (a FIFO, a device, a directory: reading a
    FIFO would wait for a writer forever), cannot be read, is larger than MAX_FILE_BYTES or is not UTF-8."""
    try:
        # opened without blocking (a FIFO with no writer would block open() itself), then checked on the open
        # descriptor, so that the file cannot be swapped between the check and the read
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise ProfileError(f"{display}: cannot read: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ProfileError(f"{display}: {_kind(mode)}, not a profile file; a profile is a regular YAML file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"{display}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
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
    data in a `tuning/` folder). Entries that are not regular files (a FIFO, a device, a dangling link) are listed
    too, so that reading them refuses them by name instead of skipping them silently; folders are searched."""
    if not directory.is_dir():
        return []
    files = [p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml") and not p.is_dir()]
    return sorted(p for p in files if not p.name.startswith("_") and TUNING_DIR not in p.relative_to(directory).parts)


TUNING_DIR = "tuning"  # device_profiles/tuning/: kernel-variant defaults and measured entries (humming.core.tuning)
