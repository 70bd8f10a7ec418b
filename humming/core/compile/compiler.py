"""Compile self-contained CUDA C++ to CUBIN (and PTX) with NVRTC, through the kernel cache.

    mod = compile_cuda(source, ["humming_gemm_w4a16"], "sm_90a")
    mod.cubin, mod.ptx, mod.log, mod.cache_hit, mod.compile_seconds

Kernels are ``extern "C" __global__`` so their names are not mangled; ``kernel_names`` is checked against the
source. Default options: ``--gpu-architecture=<arch> -std=c++17 -default-device`` (plus ``-lineinfo`` when
``HUMMING_LINEINFO=1``); ``options`` are appended (an ``-std=`` or ``--gpu-architecture`` there replaces the
default). On a rejected source the source and log are saved under ``<cache dir>/failed/`` and
``CompileError`` is raised with both. Every call is recorded in ``compile_stats()``.
"""
from __future__ import annotations

import re
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from humming import settings
from humming.core.compile import cache as _cache
from humming.core.compile.nvrtc import NvrtcToolchain, parse_arch, select_toolchain
from humming.errors import CompileError, UnsupportedOnDevice

ENV_LINEINFO = "HUMMING_LINEINFO"

DEFAULT_STD = "-std=c++17"
DEFAULT_OPTIONS: tuple[str, ...] = ("-default-device",)


@dataclass(frozen=True)
class CompiledModule:
    """The result of ``compile_cuda``. ``compile_seconds`` is 0 for a cache hit; ``original_compile_seconds``
    is how long the compile that produced this binary took. ``cache_level`` is "memory", "disk" or None."""

    cubin: bytes = field(repr=False)
    ptx: str | None = field(repr=False)
    log: str
    arch: str
    nvrtc_version: tuple[int, int]
    compile_seconds: float
    original_compile_seconds: float
    cache_hit: bool
    cache_level: str | None
    key: str
    source_path: str | None
    kernel_names: tuple[str, ...]
    options: tuple[str, ...]
    nvrtc_path: str

    @property
    def cubin_size(self) -> int:
        return len(self.cubin)


@dataclass(frozen=True)
class CompileStat:
    """One ``compile_cuda`` call, for benchmarks and diagnostics."""

    kernel_names: tuple[str, ...]
    arch: str
    nvrtc_version: tuple[int, int]
    seconds: float  # wall time spent in NVRTC by this call (0 for a hit)
    original_seconds: float  # compile time recorded with the binary
    cache_level: str | None
    key: str
    cubin_bytes: int
    ok: bool
    timestamp: float


_stats: list[CompileStat] = []
_stats_lock = threading.Lock()
_key_locks: dict[str, threading.Lock] = {}
_key_locks_lock = threading.Lock()


def compile_stats() -> list[CompileStat]:
    """Every compile_cuda call of this process so far (hits included), oldest first."""
    with _stats_lock:
        return list(_stats)


def reset_compile_stats() -> None:
    with _stats_lock:
        _stats.clear()


def _record(stat: CompileStat) -> None:
    with _stats_lock:
        _stats.append(stat)


def _key_lock(key: str) -> threading.Lock:
    with _key_locks_lock:
        return _key_locks.setdefault(key, threading.Lock())


def build_options(arch: str, options: Sequence[str] = (), include_dirs: Sequence[str] = ()) -> tuple[str, ...]:
    """The full NVRTC option list for ``arch``: defaults, ``-lineinfo`` if asked, include dirs, then ``options``."""
    user = tuple(options)
    out: list[str] = []
    if not any(o.startswith(("--gpu-architecture", "-arch")) for o in user):
        out.append(f"--gpu-architecture={arch}")
    if not any(o.startswith(("-std=", "--std=")) for o in user):
        out.append(DEFAULT_STD)
    out += [o for o in DEFAULT_OPTIONS if o not in user]
    if settings.flag(ENV_LINEINFO) and "-lineinfo" not in user:
        out.append("-lineinfo")
    out += [f"--include-path={d}" for d in include_dirs]
    out += list(user)
    return tuple(out)


def _missing_kernels(source: str, kernel_names: Sequence[str]) -> list[str]:
    missing = []
    for name in kernel_names:
        if not re.search(r"__global__[^;{}]*?\b" + re.escape(name) + r"\s*\(", source):
            missing.append(name)
    return missing


def _save_failed(source: str, log: str, key: str) -> str:
    """Save a rejected source (and its log) for inspection; returns the source path."""
    for directory in (_cache.cache_dir() / "failed", Path(tempfile.gettempdir()) / "humming-failed"):
        try:
            src = directory / f"{key}.cu"
            _cache.atomic_write(src, source.encode())
            _cache.atomic_write(directory / f"{key}.log", log.encode())
            return str(src)
        except OSError:
            continue
    return ""


