"""Measured tuning: the winners of timed candidate plans, stored per (profile, scheme, weight layout, N, K, M
bucket), and the planner hook that applies them.

    entry = lookup(caps, layout, n, k, m)        # dict or None
    record(plan, measured_us, device="NVIDIA H200")

How a stored entry becomes a plan (forced onto the planner, checked against the shape and the limits) is the
WnA16 family's: humming.core.families.mma_wna16.tuned.

Files. Lookups read the user file and the shipped defaults; a user entry wins over a shipped one.

- user file: ``$HUMMING_TUNE_FILE``, else ``<kernel cache dir>/tuning.json`` (``humming.core.compile.cache.cache_dir()``);
  ``python -m humming tune`` writes it (read-modify-write under a lock file, then an atomic rename).
- shipped defaults: ``device_profiles/tuning/<profile>.json`` (package data), measured with ``python -m humming tune``.
- ``HUMMING_TUNE=0`` turns lookups off (the planner's rules only).

Format (one JSON object)::

    {"format": 1, "entries": {"<profile>|<scheme>|<layout>|<N>x<K>|<bucket>": {
        "profile": ..., "scheme": ..., "layout": ..., "n": ..., "k": ..., "m_bucket": "9-16",
        "path": "stream" | "dequant-to-activation", "tiles": {bm, bn, bk, stages, warps_m, warps_n, warps_k},
        "splits": 1, "measured_us": 27.2, "default_us": 38.9, "m": 16, "date": "<when measured>",
        "device": "NVIDIA H200"}}}

An MoE GEMM's entries are keyed ``<profile>|<scheme>|<layout>|<N>x<K>|e<E>t<top_k>|<bucket of tokens>`` and also
hold ``experts`` and ``top_k``; the MoE families apply them (humming.core.families.moe_wna16.tuned).

The layout key (``layout_key``) names what the kernel depends on: decode kind and bits, activation type, scale
group and zero group. The scheme is part of the key, but two schemes with the same layout run the same kernel,
so a lookup without a scheme (the runtime knows only the prepared layout) takes any entry of that layout.

A stored config is only a request: ``tuned_plan`` passes it to ``plan_wna16`` as forced tiles/splits/path, which
checks it against the shape and the profile's limits; a config that is no longer valid is ignored (logged).
This module imports no torch and no CUDA.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import threading
import time
from pathlib import Path

from humming import settings
from humming.core.compile import cache as _cache
from humming.core.plan import Plan
from humming.errors import ShapeError

log = logging.getLogger("humming.tuning")

ENV_FILE = "HUMMING_TUNE_FILE"
ENV_ENABLE = "HUMMING_TUNE"
FORMAT_VERSION = 1
FILE_NAME = "tuning.json"
SHIPPED_GLOB = "*.json"  # device_profiles/tuning/<profile>.json: the measured entries shipped per profile

# ------------------------------------------------------------------------------------------------ M buckets
#: Upper bounds of the M buckets; M above the last bound falls in one open bucket. The prefill buckets follow the
#: two-warpgroup form's 256-token tiles where a round of tiles decides (M 768: 3 tiles, 1024: 4).
M_BUCKET_BOUNDS: tuple[int, ...] = (1, 8, 16, 32, 64, 128, 256, 512, 768, 1024, 2048, 4096)
#: Buckets above this M are planned at sample M values, not at every M, when something must be done per M
#: (``python -m humming build``): the prefill kernels there do not change with M inside a bucket.
SAMPLED_ABOVE_M = 1024
LARGE_M_SAMPLES: tuple[int, ...] = (1025, 2048, 2049, 4096, 4097, 8192, 16384)
DECODE_MAX_M = 64  # buckets up to here are "decode", above "prefill" (for reports)


@dataclasses.dataclass(frozen=True)
class Bucket:
    lo: int
    hi: int | None  # None: open above lo

    @property
    def label(self) -> str:
        if self.hi is None:
            return f">{self.lo - 1}"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"

    def __contains__(self, m: int) -> bool:
        return m >= self.lo and (self.hi is None or m <= self.hi)

    def ms(self) -> tuple[int, ...]:
        """Every M of a bucket up to SAMPLED_ABOVE_M; samples (LARGE_M_SAMPLES) of those above it."""
        if self.lo > SAMPLED_ABOVE_M:
            return tuple(v for v in LARGE_M_SAMPLES if v in self)
        return tuple(range(self.lo, self.hi + 1))


#: Buckets of older tuning files (before: ..., 257-512, 513-1024, >1024), split since: an entry of one
#: still applies to its M where no file has an entry of M's own bucket.
LEGACY_BUCKETS: dict[str, Bucket] = {"513-1024": Bucket(513, 1024), ">1024": Bucket(1025, None)}


def buckets() -> tuple[Bucket, ...]:
    out, lo = [], 1
    for hi in M_BUCKET_BOUNDS:
        out.append(Bucket(lo, hi))
        lo = hi + 1
    out.append(Bucket(lo, None))
    return tuple(out)


def bucket_of(m: int) -> Bucket:
    """The M bucket holding ``m`` (1, 2-8, 9-16, 17-32, ..., 257-512, 513-768, 769-1024, 1025-2048, 2049-4096,
    >4096)."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    for b in buckets():
        if m in b:
            return b
    raise AssertionError("the open bucket holds every M")  # pragma: no cover


