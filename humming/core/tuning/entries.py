"""Measured tuning: the winners of timed candidate plans, stored per (profile, scheme, weight layout, N, K, M
bucket), and the planner hook that applies them.

    entry = lookup(caps, layout, n, k, m)        # dict or None
    plan = tuned_plan(caps, layout, m, act)      # a Plan with the measured config forced, or None
    plan = choose_plan(caps, layout, m, act)     # tuned_plan(...) or the planner's rules
    record(plan, measured_us, device="NVIDIA H200")

Files. Lookups read the user file and the shipped defaults; a user entry wins over a shipped one.

- user file: ``$HUMMING_TUNE_FILE``, else ``<kernel cache dir>/tuning.json`` (``humming.core.compile.cache.cache_dir()``);
  ``python -m humming tune`` writes it (read-modify-write under a lock file, then an atomic rename).
- shipped defaults: ``humming/core/tuned_*.json`` (package data), measured with ``bench/sweep_wna16.py``.
- ``HUMMING_TUNE=0`` turns lookups off (the planner's rules only).

Format (one JSON object)::

    {"format": 1, "entries": {"<profile>|<scheme>|<layout>|<N>x<K>|<bucket>": {
        "profile": ..., "scheme": ..., "layout": ..., "n": ..., "k": ..., "m_bucket": "9-16",
        "path": "stream" | "dequant-to-activation", "tiles": {bm, bn, bk, stages, warps_m, warps_n, warps_k},
        "splits": 1, "measured_us": 27.2, "default_us": 38.9, "m": 16, "date": "2026-11-29",
        "device": "NVIDIA H200"}}}

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
import itertools
import json
import logging
import math
import threading
import time
from pathlib import Path

from humming import settings
from humming.core.compile import cache as _cache
from humming.core.plan import STREAM_MAX_M, Plan, TileConfig, plan_wna16
from humming.core.tuning import knobs
from humming.devices.current import runs_here
from humming.errors import HummingError, ShapeError, UnsupportedOnDevice

log = logging.getLogger("humming.tuning")

ENV_FILE = "HUMMING_TUNE_FILE"
ENV_ENABLE = "HUMMING_TUNE"
FORMAT_VERSION = 1
FILE_NAME = "tuning.json"
SHIPPED_DIR = Path(__file__).resolve().parent
SHIPPED_GLOB = "tuned_*.json"

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


#: Buckets of older tuning files (before 2026-12-01: ..., 257-512, 513-1024, >1024), split since: an entry of one
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


def entry_key(profile: str, scheme: str, layout: str, n: int, k: int, bucket: str) -> str:
    return f"{profile}|{scheme}|{layout}|{n}x{k}|{bucket}"


# ------------------------------------------------------------------------------------------------ files
def tune_file() -> Path:
    """The user tuning file: $HUMMING_TUNE_FILE, else <kernel cache dir>/tuning.json."""
    return settings.tune_file()


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[Path, ...]:
    return tuple(sorted(SHIPPED_DIR.glob(SHIPPED_GLOB)))


def shipped_files() -> list[Path]:
    """The tuning files shipped as package data (humming/core/tuned_*.json)."""
    return list(_shipped())


def tuning_enabled() -> bool:
    """False when HUMMING_TUNE is 0/false/off/no: measured entries are not looked up."""
    return settings.flag(ENV_ENABLE)


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
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or not isinstance(data.get("entries"), dict):
            raise ValueError(f"not a format-{FORMAT_VERSION} tuning file")
        entries = {k: v for k, v in data["entries"].items() if isinstance(v, dict)}
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
def lookup(caps, layout, n: int, k: int, m: int, scheme: str = "") -> dict | None:
    """The stored winner for (profile, scheme, layout, N, K, bucket of M), or None.

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
        exact = entry_key(profile, scheme, lk, n, k, bucket) if scheme else None
        suffix = f"|{lk}|{n}x{k}|{bucket}"
        prefix = f"{profile}|"
        for origin, found in sources:
            if exact and exact in found:
                return dict(found[exact], origin=origin)
            same_layout = sorted(key for key in found if key.startswith(prefix) and key.endswith(suffix))
            if same_layout:
                return dict(found[same_layout[0]], origin=origin)
    return None


def _forced(entry: dict) -> tuple[TileConfig, int, str]:
    tiles = TileConfig(**{f.name: int(entry["tiles"].get(f.name, f.default)) for f in dataclasses.fields(TileConfig)})
    splits = int(entry["splits"])
    path = entry["path"] if entry["path"] in ("stream", RS_PATH) else "tile"
    return tiles, splits, path