def compile_cuda(
    source: str,
    kernel_names: Sequence[str],
    arch: str,
    *,
    options: Sequence[str] = (),
    include_dirs: Sequence[str] = (),
    min_nvrtc: tuple[int, int] | None = None,
    want_ptx: bool = True,
    cache: bool | None = None,
    toolchain: NvrtcToolchain | None = None,
) -> CompiledModule:
    """Compile ``source`` for ``arch`` (``"sm_75"``, ``"sm_90a"``, ``"sm_100f"``...) and return the CUBIN.

    ``cache``: None follows ``HUMMING_CACHE`` (on by default); True/False force it. ``toolchain``: a specific
    ``NvrtcToolchain`` (else ``select_toolchain(arch, min_nvrtc)``). Raises ``UnsupportedOnDevice`` when no
    installed NVRTC accepts ``arch`` and ``CompileError`` (with the log and the saved source) when NVRTC
    rejects the source."""
    parse_arch(arch)
    names = (kernel_names,) if isinstance(kernel_names, str) else tuple(kernel_names)
    if toolchain is None:
        toolchain = select_toolchain(arch, min_nvrtc)
    else:
        if min_nvrtc is not None and toolchain.version < tuple(min_nvrtc):
            raise UnsupportedOnDevice(
                f"{toolchain.describe()} is older than the required NVRTC {min_nvrtc[0]}.{min_nvrtc[1]}; "
                f"pip install -U '{toolchain.pip_package}>={min_nvrtc[0]}.{min_nvrtc[1]}'"
            )
        if not toolchain.supports(arch):
            raise UnsupportedOnDevice(
                f"{toolchain.describe()} cannot compile for {arch}; it accepts {', '.join(toolchain.targets())}"
            )
    opts = build_options(arch, options, include_dirs)
    key = _cache.make_key(source, arch, opts, toolchain.version)

    missing = _missing_kernels(source, names)
    if missing:
        path = _save_failed(source, "", key)
        _record(CompileStat(names, arch, toolchain.version, 0.0, 0.0, None, key, 0, False, time.time()))
        raise CompileError(
            f"kernel(s) {', '.join(missing)} not defined as __global__ in the generated source "
            f"(expected extern \"C\" __global__ ... {missing[0]}(...))",
            source_path=path or None,
        )

    use_cache = _cache.cache_enabled() if cache is None else bool(cache)
    kc = _cache.get_cache() if use_cache else None

    with _key_lock(key):  # one compile per key at a time in this process; other processes race harmlessly
        if kc is not None:
            hit = kc.get(key)
            if hit is not None and (hit[0].ptx is not None or not want_ptx):
                entry, level = hit
                src_path = kc.source_path(key)
                original = float(entry.meta.get("compile_seconds", 0.0))
                _record(CompileStat(names, arch, toolchain.version, 0.0, original, level, key, len(entry.cubin),
                                    True, time.time()))
                return CompiledModule(
                    cubin=entry.cubin,
                    ptx=entry.ptx if want_ptx else None,
                    log=str(entry.meta.get("log", "")),
                    arch=arch,
                    nvrtc_version=toolchain.version,
                    compile_seconds=0.0,
                    original_compile_seconds=original,
                    cache_hit=True,
                    cache_level=level,
                    key=key,
                    source_path=str(src_path) if src_path.exists() else None,
                    kernel_names=names,
                    options=opts,
                    nvrtc_path=toolchain.path,
                )

        program_name = f"{names[0] if names else 'humming'}.cu"
        t0 = time.perf_counter()
        out = toolchain.compile(source, program_name, opts, want_ptx=want_ptx)
        seconds = time.perf_counter() - t0

        if not out.ok:
            path = _save_failed(source, out.log, key)
            _record(CompileStat(names, arch, toolchain.version, seconds, seconds, None, key, 0, False, time.time()))
            raise CompileError(
                f"NVRTC {toolchain.version[0]}.{toolchain.version[1]} rejected the source of "
                f"{', '.join(names) or 'a kernel'} for {arch} ({out.result_name})",
                log=out.log,
                source_path=path or None,
            )

        assert out.cubin is not None
        src_path = None
        if kc is not None:
            meta = {
                "arch": arch,
                "nvrtc_version": list(toolchain.version),
                "options": list(opts),
                "kernel_names": list(names),
                "log": out.log,
                "compile_seconds": seconds,
            }
            saved = kc.put(_cache.CacheEntry(key, out.cubin, out.ptx, meta), source)
            src_path = str(saved) if saved is not None else None
        _record(CompileStat(names, arch, toolchain.version, seconds, seconds, None, key, len(out.cubin), True,
                            time.time()))
        return CompiledModule(
            cubin=out.cubin,
            ptx=out.ptx,
            log=out.log,
            arch=arch,
            nvrtc_version=toolchain.version,
            compile_seconds=seconds,
            original_compile_seconds=seconds,
            cache_hit=False,
            cache_level=None,
            key=key,
            source_path=src_path,
            kernel_names=names,
            options=opts,
            nvrtc_path=toolchain.path,
        )


def compile_for_profile(source: str, kernel_names: Sequence[str], backend, caps, run_arch: str | None = None
                        ) -> tuple[bytes, CompiledModule | None]:
    """(CUBIN, the NVRTC module or None) of ``source`` on the compile route ``backend`` gives profile ``caps``: the
    vendor compiler the profile names, or NVRTC for its target. ``run_arch`` compiles for another target instead (a
    profile emulated on the live GPU) with NVRTC and no options or version pin of the profile's route."""
    route = backend.compile_route(caps)
    if route.compiler == "vendor_nvcc" and not run_arch:
        return backend.compile_source(source, caps, route), None
    if route.compiler != "nvrtc" and not run_arch:
        raise UnsupportedOnDevice(f"{caps.name}: compile route {route.compiler} has no runner here ({route.reason})")
    module = compile_cuda(source, list(kernel_names), run_arch or route.arch,
                          options=route.options if route.compiler == "nvrtc" else (),
                          min_nvrtc=None if run_arch else route.min_nvrtc)
    return module.cubin, module


__all__ = ["CompiledModule", "CompileStat", "build_options", "compile_cuda", "compile_for_profile", "compile_stats",
           "reset_compile_stats"]
