"""Kernel cache: an in-process LRU in front of a content-addressed disk cache of compiled CUBIN/PTX.

Location: ``$HUMMING_CACHE_DIR``, else ``$XDG_CACHE_HOME/humming/kernels``, else ``~/.cache/humming/kernels``.
``HUMMING_CACHE=0`` disables both levels. ``HUMMING_CACHE_MEMORY`` sets the LRU size in entries (default 256).

Key: sha256 of (cache format version, sha256 of the source, target, options, NVRTC major.minor).

Entry file ``<dir>/<key[:2]>/<key>.hkc``::

    magic b"HUMMKRN\\0" | u32 format | u32 meta_len | u64 body_len | sha256(meta + body) | meta (JSON) | body
    body = cubin bytes + PTX bytes (lengths in meta)

Writes go to a temporary file in the destination directory, are fsync'ed and renamed over the final name
(``os.replace``), so readers never see a partial entry and any number of processes may write the same key
at once (the last rename wins; all are identical). A reader that finds a bad magic, a wrong length or a
checksum mismatch deletes the entry and reports a miss, so the caller rebuilds it; a bad entry is never used.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from humming import settings

log = logging.getLogger("humming.cache")

#: Bump when the entry layout or anything that feeds the key changes meaning.
CACHE_FORMAT_VERSION = 1

ENV_DIR = "HUMMING_CACHE_DIR"
ENV_ENABLE = "HUMMING_CACHE"
ENV_MEMORY = "HUMMING_CACHE_MEMORY"

_MAGIC = b"HUMMKRN\0"
_HEADER = struct.Struct("<8sIIQ32s")
_SUFFIX = ".hkc"


# --------------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """The disk cache directory (not created until something is written)."""
    return settings.cache_dir()


def cache_enabled() -> bool:
    """False when ``HUMMING_CACHE`` is 0/false/off/no."""
    return settings.flag(ENV_ENABLE)


def _memory_capacity() -> int:
    return max(0, settings.integer(ENV_MEMORY, 256))


def make_key(source: str, arch: str, options: Sequence[str], nvrtc_version: tuple[int, int]) -> str:
    """Content address of a compile: sha256 over everything that determines the CUBIN."""
    desc = {
        "format": CACHE_FORMAT_VERSION,
        "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "arch": arch,
        "options": list(options),
        "nvrtc": [int(nvrtc_version[0]), int(nvrtc_version[1])],
    }
    return hashlib.sha256(json.dumps(desc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# --------------------------------------------------------------------------------------------------------
# Entries
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheEntry:
    """One cached compile. ``meta`` holds at least arch, nvrtc_version, options, log, compile_seconds."""

    key: str
    cubin: bytes
    ptx: str | None
    meta: dict = field(default_factory=dict, compare=False)

    def encode(self) -> bytes:
        ptx = self.ptx.encode() if self.ptx is not None else b""
        meta = dict(self.meta, key=self.key, cubin_len=len(self.cubin), ptx_len=-1 if self.ptx is None else len(ptx))
        meta_bytes = json.dumps(meta, sort_keys=True).encode()
        body = self.cubin + ptx
        digest = hashlib.sha256(meta_bytes + body).digest()
        return _HEADER.pack(_MAGIC, CACHE_FORMAT_VERSION, len(meta_bytes), len(body), digest) + meta_bytes + body

    @classmethod
    def decode(cls, data: bytes, expected_key: str | None = None) -> CacheEntry:
        """Parse and verify an entry; raises ValueError saying what is wrong."""
        if len(data) < _HEADER.size:
            raise ValueError(f"truncated header ({len(data)} bytes)")
        magic, version, meta_len, body_len, digest = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise ValueError("bad magic")
        if version != CACHE_FORMAT_VERSION:
            raise ValueError(f"format {version}, expected {CACHE_FORMAT_VERSION}")
        if len(data) != _HEADER.size + meta_len + body_len:
            raise ValueError(f"size {len(data)} != {_HEADER.size + meta_len + body_len} announced by the header")
        payload = data[_HEADER.size:]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch")
        meta = json.loads(payload[:meta_len].decode())
        body = payload[meta_len:]
        cubin_len, ptx_len = int(meta["cubin_len"]), int(meta["ptx_len"])
        if cubin_len + max(ptx_len, 0) != len(body):
            raise ValueError("body lengths inconsistent")
        if expected_key is not None and meta.get("key") != expected_key:
            raise ValueError(f"entry holds key {meta.get('key')!r}")
        ptx = None if ptx_len < 0 else body[cubin_len:].decode()
        return cls(meta["key"], bytes(body[:cubin_len]), ptx, meta)


@dataclass
class CacheCounters:
    memory_hits: int = 0
    disk_hits: int = 0
    misses: int = 0
    writes: int = 0
    corrupt_removed: int = 0
    write_errors: int = 0


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file, no file, or all of ``data``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable; best effort (not every filesystem allows it)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


class KernelCache:
    """Memory LRU + disk cache rooted at one directory. Thread-safe; safe across processes."""

    def __init__(self, directory: Path | str, memory_capacity: int | None = None):
        self.directory = Path(directory)
        self.capacity = _memory_capacity() if memory_capacity is None else memory_capacity
        self._memory: OrderedDict[str, CacheEntry] = OrderedDict()
        self._lock = threading.Lock()
        self.counters = CacheCounters()

    def entry_path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}{_SUFFIX}"

    def source_path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.cu"

    def failed_dir(self) -> Path:
        return self.directory / "failed"

    # -- lookups ------------------------------------------------------------------------------------------

    def get(self, key: str) -> tuple[CacheEntry, str] | None:
        """``(entry, "memory" | "disk")`` or None on a miss (a corrupt disk entry is deleted first)."""
        with self._lock:
            entry = self._memory.get(key)
            if entry is not None:
                self._memory.move_to_end(key)
                self.counters.memory_hits += 1
                return entry, "memory"
        entry = self._read_disk(key)
        self._count("misses" if entry is None else "disk_hits")
        if entry is None:
            return None
        self._remember(entry)
        return entry, "disk"

    def _count(self, counter: str) -> None:
        with self._lock:  # threads compile in parallel (build, background precompile): no lost increments
            setattr(self.counters, counter, getattr(self.counters, counter) + 1)

    def _read_disk(self, key: str) -> CacheEntry | None:
        path = self.entry_path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
                ino = os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("humming cache: cannot read %s (%s); compiling instead", path, e)
            return None
        try:
            return CacheEntry.decode(data, expected_key=key)
        except (ValueError, KeyError, UnicodeDecodeError, json.JSONDecodeError) as e:
            log.warning("humming cache: corrupt entry %s (%s); deleting it and compiling again", path, e)
            self._count("corrupt_removed")
            try:  # delete only the file we read: another process may have just replaced it with a good one
                if os.stat(path).st_ino == ino:
                    os.unlink(path)
            except OSError:
                pass
            return None

    # -- stores -------------------------------------------------------------------------------------------

    def put(self, entry: CacheEntry, source: str | None = None) -> Path | None:
        """Store in memory and on disk; returns where the source was saved (None if not saved). Disk errors
        are logged, never raised: a cache must not break a compile."""
        self._remember(entry)
        saved = None
        try:
            if source is not None:
                src = self.source_path(entry.key)
                if not src.exists():
                    atomic_write(src, source.encode())
                saved = src
            meta = dict(entry.meta)
            meta.setdefault("created", time.time())
            atomic_write(self.entry_path(entry.key), CacheEntry(entry.key, entry.cubin, entry.ptx, meta).encode())
            self._count("writes")
        except OSError as e:
            self._count("write_errors")
            log.warning("humming cache: cannot write to %s (%s); continuing without the disk cache", self.directory, e)
        return saved

    def _remember(self, entry: CacheEntry) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._memory[entry.key] = entry
            self._memory.move_to_end(entry.key)
            while len(self._memory) > self.capacity:
                self._memory.popitem(last=False)

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()

    def entries(self) -> list[Path]:
        """Paths of all complete entry files on disk."""
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.glob(f"*/*{_SUFFIX}") if not p.name.startswith("."))


_caches: dict[str, KernelCache] = {}
_caches_lock = threading.Lock()


def get_cache(directory: Path | str | None = None) -> KernelCache:
    """The process-wide cache for ``directory`` (default: ``cache_dir()``), one LRU per directory."""
    d = Path(directory) if directory is not None else cache_dir()
    key = os.path.abspath(d)
    with _caches_lock:
        if key not in _caches:
            _caches[key] = KernelCache(d)
        return _caches[key]


def clear_memory_caches() -> None:
    """Drop every in-process LRU (the disk is untouched)."""
    with _caches_lock:
        for c in _caches.values():
            c.clear_memory()


__all__ = [
    "CACHE_FORMAT_VERSION",
    "CacheEntry",
    "CacheCounters",
    "KernelCache",
    "atomic_write",
    "cache_dir",
    "cache_enabled",
    "clear_memory_caches",
    "get_cache",
    "make_key",
]