def tuned_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan | None:
    """The planner's plan with the measured configuration of M's bucket forced, or None on a miss or when the
    stored configuration is not valid here any more (a changed profile, planner or hand-edited file)."""
    entry = lookup(caps, layout, layout.n, layout.k, m, scheme)
    if entry is None:
        return None
    try:
        tiles, splits, path = _forced(entry)
        if path == "stream" and m > STREAM_MAX_M:
            raise ShapeError(f"the stream path takes M <= {STREAM_MAX_M}")
        if path == RS_PATH and tiles.bn > 64:  # the two-warpgroup form below its default M (same weights)
            _two_warpgroup_padding_check(m, tiles.bm)
            bt = two_warpgroup_token_tile(m, tiles.bm, caps)
            plan = _rs_prefill_plan(caps, layout, m, act, scheme, bt, tiles.tail, tiles.streamk, lowest=1)
            plan = _streamk_where_rounds_fill_badly(caps, layout, m, act, scheme, plan, int(entry.get("m") or 0),
                                                    tiles.bm)
        elif path == RS_PATH:
            plan = _rs_small_plan(caps, layout, m, act, scheme, splits, tiles.stages, tiles.bm, tiles.fold,
                                  True if tiles.bulk else None,  # bulk=0 (or an entry older than it): the default
                                  tiles.cluster, tiles.occupancy, tiles.prefetch)
        else:
            plan = plan_wna16(caps, layout, m, act, scheme=scheme, tiles=tiles, splits=splits, path=path)
    except (ShapeError, UnsupportedOnDevice, KeyError, TypeError, ValueError) as exc:
        log.info("humming tuning: stored config for %s bucket %s from %s ignored: %s",
                 layout_key(layout), m_bucket(m), entry.get("origin"), exc)
        return None
    why = (f"tuned for M bucket {entry.get('m_bucket') or m_bucket(m)}: {entry.get('measured_us', '?')} us measured"
           + (f" (the default plan of that run: {entry['default_us']} us)" if entry.get("default_us") else "")
           + f" on {entry.get('device') or 'an unnamed device'}, {entry.get('date') or 'undated'} ({entry['origin']})")
    return dataclasses.replace(plan, reasons=plan.reasons + (why,))


def two_warpgroup_token_tile(m: int, bt: int, caps=None) -> int:
    """The token tile a two-warpgroup entry runs M with: its own (the planner then fits it to M), or, with the fitting
    off (the knob wgmma.fit_token_tile false), 128 instead of 256 where 128-token tiles hold fewer rows and 256-token ones would
    be under planner_wgmma_rs.STREAMK_NARROW_BELOW tokens (the rule of its default plans from M 513 then). Measured on the H200 (2026-12-01, W4A16 g128, scripts/ab_env.py, us, the 257-512
    entries with 256 / 128): 8192x8192 M=270 135.5 / 106.0, M=300 127.6 / 102.1, M=380 90.5 / 101.6, M=400 91.7 /
    111.0; 28672x8192 M=270 498.5 / 329.4, M=300 455.8 / 317.8, M=380 343.1 / 340.1, M=400 346.7 / 454.1."""
    from humming.core.families.register_a import planner as rs

    if rs.fit_on(caps):  # the planner fits the entry's tile to M (rs.fitted_token_tile): few padding rows either way
        return bt
    rows = bt * math.ceil(m / bt)
    if bt == 256 and 128 * math.ceil(m / 128) < rows and m / rows < rs.STREAMK_NARROW_BELOW:
        return 128
    return bt


