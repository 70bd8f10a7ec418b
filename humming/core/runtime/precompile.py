"""Cold start: the first launch of a prepared WnA16 weight compiles the kernel it needs in the calling thread, then
starts the other kernels of the layer's decode buckets (M <= 64; HUMMING_PRECOMPILE=all: every bucket, 0: none)
compiling on a background thread pool whose threads run at a lower CPU priority, so that the waiting call is not
slowed by them. A later call for one of those M finds its kernel compiled, or waits for the compile already running
(``compiled.compile_plan`` compiles each kernel once). ``wait_precompiled()`` waits for them all."""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as _wait_futures

from humming import settings
from humming.core.runtime.compiled import compile_plan, is_compiled
from humming.errors import HummingError

ENV_PRECOMPILE = "HUMMING_PRECOMPILE"
#: How much lower (nice) the background compile threads run than the caller (Linux; ignored elsewhere).
BACKGROUND_NICE = 10

log = logging.getLogger("humming.precompile")

_bg_lock = threading.Lock()
_bg_pool: ThreadPoolExecutor | None = None
_bg_futures: dict[tuple, Future] = {}  # (profile, kernel, run_arch) -> its background compile
_bg_layouts: set[tuple] = set()  # (profile, layout, act, run_arch, Ms) already scheduled
_exit_hook = False


def precompile_mode() -> str:
    """``HUMMING_PRECOMPILE``: "decode" (default: the buckets up to M = 64), "all" (every bucket) or "off"."""
    value = (settings.raw(ENV_PRECOMPILE) or "decode").lower()
    if value in ("0", "off", "false", "no", "none"):
        return "off"
    if value in ("all", "2"):
        return "all"
    return "decode"


def precompile_ms(mode: str | None = None) -> list[int]:
    """The M values whose kernels a first launch schedules: every M of the decode buckets, or of all buckets."""
    from humming.core.tuning import entries as tuning

    mode = precompile_mode() if mode is None else mode
    if mode == "off":
        return []
    chosen = [b for b in tuning.buckets() if mode == "all" or (b.hi is not None and b.hi <= tuning.DECODE_MAX_M)]
    return [m for b in chosen for m in b.ms()]


def _lower_priority() -> None:
    """Pool initializer: this worker thread yields the CPU to the caller's own compile (Linux niceness is per
    thread). Best effort: a platform without it keeps the normal priority."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + BACKGROUND_NICE))
    except (AttributeError, OSError):
        pass


def background_workers() -> int:
    return max(1, min(16, os.cpu_count() or 1))


def _pool() -> ThreadPoolExecutor:
    global _bg_pool, _exit_hook
    with _bg_lock:
        if _bg_pool is None:
            _bg_pool = ThreadPoolExecutor(max_workers=background_workers(), thread_name_prefix="humming-precompile",
                                          initializer=_lower_priority)
            if not _exit_hook:
                _exit_hook = True
                # at exit, drop the compiles not started yet (else the interpreter runs the whole queue before it
                # stops); registered after concurrent.futures' own hook, so it runs before that one joins the threads
                register = getattr(threading, "_register_atexit", None)
                if register is not None:
                    register(_drop_queued)
        return _bg_pool


def _drop_queued() -> None:
    with _bg_lock:
        pool = _bg_pool
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


def _compile_quietly(p, caps, run_arch):
    """One background compile. A failure is logged, not raised: the call that needs the kernel compiles it
    again in its own thread and raises the error there."""
    try:
        return compile_plan(p, caps, run_arch)[1]
    except Exception as exc:  # noqa: BLE001 - reported by the foreground compile of the same kernel
        log.info("humming: background compile of %s failed: %s", p.kernel_name, exc)
        return None


def compile_in_background(plans, caps, run_arch: str | None = None) -> list[Future]:
    """Start compiling each plan's kernel on the background pool (once per kernel: a kernel already compiled
    or scheduled is not scheduled again). Returns the futures (CompiledModule or None)."""
    out = []
    for p in plans:
        key = (caps.name, p.kernel_name, run_arch)
        with _bg_lock:
            fut = _bg_futures.get(key)
        if fut is None and not is_compiled(caps, p, run_arch):
            fut = _pool().submit(_compile_quietly, p, caps, run_arch)
            with _bg_lock:
                fut = _bg_futures.setdefault(key, fut)
        if fut is not None:
            out.append(fut)
    return out


def precompile(layer, ms: Iterable[int] | None = None, skip: Iterable[str] = ()) -> list[Future]:
    """Schedule the kernels of a prepared WnA16 layer for ``ms`` (default: ``precompile_ms()``) on the background
    pool, except the kernels named in ``skip`` (the caller compiles those itself). A layout is scheduled once per
    process (layers of one shape share their kernels). Returns the futures."""
    if layer.scheme.act:  # the quantized-activation families plan their own M range
        return []
    mode = precompile_mode()
    ms = precompile_ms(mode) if ms is None else [int(m) for m in ms]
    tag = (layer.caps.name, str(layer.scheme), layer.n, layer.k, layer.act, layer.run_arch, tuple(ms))
    with _bg_lock:
        if tag in _bg_layouts:
            return []
        _bg_layouts.add(tag)
    skip = set(skip)
    plans: dict = {}
    for m in ms:
        p = layer.plan_for(m)
        if p.kernel_name not in skip:
            plans.setdefault(p.kernel_name, p)
    return compile_in_background(plans.values(), layer.caps, layer.run_arch)


def precompile_on_first_launch(layer, plan) -> list[Future]:
    """Called by the runtime after it compiled the kernel of a WnA16 layer's first launch: schedule the rest of its
    bucket kernels (HUMMING_PRECOMPILE) in the background."""
    if precompile_mode() == "off":
        return []
    try:
        return precompile(layer, skip=(plan.kernel_name,))
    except HummingError as exc:  # a plan that fails here fails again, with its message, when its M is called
        log.info("humming: precompile of a %s layer skipped: %s", layer.scheme, exc)
        return []


def pending_precompiles() -> int:
    """How many background compiles are scheduled or running."""
    with _bg_lock:
        return sum(not f.done() for f in _bg_futures.values())


def wait_precompiled(timeout: float | None = None) -> bool:
    """Wait for every background compile scheduled so far; True when all finished."""
    with _bg_lock:
        futures = [f for f in _bg_futures.values() if not f.cancelled()]  # dropped at exit: never run
    done, not_done = _wait_futures(futures, timeout=timeout)
    return not not_done


def _forget_precompiles() -> None:
    """Tests: forget what was scheduled and drop the pool (running compiles finish on their own)."""
    global _bg_pool
    with _bg_lock:
        _bg_futures.clear()
        _bg_layouts.clear()
        pool, _bg_pool = _bg_pool, None
    if pool is not None:
        pool.shutdown(wait=False)


