"""The one place humming reads its environment: deployment settings only (where the kernel cache lives, which
NVRTC compiles, which profile runs, where the tuning file is). Kernel variants and thresholds are tuning data
(``humming.core.tuning.knobs``); numerics are call options (``humming.options``).

Each setting is read when it is used (not at import), so a process may set a variable before its first call.
``python -m humming info`` prints them; the README's settings table lists them (a test checks both agree).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    doc: str


SETTINGS: tuple[Setting, ...] = (
    Setting("HUMMING_CACHE_DIR", "$XDG_CACHE_HOME/humming/kernels or ~/.cache/humming/kernels",
            "where compiled kernels (and the default tuning file) are kept"),
    Setting("HUMMING_CACHE", "1", "0: no disk cache of compiled kernels"),
    Setting("HUMMING_CACHE_MEMORY", "256", "compiled modules kept in memory per process"),
    Setting("HUMMING_NVRTC", "auto", "which NVRTC compiles: 12, 13, a version such as 12.9, or auto (the newest found)"),
    Setting("HUMMING_NVRTC_PATH", "", "libnvrtc files or directories to use instead of the installed wheels (os.pathsep-separated)"),
    Setting("HUMMING_DEVICE_PROFILE", "", "run as this profile instead of the detected device's"),
    Setting("HUMMING_PROFILE_PATH", "", "more directories of device profiles (os.pathsep-separated)"),
    Setting("HUMMING_SKIP_DETECT", "0", "1: do not ask the CUDA driver which GPU this is"),
    Setting("HUMMING_TUNE_FILE", "<cache dir>/tuning.json", "the tuning file `humming tune` writes and every plan reads"),
    Setting("HUMMING_TUNE", "1", "0: ignore measured tuning entries (the planners' rules and the tuning data's knobs only)"),
    Setting("HUMMING_PRECOMPILE", "decode", "kernels compiled in the background on a layer's first call: decode, all or off (0)"),
    Setting("HUMMING_LINEINFO", "0", "1: compile kernels with line info (for profilers)"),
    Setting("HUMMING_UNVERIFIED_KERNELS", "0", "1: run kernels compiled for GPUs they were never run on (Blackwell)"),
    Setting("HUMMING_PPU_NVCC_FLAGS", "", "extra nvcc options for the T-Head PPU SDK compiler (shell-quoted)"),
    Setting("HUMMING_PPU_EXTENSIONS", "1", "0: PPU SDK builds leave the profile's vendor extensions out (the portable "
            "sm_80 spelling); also the macro that guards them in generated sources"),
)
_BY_NAME = {s.name: s for s in SETTINGS}
FALSE = ("0", "false", "off", "no")
TRUE = ("1", "true", "on", "yes")


def raw(name: str) -> str:
    """The variable's value as set ("" when unset), stripped."""
    if name not in _BY_NAME:
        raise KeyError(f"{name} is not a humming setting; settings: {', '.join(_BY_NAME)}")
    return os.environ.get(name, "").strip()


def flag(name: str) -> bool:
    """A yes/no setting: its value if set (1/true/on/yes or 0/false/off/no), else its default; ValueError otherwise."""
    value = raw(name).lower() or _BY_NAME[name].default
    if value in TRUE:
        return True
    if value in FALSE:
        return False
    raise ValueError(f"{name}={value!r}: expected 1/true/on/yes or 0/false/off/no ({_BY_NAME[name].doc})")


def system(name: str) -> str:
    """A variable of the system humming reads but does not own (CUDA_HOME, LD_LIBRARY_PATH, XDG_CACHE_HOME,
    PPU_SDK, ...): its value, or "" when unset."""
    return os.environ.get(name, "")


def child_environment(path_first: str | None = None) -> dict[str, str]:
    """The environment for a tool humming runs (a vendor compiler): this process's, with ``path_first`` put at the
    front of PATH where given."""
    env = dict(os.environ)
    if path_first:
        env["PATH"] = path_first + os.pathsep + env.get("PATH", "")
    return env


def text(name: str) -> str:
    """A setting's value, or "" when unset (the caller knows its default's meaning)."""
    return raw(name)


def current() -> dict[str, str]:
    """Every setting that is set, by name."""
    return {s.name: raw(s.name) for s in SETTINGS if raw(s.name)}


def integer(name: str, default: int) -> int:
    """A whole-number setting, ``default`` when unset or not a number."""
    try:
        return int(raw(name) or default)
    except ValueError:
        return default


def cache_dir() -> Path:
    """The disk cache of compiled kernels (not created until something is written): HUMMING_CACHE_DIR, else
    $XDG_CACHE_HOME/humming/kernels, else ~/.cache/humming/kernels."""
    explicit = raw("HUMMING_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "humming" / "kernels"


def tune_file() -> Path:
    """The user tuning file: HUMMING_TUNE_FILE, else <kernel cache dir>/tuning.json."""
    explicit = raw("HUMMING_TUNE_FILE")
    return Path(explicit).expanduser() if explicit else cache_dir() / "tuning.json"


def markdown_table() -> str:
    """The README's table of every setting (a test checks that the README holds it)."""
    rows = ["| variable | default | what it does |", "|---|---|---|"]
    rows += [f"| `{s.name}` | {s.default} | {s.doc} |" for s in SETTINGS]
    return "\n".join(rows)