def _streamk_where_rounds_fill_badly(caps, layout, m: int, act: str, scheme: str, plan: Plan,
                                     measured_m: int, entry_bt: int) -> Plan:
    """Rule (1) of the knob register_a.rounds_rules: a two-warpgroup entry without stream-K or tail whose whole tiles fill
    the last round of SMs badly at this M, where its tiles (``entry_bt`` tokens) did not at the M it was measured at
    (``measured_m``), runs stream-K over 256-token tiles (fitted to M) instead."""
    from humming.core.families.register_a import planner as rs

    t, sms = plan.tiles, caps.limits.sms or 0
    channel_tiles = layout.n // rs.BC
    if t.tail or t.streamk or not rs.rounds_rules_on(caps) or not rs.rounds_badly_filled(plan.grid[0] * plan.grid[1], sms):
        return plan
    if not measured_m or rs.rounds_badly_filled(math.ceil(measured_m / entry_bt) * channel_tiles, sms):
        return plan  # chosen where its tiles filled the rounds as badly: the measurement stands
    try:
        sk = _rs_prefill_plan(caps, layout, m, act, scheme, rs.STREAMK_BT, streamk=sms, lowest=1)
    except (ShapeError, UnsupportedOnDevice):
        return plan
    why = (f"stream-K over {sms} blocks with {sk.tiles.bm}-token tiles instead of the entry's {entry_bt}-token tiles: "
           f"{plan.grid[0] * plan.grid[1]} tiles of {t.bm} tokens would fill the last round of {sms} SMs badly at "
           f"M={m}, unlike at M={measured_m} where it was measured ({rs.ROUNDS_KNOB} false: the entry as stored)")
    return dataclasses.replace(sk, reasons=sk.reasons + (why,))


def _two_warpgroup_padding_check(m: int, bt: int) -> None:
    """A two-warpgroup entry (measured at M=128 for bucket 65-128) runs an M below 128 only where its one token tile
    of ``bt`` rows is at least three quarters tokens; below that the small form with a token tile fitted to M is
    faster. Measured on the H200 (2026-12-01, 28672x8192 W4A16 g128, scripts/ab_env.py, us, entry / small form):
    M=65 144.8 / 107.2, M=80 116.4 / 89.8, M=96 108.5 / 97.9, M=112 107.1 / 135.6, M=127 106.1 / 139.6."""
    from humming.core.families.register_a import planner as rs

    if m < rs.MIN_M and 4 * (bt * math.ceil(m / bt) - m) >= bt:
        raise ShapeError(f"the two-warpgroup entry's {bt}-token tile would be {bt - m % bt} rows of padding at M={m} "
                         "(a quarter or more): the small form's fitted tile runs it")


RS_PATH = "wgmma-rs"  # the register-A wgmma kernel; its small-M form (M 9-64) is a tuning candidate
_RS_SPLITS = (1, 2, 4, 8, 16)
_RS_STAGES = (4, 6, 8)
_RS_OCCUPANCY = (6, 7, 8)  # blocks per SM of the small form's occupancy option among the tuner's candidates


def _require_register_a_here(caps, m: int, lowest: int, form: str) -> None:
    """ShapeError / UnsupportedOnDevice unless the register-A form ``form`` may run M here: M >= ``lowest``, the
    wgmma kernels switched on, and the live GPU of the profile's target (a forced profile keeps the mma.sync kernels)."""
    from humming.core.families.register_a import planner as rs

    if m < lowest:
        raise ShapeError(f"the {form} register-A form takes M >= {lowest}, not {m}")
    if rs.min_m(caps) is None or not knobs.value("wgmma_wna16.enabled", caps):
        raise UnsupportedOnDevice("the register-A wgmma kernel is switched off (tuning knobs register_a.min_m: null "
                                  "or wgmma_wna16.enabled: false)")
    if not runs_here(caps):
        raise UnsupportedOnDevice(f"the live GPU is not {caps.name}'s own target (wgmma kernels run only there)")


def _rs_prefill_plan(caps, layout, m: int, act: str, scheme: str, bt: int, tail: int = 0, streamk: int = 0,
                     lowest: int | None = None) -> Plan:
    """The two-warpgroup register-A plan (128 channels per block, its producer warpgroup where declared) at an M
    below its default threshold, with a token tile of ``bt`` (and ``tail`` tiles split in K quarters, or ``streamk``
    persistent blocks): a tuning candidate from M 128 (``lowest``, default rs.MIN_M: a stored entry runs anywhere in
    its bucket), run on the same prepared weights as the small form."""
    from humming.core.families.register_a import planner as rs

    _require_register_a_here(caps, m, rs.MIN_M if lowest is None else lowest, "two-warpgroup")
    why = rs.layout_refusal(layout) or rs.default_refusal(layout)
    if why:
        raise UnsupportedOnDevice(f"the two-warpgroup register-A form does not take this layout: {why}")
    return rs.plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=bt, small=False, tail=tail, streamk=streamk)


