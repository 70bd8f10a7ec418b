"""The one place humming reads its environment: deployment settings only (where the kernel cache lives, which
NVRTC compiles, which profile runs, where the tuning file is). Kernel variants and thresholds are tuning data
(``humming.core.tuning.knobs``); numerics are call options (``humming.options``).

Each setting is read when it is used (not at import), so a process may set a variable before its first call.
Every value is read by one parser (``_parse``, by the setting's kind) whoever reads it: a value it cannot read is a
SettingsError naming the variable, the value and what it takes, never a traceback or a silent default.
``python -m humming info`` prints them; the README's settings table lists them (a test checks both agree).
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from humming.errors import SettingsError


@dataclass(frozen=True)
class Setting:
    """One variable: its name, default and meaning (the README's table) and how its value is read: ``kind`` is
    "text" (taken as it is: paths, names), "flag" (yes/no), "count" (a whole number >= 0), "nvrtc" (auto or a
    version), "choice" (one of ``choices``) or "shell" (shell-quoted words)."""

    name: str
    default: str
    doc: str
    kind: str = "text"
    choices: tuple[str, ...] = ()


FALSE = ("0", "false", "off", "no")
TRUE = ("1", "true", "on", "yes")

SETTINGS: tuple[Setting, ...] = (
    Setting("HUMMING_CACHE_DIR", "$XDG_CACHE_HOME/humming/kernels or ~/.cache/humming/kernels",
            "where compiled kernels (and the default tuning file) are kept"),
    Setting("HUMMING_CACHE", "1", "0: no disk cache of compiled kernels", "flag"),
    Setting("HUMMING_CACHE_MEMORY", "256", "compiled modules kept in memory per process", "count"),
    Setting("HUMMING_NVRTC", "auto", "which NVRTC compiles: 12, 13, a version such as 12.9, or auto (the newest found)",
            "nvrtc"),
    Setting("HUMMING_NVRTC_PATH", "", "libnvrtc files or directories to use instead of the installed wheels (os.pathsep-separated)"),
    Setting("HUMMING_DEVICE_PROFILE", "", "run as this profile instead of the detected device's"),
    Setting("HUMMING_PROFILE_PATH", "", "more directories of device profiles (os.pathsep-separated)"),
    Setting("HUMMING_SKIP_DETECT", "0", "1: do not ask the CUDA driver which GPU this is", "flag"),
    Setting("HUMMING_TUNE_FILE", "<cache dir>/tuning.json", "the tuning file `humming tune` writes and every plan reads"),
    Setting("HUMMING_TUNE", "1", "0: ignore measured tuning entries (the planners' rules and the tuning data's knobs only)",
            "flag"),
    Setting("HUMMING_PRECOMPILE", "decode", "kernels compiled in the background on a layer's first call: decode, all or off (0)",
            "choice", ("decode", "all", "2", "none") + FALSE + TRUE),
    Setting("HUMMING_LINEINFO", "0", "1: compile kernels with line info (for profilers)", "flag"),
    Setting("HUMMING_UNVERIFIED_KERNELS", "0", "1: run kernels compiled for GPUs they were never run on (Blackwell)",
            "flag"),
    Setting("HUMMING_PPU_NVCC_FLAGS", "", "extra nvcc options for the T-Head PPU SDK compiler (shell-quoted)", "shell"),
    Setting("HUMMING_PPU_EXTENSIONS", "1", "0: PPU SDK builds leave the profile's vendor extensions out (the portable "
            "sm_80 spelling); also the macro that guards them in generated sources", "flag"),
)
_BY_NAME = {s.name: s for s in SETTINGS}
_NVRTC_VERSION = re.compile(r"^(\d+)(?:\.(\d+))?$")


def _bad(s: Setting, value: str, expected: str) -> SettingsError:
    return SettingsError(f"{s.name}={value!r} cannot be read: expected {expected} ({s.doc}); correct it or "
                         f"unset it (default: {s.default or 'unset'})")


def _parse(s: Setting, value: str):
    """``value`` (stripped, not empty) read as ``s``'s kind; SettingsError naming the variable otherwise."""
    if s.kind == "text":
        return value
    if s.kind == "flag":
        low = value.lower()
        if low in TRUE or low in FALSE:
            return low in TRUE
        raise _bad(s, value, "1/true/on/yes or 0/false/off/no")
    if s.kind == "count":
        if not value.isdigit():
            raise _bad(s, value, "a whole number >= 0 such as 256")
        return int(value)
    if s.kind == "choice":
        if value.lower() not in s.choices:
            raise _bad(s, value, "one of " + ", ".join(s.choices))
        return value.lower()
    if s.kind == "nvrtc":
        if value.lower() == "auto":
            return None
        m = _NVRTC_VERSION.match(value)
        if not m:
            raise _bad(s, value, "12, 13, a version such as 12.9, or auto")
        return int(m.group(1)), (int(m.group(2)) if m.group(2) else None)
    if s.kind == "shell":
        try:
            return shlex.split(value)
        except ValueError as e:
            raise _bad(s, value, f"shell-quoted words with balanced quotes ({e})") from None
    raise AssertionError(f"{s.name}: unknown setting kind {s.kind!r}")  # pragma: no cover (SETTINGS is data)


def _setting(name: str) -> Setting:
    s = _BY_NAME.get(name)
    if s is None:
        raise KeyError(f"{name} is not a humming setting; settings: {', '.join(_BY_NAME)}")
    return s


def raw(name: str) -> str:
    """The variable's value as set ("" when unset), stripped. A value its kind cannot read raises SettingsError
    (every read of a setting goes through this check, whoever reads it)."""
    s = _setting(name)
    value = os.environ.get(name, "").strip()
    if value and s.kind != "text":
        _parse(s, value)
    return value


def value(name: str):
    """The setting read as its kind: its value if set, else its default's (None where the default is not a value of
    the kind, e.g. an unset path). flag: bool; count: int; nvrtc: None (auto) or (major, minor or None); choice:
    the lower-cased choice; shell: the list of words; text: the string ("" when unset)."""
    s = _setting(name)
    text_ = os.environ.get(name, "").strip()
    if not text_:
        if s.kind == "text":
            return ""
        text_ = s.default
    return _parse(s, text_) if text_ else None


def flag(name: str) -> bool:
    """A yes/no setting: its value if set (1/true/on/yes or 0/false/off/no), else its default; SettingsError (a
    ValueError) otherwise."""
    return bool(value(name))


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
    """A whole-number setting: its value, ``default`` when unset; SettingsError for a value that is not a whole
    number >= 0."""
    s = _setting(name)
    value_ = os.environ.get(name, "").strip()
    if not value_:
        return default
    return int(_parse(s if s.kind == "count" else Setting(s.name, s.default, s.doc, "count"), value_))


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
