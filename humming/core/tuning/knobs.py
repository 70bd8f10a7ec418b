"""Kernel-variant defaults and dispatch thresholds as tuning data.

A *knob* is one named choice a planner makes by rule (a threshold, a variant on or off, a depth). Its value comes
from, first to last:

1. ``override(...)``: a context manager for experiments (A/B runs, ablations, tests), per thread;
2. the user tuning file's ``"knobs"`` object (``python -m humming tune`` writes that file; ``HUMMING_TUNE_FILE``);
3. the profile's own tuning data, ``tuning/<profile>.yaml`` in a HUMMING_PROFILE_PATH directory or in
   ``device_profiles/``, then that of the profiles it extends;
4. ``device_profiles/tuning/defaults.yaml``, which names every knob (the values measured on the H200).

    from humming.core.tuning import knobs
    if knobs.value("register_a.stmatrix", caps): ...
    with knobs.override({"register_a8.raster": 0}):
        plan = humming.plan("w4a8-fp8", 4096, 8192, 8192)

Each knob is declared once, in ``KNOBS`` below, with its type and what it means; data naming an unknown knob, or a
value of the wrong type, is an error that names the file and the knob. This module imports no torch and no CUDA.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from humming import settings
from humming.errors import ProfileError

_UNSET = object()


@dataclass(frozen=True)
class Knob:
    """One tunable choice: ``kind`` is "bool", "int" or "float"; ``optional``: null is a value (the rule decides, or
    off, as ``doc`` says); ints and floats lie in [lo, hi]."""

    name: str
    kind: str
    doc: str
    optional: bool = False
    lo: float | None = None
    hi: float | None = None
    choices: tuple = ()

    def check(self, value: Any, where: str) -> Any:
        """``value`` if valid for this knob, else ProfileError naming ``where`` and the knob."""
        if value is None:
            if self.optional:
                return None
            raise ProfileError(f"{where}: knob {self.name} needs a {self.kind} value, not null ({self.doc})")
        ok = {"bool": isinstance(value, bool),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool)}[self.kind]
        if ok and self.choices and value not in self.choices:
            ok = False
        if ok and self.kind != "bool" and ((self.lo is not None and value < self.lo)
                                           or (self.hi is not None and value > self.hi)):
            ok = False
        if not ok:
            allowed = (f"one of {list(self.choices)}" if self.choices else
                       f"a {self.kind}" + (f" in [{self.lo:g}, {self.hi:g}]" if self.lo is not None else ""))
            raise ProfileError(f"{where}: knob {self.name} = {value!r}: expected {allowed}"
                               + (" or null" if self.optional else "") + f" ({self.doc})")
        return value


def _k(name: str, kind: str, doc: str, **kw) -> Knob:
    return Knob(name, kind, doc, **kw)


# Every knob: where its value decides, and what it means. The values live in device_profiles/tuning/.
KNOBS: dict[str, Knob] = {k.name: k for k in (
    _k("launch.pdl", "bool", "programmatic dependent launch of the decode and register-A kernels where the profile "
       "declares griddepcontrol"),
    _k("launch.pdl_prefill", "bool", "... also for the two-warpgroup register-A W4A16 form"),
    _k("launch.cluster_splits", "int", "split-K partials added inside a thread-block cluster for up to this many "
       "splits (0: through the global workspace)", lo=0, hi=8),
    _k("mma_wna16.stream_bulk", "bool", "the decode (stream) plans use the bulk-copy weight ring where declared"),
    _k("moe.raster", "int", "MoE tile kernel: token tiles per rasterization group, each group taking every channel "
       "tile in turn (0: all token tiles form one group)", lo=0, hi=1024),
    _k("moe.max_token_tile", "int", "MoE tile kernel: the largest token tile (rows per block) the planner picks",
       choices=(16, 32, 64, 128)),
    _k("moe.wgmma_min_rows", "float", "MoE GEMMs on the register-A wgmma kernel from this many rows per expert on "
       "average (null: never)", optional=True, lo=0, hi=1 << 30),
    _k("moe.w4a8_min_rows", "float", "MoE W4A8 GEMMs on the register-A W4A8 kernel (8-bit activation codes) from this "
       "many rows per expert on average (null: never)", optional=True, lo=0, hi=1 << 30),
    _k("moe.wgmma_8bit_min_rows", "float", "MoE W8A8 and MXFP4 W4A8 GEMMs on the wgmma 8-bit kernels (8-bit activation "
       "codes) from this many rows per expert on average (null: never)", optional=True, lo=0, hi=1 << 30),
    _k("moe.mma_8bit_min_rows", "float", "MoE W8A8 / W4A8 GEMMs on the mma.sync 8-bit tile kernel (8-bit activation "
       "codes) from this many rows per expert on average (null: never)", optional=True, lo=0, hi=1 << 30),
    _k("moe.tcgen05_min_rows", "float", "MoE GEMMs on the tcgen05 kernel from this many rows per expert "
       "on average (null: never)", optional=True, lo=0, hi=1 << 30),
    _k("moe.wgmma_max_token_tile", "int", "MoE register-A kernel: the largest token tile the planner picks",
       choices=(64, 128, 256)),
    _k("wgmma.stagger", "bool", "the warp-specialised register-A kernels start their second consumer warpgroup late"),
    _k("wgmma.fit_token_tile", "bool", "register-A token tiles fitted to M (M / tiles rounded up to 16 rows)"),
    _k("wgmma_8bit.enabled", "bool", "W8A8 / W4A8 from M 64 on the wgmma kernels (false: mma.sync)"),
    _k("wgmma_8bit.w8a8_tma", "bool", "promoted FP8 W8A8 on the warp-specialised TMA kernel (false: lock-step)"),
    _k("wgmma_8bit.w4a8_warp_specialised", "bool", "the shared-memory W4A8 kernel with a producer warpgroup"),
    _k("wgmma_8bit.w4a8_tma", "bool", "the warp-specialised shared-memory W4A8 kernel copies by TMA (false: cp.async)"),
    _k("wgmma_wna16.enabled", "bool", "WnA16 from M 128 on the wgmma kernels (false: the mma.sync kernels)"),
    _k("register_a.min_m", "int", "the two-warpgroup register-A W4A16 form from this M (null: never)", optional=True,
       lo=1, hi=1 << 30),
    _k("register_a.wave_min_m", "int", "below min_m, from this M: the two-warpgroup form for layers whose "
       "256-token tiles number one per SM (null: never)", optional=True, lo=1, hi=1 << 30),
    _k("register_a.any_group", "bool", "the register-A W4A16 forms (dense and MoE) for every layout they decode, "
       "not only the GPU-tested int4 with groups of 64 / 128 / 256 / per channel: other groups, groups of 16 / 32 "
       "(MX, NVFP4), e2m1 codes; and MoE N of an odd number of 64-channel slabs"),
    _k("register_a.tma", "bool", "register-A W4A16 activation stages by TMA tensor copy where declared"),
    _k("register_a.producer", "bool", "a producer warpgroup issues the two-warpgroup form's copies"),
    _k("register_a.prefetch", "int", "weight atoms in flight per lane (null: the form's rule)", optional=True,
       lo=1, hi=12),
    _k("register_a.raster", "int", "token tiles per rasterization group of the two-warpgroup form (0: launch "
       "order)", lo=0, hi=64),
    _k("register_a.stmatrix", "bool", "epilogue staging by stmatrix where declared (register-A W4A16 and W4A8)"),
    _k("register_a.streamk", "bool", "the two-warpgroup form takes stream-K where its rules say it pays"),
    _k("register_a.early_ring", "bool", "stream-K: the next segment's first weight atoms loaded before the epilogue"),
    _k("register_a.rounds_rules", "bool", "badly filled rounds: stream-K for tuned entries, one more token tile by "
       "rule"),
    _k("register_a.cluster", "int", "blocks per cluster sharing activation stages (0: never; null: pairs from M "
       "1024 at 256 tokens)", optional=True, choices=(0, 2)),
    _k("register_a8.min_m", "int", "the register-A W4A8 kernel from this M (null: never)", optional=True, lo=1,
       hi=1 << 30),
    _k("register_a8.producer", "bool", "a producer warpgroup brings the activations by TMA where declared"),
    _k("register_a8.token_tile", "int", "tokens per block wherever the kernel runs (null: the rule)",
       optional=True, choices=(128, 256)),
    _k("register_a8.wide_from", "int", "the wide form from this M wherever the producer runs (null: the rule)",
       optional=True, lo=1, hi=256),
    _k("register_a8.chain", "int", "tokens per wgmma chain (null: 64)", optional=True, choices=(64, 128)),
    _k("register_a8.narrow_prefetch", "int", "the narrow form's weight stages in flight per lane (null: 6)",
       optional=True, lo=1, hi=6),
    _k("register_a8.raster", "int", "token tiles per rasterization group (0: launch order)", lo=0, hi=64),
    _k("register_a8.streamk", "int", "persistent blocks of the wide form (0: never; null: where its rounds fill "
       "badly)", optional=True, lo=0, hi=65535),
    _k("register_a8.stagger_chains", "int", "chains warpgroup 1 of the wide form starts behind warpgroup 0",
       lo=1, hi=3),
    _k("register_a8.direct_int8", "bool", "int8 per channel: exact int32 sums across every stage (false: promoted)"),
    _k("register_a8.pdl", "bool", "the wide form launched with PDL behind the activation quantizer"),
    _k("register_a8.l2next", "bool", "the wide form's producer prefetches the next wave's first stages into L2"),
    _k("register_a8.widened_slots", "int", "converter warps widen the weights into this many shared slots (0: the "
       "consumers widen)", lo=0, hi=2),
    _k("register_a8.cluster", "int", "the wide form in clusters of this many blocks (0: off)", choices=(0, 2)),
    _k("act_quant.kernel", "bool", "quantize activations with the generated kernel (false: the torch reference)"),
)}


# ---------------------------------------------------------------------------------------------- data files
DEFAULTS = "defaults.yaml"

_lock = threading.Lock()
_files: dict[str, dict] = {}


@functools.lru_cache(maxsize=1)
def data_dir() -> Path:
    """Where the shipped tuning data lives: device_profiles/tuning (humming.device_profiles.tuning when installed)."""
    from humming.capabilities.yamlio import TUNING_DIR, builtin_profile_dir

    return builtin_profile_dir() / TUNING_DIR


def _flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def read_knobs(path: Path) -> dict:
    """The knob values of one YAML tuning-data file (flattened: ``{"register_a.raster": 4}``), checked."""
    key = str(path)
    with _lock:
        hit = _files.get(key)
    if hit is not None:
        return hit
    from humming.capabilities.yamlio import read_yaml  # (the profiles' bounded reader: size, UTF-8, nesting, aliases)

    tree = read_yaml(path, str(path)) or {}
    if not isinstance(tree, dict):
        raise ProfileError(f"{path}: tuning data must be a mapping of knob groups")
    values = _flatten(tree)
    for name, value in values.items():
        knob = KNOBS.get(name)
        if knob is None:
            raise ProfileError(f"{path}: unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}")
        knob.check(value, str(path))
    with _lock:
        _files[key] = values
    return values


@functools.lru_cache(maxsize=1)
def defaults() -> dict:
    """The values of device_profiles/tuning/defaults.yaml (every knob's)."""
    return read_knobs(data_dir() / DEFAULTS)


def _profile_chain(caps) -> list[str]:
    """The profile's name and the names of the profiles it extends, most specific first."""
    names = [caps.name] if caps is not None else []
    names += list(getattr(caps, "lineage", ()) or ())
    return names


_chains: dict[tuple, tuple[dict, ...]] = {}  # (profile chain, HUMMING_PROFILE_PATH) -> values


def tuning_dirs() -> tuple[Path, ...]:
    """Where a profile's tuning data is looked up, first wins: the ``tuning/`` folder of each HUMMING_PROFILE_PATH
    directory (a ported device's profile and its tuning data side by side), then the shipped data."""
    from humming.capabilities.registry import env_profile_dirs
    from humming.capabilities.yamlio import TUNING_DIR

    return (*(d / TUNING_DIR for d in env_profile_dirs()), data_dir())


def profile_knobs(caps) -> tuple[dict, ...]:
    """The knob values of the profile's own data files, most specific first (looked up once per profile and
    HUMMING_PROFILE_PATH)."""
    chain = tuple(_profile_chain(caps))
    key = (chain, settings.raw("HUMMING_PROFILE_PATH"))
    hit = _chains.get(key)
    if hit is None:
        files = [d / f"{name}.yaml" for name in chain for d in tuning_dirs()]
        hit = _chains[key] = tuple(read_knobs(f) for f in files if f.is_file())
    return hit


# ---------------------------------------------------------------------------------------------- overrides
# the overrides in force as a sorted tuple of (name, value): hashable, so decisions cached on it are per override
_override: contextvars.ContextVar[tuple] = contextvars.ContextVar("humming_knob_override", default=())
_user_file_knobs: dict[str, tuple[tuple[int, int], dict]] = {}


@contextlib.contextmanager
def override(values: dict):
    """Knob values that win over every file while the block runs (this thread and the tasks it starts with
    contextvars). Unknown knobs and wrong values raise ProfileError."""
    for name, value in values.items():
        if name not in KNOBS:
            raise ProfileError(f"override: unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}")
        KNOBS[name].check(value, "override")
    token = _override.set(tuple(sorted({**dict(_override.get()), **values}.items())))
    try:
        yield
    finally:
        _override.reset(token)


def overridden() -> tuple:
    """The overrides in force, as a hashable sorted tuple of (name, value): for cache keys of decisions that
    depend on knobs."""
    return _override.get()


_user_paths: dict[tuple, str] = {}


def user_knobs() -> dict:
    """The ``"knobs"`` object of the user tuning file (empty when the file or the object is missing); re-read when
    the file changes."""
    where = (settings.raw("HUMMING_TUNE_FILE"), settings.raw("HUMMING_CACHE_DIR"))
    path = _user_paths.get(where)
    if path is None:
        path = _user_paths[where] = str(settings.tune_file())
    try:
        st = os.stat(path)
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    hit = _user_file_knobs.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        values = data.get("knobs", {}) if isinstance(data, dict) else {}
    except (OSError, ValueError):
        values = {}
    if not isinstance(values, dict):
        raise ProfileError(f"{path}: \"knobs\" must be an object of knob names and values")
    for name, value in values.items():
        if name not in KNOBS:
            raise ProfileError(f"{path}: unknown knob {name!r}; known: {', '.join(sorted(KNOBS))}")
        KNOBS[name].check(value, path)
    _user_file_knobs[path] = (stamp, values)
    return values


def value(name: str, caps=None) -> Any:
    """The value of a knob for a profile (None: the profile-independent data only)."""
    if name not in KNOBS:
        raise KeyError(f"knob {name!r} is not declared in humming.core.tuning.knobs.KNOBS")
    for forced, value_ in _override.get():
        if forced == name:
            return value_
    user = user_knobs()
    if name in user:
        return user[name]
    for values in profile_knobs(caps):
        if name in values:
            return values[name]
    base = defaults()
    if name not in base:
        raise ProfileError(f"{data_dir() / DEFAULTS}: knob {name} has no default value")
    return base[name]


def table(caps=None) -> dict:
    """Every knob's value for a profile (for `humming info` and the tuning docs)."""
    return {name: value(name, caps) for name in sorted(KNOBS)}


def values_words(knob: Knob) -> str:
    """The values a knob takes, as the tuning docs' table says them ("bool", "int 0..8", "64 / 128 / 256 or null")."""
    if knob.kind == "bool":
        words = "bool"
    elif knob.choices:
        words = " / ".join(str(c) for c in knob.choices)
    elif knob.lo is not None and (knob.hi is None or knob.hi >= 1 << 30):
        words = f"{knob.kind} >= {knob.lo:g}"
    elif knob.lo is not None:
        words = f"{knob.kind} {knob.lo:g}..{knob.hi:g}"
    else:
        words = knob.kind
    return words + (" or null" if knob.optional else "")


def markdown_table() -> str:
    """Every knob with its defaults.yaml value and meaning, the table of docs/tuning.md (in declaration order)."""
    base = defaults()
    rows = ["| knob | values | default | what it decides |", "|---|---|---|---|"]
    for name, knob in KNOBS.items():
        default = json.dumps(base.get(name))
        rows.append(f"| `{name}` | {values_words(knob)} | `{default}` | {' '.join(knob.doc.split())} |")
    return "\n".join(rows) + "\n"