def _rs_small_plan(caps, layout, m: int, act: str, scheme: str, splits: int | None, stages: int | None,
                   bt: int | None = None, fold: int = 0, tma: bool | None = None, cluster: int = 0,
                   occupancy: int = 0, prefetch: int = 0) -> Plan:
    """The small-M register-A wgmma plan (runs on the mma.sync handle's prepared weights), or UnsupportedOnDevice /
    ShapeError: it needs M 9-64, a layout it decodes, the wgmma kernels enabled and the live GPU of the profile's
    target (a profile forced onto another GPU keeps the mma.sync kernels)."""
    from humming.core.families.register_a import planner as rs

    _require_register_a_here(caps, m, rs.SMALL_MIN_M, "small-M")
    return rs.plan_wna16_wgmma_rs(caps, layout, m, act, scheme=scheme, bt=bt, splits=splits, stages=stages, fold=fold,
                                  small=True, tma=tma, cluster=cluster, occupancy=occupancy, prefetch=prefetch)


def register_a_prefill_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """The plan of the handle that runs the two-warpgroup register-A form from its default M (humming.api): a tuned
    entry of M's bucket that is that form (``bn`` = 128, e.g. with stream-K) on a hit, else the planner's rules.
    Entries of other kernels in the bucket (e.g. a tile kernel stored below the form's threshold) are not taken. The
    launch options (programmatic dependent launch) applied, as the handle launches it."""
    from humming.core.families.register_a import planner as rs
    from humming.core.plan import launch_options

    tuned = tuned_plan(caps, layout, m, act, scheme)
    if tuned is not None and tuned.path == RS_PATH and tuned.tiles.bn == rs.BC:
        return launch_options(caps, tuned)
    return launch_options(caps, rs.prefill_default(caps, layout, m, act, scheme))


def runs_register_a_prefill(caps, layout, m: int) -> bool:
    """True where humming.gemm runs M on the two-warpgroup register-A form (the register_a family):
    M from the form's threshold, the wgmma kernels on, a declared wgmma k16 form for the activations and cp.async, the
    live GPU of the profile's target, a layout it takes."""
    from humming.core.families.register_a import planner as rs
    from humming.core.families.wgmma_dequant.planner import wgmma_k16_form

    lowest = rs.min_m(caps)
    if lowest is None or m < lowest or not caps.memory.cp_async or wgmma_k16_form(caps, layout.decode.act) is None:
        return False
    try:
        _require_register_a_here(caps, m, lowest, "two-warpgroup")
    except (ShapeError, UnsupportedOnDevice):
        return False
    return not rs.layout_refusal(layout) and (rs.forced(caps) or not rs.default_refusal(layout))


def runtime_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """The plan humming.gemm runs for M with the tuning files as they are (the register-A prefill handle's or
    choose_plan's); the launch options applied."""
    if runs_register_a_prefill(caps, layout, m):
        return register_a_prefill_plan(caps, layout, m, act, scheme)
    return choose_plan(caps, layout, m, act, scheme)


def choose_plan(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """What the runtime should run for M: the tuned plan on a hit, else the planner's rules (the small-M register-A
    wgmma form where it applies and the live GPU runs the profile's wgmma, else plan_wna16)."""
    from humming.core.plan import launch_options

    tuned = tuned_plan(caps, layout, m, act, scheme)
    if tuned is not None:
        return launch_options(caps, tuned)
    from humming.core.families.register_a import planner as rs

    if m >= rs.SMALL_MIN_M and knobs.value("wgmma_wna16.enabled", caps):
        if runs_here(caps):
            p = rs.small_default(caps, layout, m, act, scheme)
            if p is not None:
                return launch_options(caps, p)
    return launch_options(caps, plan_wna16(caps, layout, m, act, scheme=scheme))


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
               default_us: float | None = None, date: str | None = None, **extra) -> tuple[str, dict]:
    """(key, entry) for a measured plan; the bucket is that of ``plan.m``."""
    scheme = plan.scheme if scheme is None else scheme
    lk, bucket = layout_key(plan.layout), m_bucket(plan.m)
    entry = {
        "profile": plan.profile, "scheme": scheme, "layout": lk, "n": plan.n, "k": plan.k, "m_bucket": bucket,
        "m": plan.m, "path": plan.path, "tiles": dataclasses.asdict(plan.tiles), "splits": plan.splits,
        "measured_us": round(float(measured_us), 2),
        "default_us": None if default_us is None else round(float(default_us), 2),
        "date": date or time.strftime("%Y-%m-%d"), "device": device,
    }
    entry.update(extra)
    return entry_key(plan.profile, scheme, lk, plan.n, plan.k, bucket), entry