def m_bucket(m: int) -> str:
    """The label of M's bucket: '1', '2-8', '9-16', ..., '513-768', '769-1024', '1025-2048', '2049-4096', '>4096'."""
    return bucket_of(m).label


# ------------------------------------------------------------------------------------------------ keys
def layout_key(layout) -> str:
    """What a measured config depends on besides N and K: decode kind/bits, activation, scale and zero groups."""
    d = layout.decode
    return f"{d.kind}{d.bits}.{d.act}.g{layout.scale_group}.z{layout.zero_group}"


def _profile_name(caps) -> str:
    return caps if isinstance(caps, str) else caps.name


def shape_label(n: int, k: int, moe: tuple[int, int] | None = None) -> str:
    """``NxK`` of a dense layer; ``NxK|e<E>t<top_k>`` of an MoE GEMM (E experts, top-k of them per token: an MoE
    entry's bucket is that of the tokens)."""
    return f"{n}x{k}" if moe is None else f"{n}x{k}|e{int(moe[0])}t{int(moe[1])}"


def entry_key(profile: str, scheme: str, layout: str, n: int, k: int, bucket: str,
              moe: tuple[int, int] | None = None) -> str:
    return f"{profile}|{scheme}|{layout}|{shape_label(n, k, moe)}|{bucket}"


# ------------------------------------------------------------------------------------------------ files
def tune_file() -> Path:
    """The user tuning file: $HUMMING_TUNE_FILE, else <kernel cache dir>/tuning.json."""
    return settings.tune_file()


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[Path, ...]:
    from humming.core.tuning.knobs import data_dir

    return tuple(sorted(data_dir().glob(SHIPPED_GLOB)))


def shipped_files() -> list[Path]:
    """The tuning files shipped as package data (device_profiles/tuning/*.json)."""
    return list(_shipped())


_rules_only = threading.local()


def tuning_enabled() -> bool:
    """False when HUMMING_TUNE is 0/false/off/no, or inside ``rules_only()``: measured entries are not looked up."""
    return not getattr(_rules_only, "on", False) and settings.flag(ENV_ENABLE)


@contextlib.contextmanager
def rules_only():
    """In this thread, plan by the rules alone (a tuner's default plan: what runs where nothing was measured)."""
    before = getattr(_rules_only, "on", False)
    _rules_only.on = True
    try:
        yield
    finally:
        _rules_only.on = before


_load_lock = threading.Lock()
_loaded: dict[str, tuple[tuple[int, int], dict]] = {}  # path -> ((mtime_ns, size), entries)


def read_entries(path: Path) -> dict:
    """The entries of one tuning file ({} if missing; a malformed file is logged and ignored)."""
    try:
        st = path.stat()
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    key = str(path)
    with _load_lock:
        hit = _loaded.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("format", FORMAT_VERSION) != FORMAT_VERSION or \
                not isinstance(data.get("entries", {}), dict):
            raise ValueError(f"not a format-{FORMAT_VERSION} tuning file")
        entries = {k: v for k, v in data.get("entries", {}).items() if isinstance(v, dict)}  # (a file of knobs only)
    except (OSError, ValueError) as exc:
        log.warning("humming tuning: ignoring %s (%s)", path, exc)
        entries = {}
    with _load_lock:
        _loaded[key] = (stamp, entries)
    return entries


def clear_memory() -> None:
    """Forget parsed files (they are re-read when their modification time or size changes anyway)."""
    with _load_lock:
        _loaded.clear()


def _sources() -> list[tuple[str, dict]]:
    """(origin, entries), highest priority first: the user file, then the shipped defaults."""
    user = tune_file()
    out = [(str(user), read_entries(user))]
    out += [(f"shipped {p.name}", read_entries(p)) for p in shipped_files()]
    return out


