"""Ahead-of-time builds: compile the kernels a model's layers will need before the first request arrives.

    shapes = model_shapes(json.load(open("config.json")))          # [(name, N, K), ...] of a Llama-like decoder
    report = build_kernels([(n, k) for _, n, k in shapes], "w4a16", profile="nvidia-h200")

Which kernels: for every layer shape and every M of the chosen M buckets (``humming.core.tuning.entries.buckets()``;
the open bucket above 1024 is sampled), the plan the runtime will make (a tuned entry, else the planner's
rules: ``tuning.choose_plan``); distinct kernels are compiled once, in parallel threads (NVRTC releases the
GIL), through the disk cache, so the runtime and a second build find them all there.
Works without a GPU: kernels are compiled for the profile's target.

Cold start (``precompile``): the first launch of a prepared WnA16 weight compiles the kernel it needs in the
calling thread, then starts the other kernels of the layer's decode buckets (M <= 64; ``HUMMING_PRECOMPILE=all``:
every bucket, ``0``: none) compiling on a background thread pool whose threads run at a lower CPU priority, so
that the waiting call is not slowed by them. A later call for one of those M finds its kernel compiled, or waits
for the compile already running (``api.compile_plan`` compiles each kernel once). ``wait_precompiled()`` waits
for them all.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from concurrent.futures import wait as _wait_futures
from dataclasses import dataclass, field

from humming import settings
from humming.errors import HummingError, ShapeError, UnsupportedOnDevice


# ------------------------------------------------------------------------------------------------ model shapes
def _text_config(config: dict) -> dict:
    for key in ("text_config", "llm_config", "language_config"):
        if "hidden_size" not in config and isinstance(config.get(key), dict):
            return config[key]
    return config


def model_shapes(config: dict, fused: bool = False) -> list[tuple[str, int, int]]:
    """(name, N, K) of the linear layers of a Llama-like decoder layer from a HuggingFace config.json dict:
    q/k/v/o projections from hidden_size, num_attention_heads, num_key_value_heads, head_dim and gate/up/down
    from intermediate_size. ``fused``: qkv and gate_up as one GEMM each (how vLLM runs them)."""
    cfg = _text_config(config)
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
    except (KeyError, TypeError, ValueError):
        raise ShapeError("the model config needs integer hidden_size and num_attention_heads "
                         "(a Llama-like HuggingFace config.json)") from None
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    inter = cfg.get("intermediate_size")
    q, kv = heads * head_dim, kv_heads * head_dim
    shapes: list[tuple[str, int, int]]
    if fused:
        shapes = [("qkv_proj", q + 2 * kv, hidden), ("o_proj", hidden, q)]
    else:
        shapes = [("q_proj", q, hidden), ("k_proj", kv, hidden), ("v_proj", kv, hidden), ("o_proj", hidden, q)]
    if inter:
        inter = int(inter)
        if fused:
            shapes += [("gate_up_proj", 2 * inter, hidden), ("down_proj", hidden, inter)]
        else:
            shapes += [("gate_proj", inter, hidden), ("up_proj", inter, hidden), ("down_proj", hidden, inter)]
    return shapes


def unique_shapes(named: Iterable[tuple[str, int, int]]) -> list[tuple[tuple[int, int], list[str]]]:
    """((N, K), [layer names]) in first-seen order."""
    out: dict[tuple[int, int], list[str]] = {}
    for name, n, k in named:
        out.setdefault((n, k), []).append(name)
    return list(out.items())


# ------------------------------------------------------------------------------------------------ plans
def ms_for(ms: Iterable[int] | None = None, exact: bool = False) -> list[int]:
    """The M values to plan: every M of the buckets holding ``ms`` (all buckets when None), or ``ms`` as given."""
    from humming.core.tuning import entries as tuning

    if exact and ms is not None:
        return sorted(set(int(m) for m in ms))
    chosen = tuning.buckets() if ms is None else sorted({tuning.bucket_of(int(m)) for m in ms}, key=lambda b: b.lo)
    return [m for b in chosen for m in b.ms()]


def kernel_plans(caps, shapes: Iterable[tuple[int, int]], scheme, ms: Iterable[int], act: str = "f16") -> dict:
    """{kernel name: a plan that uses it} over every shape and M: what the runtime would compile (humming.plan's
    choice, i.e. the register-A prefill form from its threshold and the other wgmma handles, where the live GPU runs
    the profile's wgmma; else the mma.sync handle's tuning.choose_plan). Raises ShapeError for a shape the scheme's
    layout rejects."""
    from humming import api
    from humming.core.common.layout import layout_for
    from humming.core.tuning import entries as tuning

    plans: dict = {}
    ms = list(ms)
    name = getattr(scheme, "name", None) or str(scheme)
    wgmma_here = api._wgmma_runs_here(caps)
    for n, k in shapes:
        layout = layout_for(scheme, n, k, act, caps=caps)
        for m in ms:
            if wgmma_here:
                p = api.plan(scheme, m, n, k, profile=caps, act=act)
            else:
                p = tuning.choose_plan(caps, layout, m, act, scheme=name)
            plans.setdefault(p.kernel_name, p)
    return plans


# ------------------------------------------------------------------------------------------------ build
@dataclass
class BuildReport:
    profile: str
    arch: str
    shapes: list[tuple[int, int]]
    kernels: int = 0
    compiled: int = 0
    cache_hits: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (kernel or shape, why)
    skipped_shapes: list[tuple[tuple[int, int], str]] = field(default_factory=list)
    seconds: float = 0.0
    compile_seconds: float = 0.0  # NVRTC time summed over the kernels compiled now
    names: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped_shapes


def build_kernels(shapes: Iterable[tuple[int, int]], scheme="w4a16", profile=None, ms: Iterable[int] | None = None,
                  *, act: str = "f16", exact: bool = False, jobs: int | None = None,
                  progress: Callable[[int, int, str, bool], None] | None = None) -> BuildReport:
    """Compile every distinct kernel of ``shapes`` x M buckets for a profile (default: this device's) through
    the kernel cache. ``progress(done, total, kernel_name, cache_hit)`` is called after each kernel."""
    from humming import api
    from humming.core.compile.nvrtc import select_toolchain
    from humming.devices import get_backend

    t_start = time.perf_counter()
    explicit = profile is not None
    try:
        caps = api.resolve_profile(profile)
    except UnsupportedOnDevice as exc:
        raise UnsupportedOnDevice(f"{exc}; or name the target with --profile NAME") from None
    sch = api._scheme(scheme)
    if getattr(sch, "act", None):
        raise UnsupportedOnDevice(f"{sch.name} quantizes activations; only WnA16 kernels can be built ahead of time yet")
    live = None if explicit else api.live_arch()
    run_arch = live if live and live != caps.target.arch else None  # what api.prepared does for a forced profile
    route = get_backend(caps).compile_route(caps)
    arch = run_arch or route.arch
    if route.compiler == "nvrtc" or run_arch:
        select_toolchain(arch, None if run_arch else route.min_nvrtc)  # fail early, naming what to install
    shapes = list(dict.fromkeys((int(n), int(k)) for n, k in shapes))
    report = BuildReport(caps.name, arch, shapes)
    m_values = ms_for(ms, exact)
    plans: dict = {}
    for n, k in shapes:
        try:
            found = kernel_plans(caps, [(n, k)], sch, m_values, act)
        except ShapeError as exc:
            report.skipped_shapes.append(((n, k), str(exc)))
            continue
        for name, p in found.items():
            plans.setdefault(name, p)
    report.kernels = len(plans)
    report.names = sorted(plans)

    def one(p):
        key = (caps.name, p.kernel_name, run_arch)
        if key in api._compiled:  # compiled earlier in this process
            return p, True, 0.0
        _, module = api.compile_plan(p, caps, run_arch)
        if module is None:  # vendor compiler route: no NVRTC module to ask
            return p, False, 0.0
        return p, module.cache_hit, module.compile_seconds

    done = 0
    with ThreadPoolExecutor(max_workers=max(1, jobs or min(16, os.cpu_count() or 1))) as pool:
        futures = {pool.submit(one, p): p for p in plans.values()}
        for fut in as_completed(futures):
            done += 1
            name, hit = futures[fut].kernel_name, False
            try:
                _, hit, seconds = fut.result()
            except HummingError as exc:
                report.failed.append((name, f"{type(exc).__name__}: {exc}"))
            else:
                report.cache_hits += int(hit)
                report.compiled += int(not hit)
                report.compile_seconds += seconds
            if progress is not None:
                progress(done, len(futures), name, hit)
    report.seconds = time.perf_counter() - t_start
    return report


# ------------------------------------------------------------------------------------------------ cold start
ENV_PRECOMPILE = "HUMMING_PRECOMPILE"
#: How much lower (nice) the background compile threads run than the caller (Linux; ignored elsewhere).
BACKGROUND_NICE = 10

log = logging.getLogger("humming.aot")

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
    from humming import api

    try:
        return api.compile_plan(p, caps, run_arch)[1]
    except Exception as exc:  # noqa: BLE001 - reported by the foreground compile of the same kernel
        log.info("humming: background compile of %s failed: %s", p.kernel_name, exc)
        return None


def compile_in_background(plans, caps, run_arch: str | None = None) -> list[Future]:
    """Start compiling each plan's kernel on the background pool (once per kernel: a kernel already compiled
    or scheduled is not scheduled again). Returns the futures (CompiledModule or None)."""
    from humming import api

    out = []
    for p in plans:
        key = (caps.name, p.kernel_name, run_arch)
        with _bg_lock:
            fut = _bg_futures.get(key)
        if fut is None and key not in api._compiled:
            fut = _pool().submit(_compile_quietly, p, caps, run_arch)
            with _bg_lock:
                fut = _bg_futures.setdefault(key, fut)
        if fut is not None:
            out.append(fut)
    return out


def precompile(handle: int, ms: Iterable[int] | None = None, skip: Iterable[str] = ()) -> list[Future]:
    """Schedule the kernels of a prepared WnA16 weight for ``ms`` (default: ``precompile_ms()``) on the
    background pool, except the kernels named in ``skip`` (the caller compiles those itself). A layout is
    scheduled once per process (layers of one shape share their kernels). Returns the futures."""
    from humming import api

    prep = api._registry[handle]
    if prep.plan_fn is not None:  # the kernels of other families plan their own M range
        return []
    mode = precompile_mode()
    ms = precompile_ms(mode) if ms is None else [int(m) for m in ms]
    layout = prep.packed.layout
    tag = (prep.caps.name, layout, layout.decode.act, prep.run_arch, tuple(ms))
    with _bg_lock:
        if tag in _bg_layouts:
            return []
        _bg_layouts.add(tag)
    skip = set(skip)
    plans: dict = {}
    for m in ms:
        p = launched_plan(handle, m)
        if p.kernel_name not in skip:
            plans.setdefault(p.kernel_name, p)
    return compile_in_background(plans.values(), prep.caps, prep.run_arch)


def launched_plan(handle: int, m: int):
    """The plan humming.gemm launches for M on the weight of this (mma.sync / stream) WnA16 handle: from the register-A
    prefill form's threshold that form's handle's plan (tuning.register_a_prefill_plan) where it runs this layout
    here, else the handle's own."""
    from humming import api
    from humming.core.tuning import entries as tuning

    prep = api._registry[handle]
    layout = prep.packed.layout
    if prep.run_arch is None and tuning.runs_register_a_prefill(prep.caps, layout, m):
        try:
            return tuning.register_a_prefill_plan(prep.caps, layout, m, layout.decode.act, prep.scheme)
        except HummingError:  # (e.g. no wgmma form of this activation type): the handle's own plan
            pass
    return api.plan_for(handle, m)


def precompile_on_first_launch(handle: int, m: int, plan) -> list[Future]:
    """Called by the runtime after it compiled the kernel of a launch: on the first launch of a WnA16 weight,
    schedule the rest of its bucket kernels (``HUMMING_PRECOMPILE``) in the background."""
    from humming import api

    prep = api._registry[handle]
    if prep.plan_fn is not None or prep.launches or precompile_mode() == "off":
        return []
    try:
        return precompile(handle, skip=(plan.kernel_name,))
    except HummingError as exc:  # a plan that fails here fails again, with its message, when its M is called
        log.info("humming: precompile of handle %d skipped: %s", handle, exc)
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


__all__ = ["BuildReport", "build_kernels", "compile_in_background", "kernel_plans", "model_shapes", "ms_for",
           "pending_precompiles", "precompile", "precompile_mode", "precompile_ms", "unique_shapes", "wait_precompiled"]