def record(plan: Plan, measured_us: float, *, scheme: str | None = None, device: str = "",
           default_us: float | None = None, date: str | None = None, path: Path | str | None = None,
           **extra) -> str:
    """Store a measured winner (replacing the entry of the same key) in the user file; returns its key."""
    key, entry = make_entry(plan, measured_us, scheme=scheme, device=device, default_us=default_us, date=date, **extra)
    target = Path(path) if path is not None else tune_file()
    with _file_lock(target):
        entries = dict(read_entries(target))
        entries[key] = entry
        write_entries(target, entries)
    return key


def write_entries(path: Path, entries: dict, note: str | None = None) -> None:
    data = {"format": FORMAT_VERSION}
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


# ------------------------------------------------------------------------------------------------ candidates
_STREAM_WARPS_K = (2, 4, 8, 16)  # 16: 512 threads, 128 registers each (the small layers at M <= 8, eleventh session)
_STREAM_SPLITS = (1, 2, 4, 8)
_STREAM_IN_FLIGHT = (1, 2, 3)
_STREAM_BULK_SLOTS = (2, 4, 6, 8)  # ring slots per warp of the bulk-copy stream kernel (profiles declaring tma)
_TILE_SPLITS = (1, 2, 3, 4, 6, 8)
_SMALL_M_TILES = ((1, 3), (1, 4), (4, 3), (4, 4))  # (warps_k, stages) of the 64-wide slab tiles, M <= 64
# (bm, warps_m, warps_n, warps_k, bk, stages), M > 64
_LARGE_M_TILES = ((64, 2, 2, 1, 64, 4), (64, 2, 2, 2, 128, 3), (128, 2, 2, 1, 64, 4), (128, 2, 2, 2, 128, 3),
                  (128, 2, 4, 1, 64, 4), (64, 1, 2, 2, 128, 4), (128, 4, 2, 1, 64, 4), (128, 2, 2, 1, 64, 3),
                  (64, 1, 2, 2, 128, 3))


def candidate_configs(m: int) -> list[tuple[str, TileConfig, int]]:
    """(path, tiles, splits) to time for M (the search space of bench/sweep_wna16.py)."""
    out: list[tuple[str, TileConfig, int]] = []
    if m <= STREAM_MAX_M:
        bm = 8 if m <= 8 else 16
        for wk in _STREAM_WARPS_K:
            for splits in _STREAM_SPLITS:
                for in_flight in _STREAM_IN_FLIGHT:
                    # activations: loaded per atom (0, 0), in the register ring (1, 0), staged in shared memory (0, 1)
                    for x_ring, x_smem in ((0, 0), (1, 0), (0, 1)):
                        for fold in ((0, 1, 2) if x_ring or x_smem else (0, 1)):  # the planner refuses what a layout cannot take
                            out.append(("stream", TileConfig(bm, 64, 64 * wk, in_flight + 1, 1, 1, wk, x_ring, fold,
                                                             x_smem=x_smem), splits))
                for slots in _STREAM_BULK_SLOTS:
                    for fold in (0, 1, 2):
                        out.append(("stream", TileConfig(bm, 64, 64 * wk, slots, 1, 1, wk, 0, fold, 1), splits))
    if m <= 64:
        tm = (m + 15) // 16
        tiles = [TileConfig(16 * tm, 64, 64 * wk, stages, 1, 1, wk) for wk, stages in _SMALL_M_TILES]
    else:
        tiles = [TileConfig(bm, 64 * wn, bk, stages, wm, wn, wk) for bm, wm, wn, wk, bk, stages in _LARGE_M_TILES]
    out += [("tile", t, s) for t in tiles for s in _TILE_SPLITS]
    return out


def _add_unique(plans: list[Plan], seen: set, p: Plan) -> None:
    sig = (p.path, p.tiles, p.splits)
    if sig not in seen:
        seen.add(sig)
        plans.append(p)