# ------------------------------------------------------------------------------------------------ lookup
def lookup(caps, layout, n: int, k: int, m: int, scheme: str = "", moe: tuple[int, int] | None = None) -> dict | None:
    """The stored winner for (profile, scheme, layout, N, K, bucket of M), or None; ``moe`` (experts, top_k): the
    winner of that MoE GEMM with M its tokens.

    Files are searched in priority order (user file, then shipped); within a file an entry of ``scheme`` is
    preferred, any entry of the same layout is taken otherwise (the layout, not the scheme's name, decides
    the kernel). An entry of a bucket of older files that was split since (LEGACY_BUCKETS) stands in where no file has
    one of M's own bucket. The returned dict is a copy with ``origin`` (which file it came from) added."""
    if not tuning_enabled():
        return None
    profile, lk = _profile_name(caps), layout_key(layout)
    labels = (m_bucket(m),) + tuple(label for label, b in LEGACY_BUCKETS.items() if m in b)
    sources = _sources()
    for bucket in labels:  # a file's entry of M's own bucket wins over any file's entry of a legacy bucket
        exact = entry_key(profile, scheme, lk, n, k, bucket, moe) if scheme else None
        suffix = f"|{lk}|{shape_label(n, k, moe)}|{bucket}"
        prefix = f"{profile}|"
        for origin, found in sources:
            if exact and exact in found:
                return dict(found[exact], origin=origin)
            same_layout = sorted(key for key in found if key.startswith(prefix) and key.endswith(suffix))
            if same_layout:
                return dict(found[same_layout[0]], origin=origin)
    return None


def measured_reason(entry: dict, bucket: str) -> str:
    """The plan's reason for a measured entry: its bucket, times, device, date and file."""
    return (f"tuned for M bucket {entry.get('m_bucket') or bucket}: {entry.get('measured_us', '?')} us measured"
            + (f" (the default plan of that run: {entry['default_us']} us)" if entry.get("default_us") else "")
            + f" on {entry.get('device') or 'an unnamed device'}, {entry.get('date') or 'undated'} "
              f"({entry.get('origin', 'given')})")


# ------------------------------------------------------------------------------------------------ record
@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive advisory lock on <file>.lock for read-modify-write (best effort where fcntl is missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def make_entry(plan: Plan, measured_us: float, *, scheme: str | None = None, device: str = "",
               default_us: float | None = None, date: str | None = None, moe: tuple[int, int] | None = None,
               **extra) -> tuple[str, dict]:
    """(key, entry) for a measured plan; the bucket is that of ``plan.m`` (an MoE plan's tokens, with ``moe`` its
    (experts, top_k))."""
    scheme = plan.scheme if scheme is None else scheme
    lk, bucket = layout_key(plan.layout), m_bucket(plan.m)
    entry = {
        "profile": plan.profile, "scheme": scheme, "layout": lk, "n": plan.n, "k": plan.k, "m_bucket": bucket,
        "m": plan.m, "path": plan.path, "tiles": dataclasses.asdict(plan.tiles), "splits": plan.splits,
        "measured_us": round(float(measured_us), 2),
        "default_us": None if default_us is None else round(float(default_us), 2),
        "date": date or time.strftime("%Y-%m-%d"), "device": device,
    }
    if moe is not None:
        entry.update(experts=int(moe[0]), top_k=int(moe[1]))
    entry.update(extra)
    return entry_key(plan.profile, scheme, lk, plan.n, plan.k, bucket, moe), entry


def record(plan: Plan, measured_us: float, *, scheme: str | None = None, device: str = "",
           default_us: float | None = None, date: str | None = None, path: Path | str | None = None,
           moe: tuple[int, int] | None = None, **extra) -> str:
    """Store a measured winner (replacing the entry of the same key) in the user file; returns its key."""
    key, entry = make_entry(plan, measured_us, scheme=scheme, device=device, default_us=default_us, date=date,
                            moe=moe, **extra)
    target = Path(path) if path is not None else tune_file()
    with _file_lock(target):
        entries = dict(read_entries(target))
        entries[key] = entry
        write_entries(target, entries)
    return key


def write_entries(path: Path, entries: dict, note: str | None = None) -> None:
    """Write ``entries`` into a tuning file, keeping what else it holds (its ``"knobs"``, its note unless given)."""
    data = {"format": FORMAT_VERSION}
    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict):
        data.update({k: v for k, v in old.items() if k not in ("format", "entries")})
    if note:
        data["note"] = note
    data["entries"] = dict(sorted(entries.items()))
    _cache.atomic_write(Path(path), (json.dumps(data, indent=1) + "\n").encode())
    with _load_lock:
        _loaded.pop(str(path), None)


def entries() -> list[dict]:
    """Every visible entry (user file first, then shipped), each with its key and origin."""
    out = []
    for origin, found in _sources():
        out += [dict(v, key=k, origin=origin) for k, v in sorted(found.items())]
    return out


__all__ = [
    "M_BUCKET_BOUNDS", "Bucket", "bucket_of", "buckets", "clear_memory", "entries", "layout_key", "lookup",
    "m_bucket", "make_entry", "measured_reason", "rules_only", "shape_label", "read_entries", "record", "shipped_files", "tune_file", "tuning_enabled",
    "write_entries",
]