def candidates(caps, layout, m: int, act: str, scheme: str = "", *, include_tile_for_stream: bool = True) -> list[Plan]:
    """The planner's default plan first (what humming.gemm runs without a tuning entry: from the register-A prefill
    form's threshold that form's rules), then every valid candidate plan for M (duplicates removed)."""
    from humming.core.families.register_a import planner as rs

    if runs_register_a_prefill(caps, layout, m):
        default = rs.prefill_default(caps, layout, m, act, scheme)
    else:
        default = plan_wna16(caps, layout, m, act, scheme=scheme)
    plans, seen = [default], {(default.path, default.tiles, default.splits)}
    for path, tiles, splits in candidate_configs(m):
        if path == "tile" and m <= STREAM_MAX_M and not include_tile_for_stream:
            continue
        try:
            p = plan_wna16(caps, layout, m, act, scheme=scheme, tiles=tiles, splits=splits, path=path)
        except HummingError:
            continue
        _add_unique(plans, seen, p)
    _add_balanced(plans, seen, caps, layout, m, act, scheme)

    # the small-M register-A wgmma form where the profile runs wgmma here: (token tile, splits, stages, fold, tma);
    # fold=2 was never faster than fold=1 on the H200 (2026-11-30) and is not timed; above 64 tokens, tiles of 64 / 128;
    # activations by cp.async and, where the profile declares it, by TMA tensor copy
    copies = (False, True) if caps.memory.tma and caps.memory.mbarrier else (False,)
    if rs.SMALL_MIN_M <= m <= rs.SMALL_MAX_M:
        configs = itertools.product((None,), _RS_SPLITS, _RS_STAGES, (0, 1), copies)
    elif rs.SMALL_MAX_M < m < rs.DEFAULT_MIN_M:
        configs = itertools.product((64, 128), (1, 2, 4), (4, 6), (0,), copies)
    else:
        configs = ()
    # with TMA copies, also as thread-block clusters of 2 / 4 slabs sharing each activation stage (multicast)
    clusters = (0,) + (rs.CLUSTER_SIZES if caps.memory.cluster_multicast else ())
    for bt, splits, stages, fold, tma in configs:
        for cluster in clusters if tma else (0,):
            try:
                p = _rs_small_plan(caps, layout, m, act, scheme, splits, stages, bt, fold, tma, cluster)
            except HummingError:
                continue
            _add_unique(plans, seen, p)
    # up to 64 tokens, also with the occupancy option (more warpgroups per SM, each with a shallow ring), activations
    # by TMA where declared
    if rs.SMALL_MIN_M <= m <= rs.SMALL_MAX_M:
        for splits, stages, fold, occupancy in itertools.product(_RS_SPLITS, (4, 8), (0, 1), _RS_OCCUPANCY):
            try:
                p = _rs_small_plan(caps, layout, m, act, scheme, splits, stages, None, fold, copies[-1], 0, occupancy)
            except HummingError:
                continue
            _add_unique(plans, seen, p)
    # the two-warpgroup form (128 channels per block: half the activation reads), from one 128-token tile; from
    # DEFAULT_MIN_M humming.gemm runs it (its own handle), so the bucket's winner is measured against it there too
    if m >= rs.MIN_M:
        # also with the tail option where the last round's tiles split in K quarters fill a round better, and as
        # stream-K over one persistent block per SM
        sms = caps.limits.sms or 0
        for bt in (128, 256):
            tail = rs.tail_tiles(math.ceil(m / bt) * (layout.n // rs.BC), sms)
            for split_tail, streamk in ((0, 0), *(((tail, 0),) if tail else ()), *(((0, sms),) if sms else ())):
                try:
                    p = _rs_prefill_plan(caps, layout, m, act, scheme, bt, split_tail, streamk)
                except HummingError:
                    continue
                _add_unique(plans, seen, p)
    return plans


def _add_balanced(plans: list, seen: set, caps, layout, m: int, act: str, scheme: str) -> None:
    """Stream candidates without split-K, again with ``balance``: the last slabs split in two halves of K so that
    N/64 + balance blocks fill whole rounds of blocks per SM. How many blocks of a kernel fit an SM depends on its
    registers (known after compiling), so the first two rounds above the slab count are timed."""
    sms, slabs = caps.limits.sms or 0, layout.n // 64
    rounds = [r for r in range(1, 9) if slabs < sms * r <= 2 * slabs][:2]
    if not sms or m > STREAM_MAX_M or not rounds:
        return
    for p in [p for p in plans if p.path == "stream" and p.splits == 1 and not p.tiles.bulk]:
        for r in rounds:
            try:
                q = plan_wna16(caps, layout, m, act, scheme=scheme, path="stream", splits=1,
                               tiles=dataclasses.replace(p.tiles, balance=sms * r - slabs))
            except HummingError:
                continue
            _add_unique(plans, seen, q)


__all__ = [
    "M_BUCKET_BOUNDS", "Bucket", "bucket_of", "buckets", "candidate_configs", "candidates", "choose_plan",
    "clear_memory", "entries", "layout_key", "lookup", "m_bucket", "make_entry", "read_entries", "record",
    "shipped_files", "tune_file", "tuned_plan", "tuning_enabled", "write_entries",
]
