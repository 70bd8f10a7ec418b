"""Timing candidate plans on the live GPU: the measuring half of `python -m humming tune` and bench/.

Method (the same as bench/bench_wna16.py): one CUDA graph replays the GEMM over several weight copies that
together exceed the L2 cache twice, so every call streams its weights from memory; the copies are cycled until the
graph holds at least ``graph_min_calls()`` GEMMs or lasts about ``graph_target_us()`` (each replay is timed on its own
from an idle GPU, and its launch costs ~12 us on the H200 that a graph of 2 GEMMs would add half of to each); the
median over replays, divided by the number of GEMMs in the graph, is one call's time.

    result = tune_layer("w4a16", 8192, 8192, [1, 16, 128])   # -> list[TuneResult], nothing recorded
"""
from __future__ import annotations

import math
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from humming.core import plan as planner

L2_BYTES = 60 * 2**20  # the H200's L2; a larger weight set is not cached between calls on current GPUs


def require_gpu(what: str = "tuning"):
    """torch with a visible CUDA GPU, else UnsupportedOnDevice saying what to do instead."""
    import torch

    from humming.errors import UnsupportedOnDevice

    if not torch.cuda.is_available():
        raise UnsupportedOnDevice(
            f"{what} times kernels on the live GPU, and torch sees no CUDA device here (torch "
            f"{torch.__version__}, CUDA {torch.version.cuda or 'not built in'}). Run it on the machine that will serve "
            f"the model; to only precompile kernels without a GPU use `python -m humming build --profile NAME`"
        )
    return torch


# GEMMs per timed graph at least: a replay timed from an idle GPU pays the graph's launch once (~12 us a replay on the
# H200); with the 2 weight copies of a large layer that is ~6 us added to each GEMM, with 16 calls under 1 us.
# 1: one pass over the copies.
GRAPH_MIN_CALLS = 16
# ... but no more passes over the copies than make the graph about this long: the launch is then ~1% of a replay, and a
# prefill GEMM's graph stays a burst of ~1-3 ms. Longer graphs run the GPU at its power limit for their whole length
# (on the H200: W4A16 M >= 1024 read 0.84-0.99x cuBLAS fp16 in 16-GEMM graphs of 12-48 ms, 0.94-0.99x in 1-3 ms ones).
# 0: no cap (a sustained run).
GRAPH_TARGET_US = 1000.0
_graph = {"min_calls": GRAPH_MIN_CALLS, "target_us": GRAPH_TARGET_US}


def set_graph_timing(min_calls: int | None = None, target_us: float | None = None) -> None:
    """How timed graphs are built from now on (the benchmarks' --graph-min-calls / --graph-target-us): at least
    ``min_calls`` GEMMs, no more passes than make ``target_us`` (0: no cap). None keeps a value."""
    if min_calls is not None:
        if isinstance(min_calls, bool) or not isinstance(min_calls, int) or min_calls < 1:
            raise ValueError(f"graph min_calls must be a positive integer, not {min_calls!r}")
        _graph["min_calls"] = min_calls
    if target_us is not None:
        if not isinstance(target_us, (int, float)) or target_us != target_us or target_us < 0:
            raise ValueError(f"graph target_us must be a number of microseconds >= 0, not {target_us!r}")
        _graph["target_us"] = float(target_us)


def graph_min_calls() -> int:
    """The fewest GEMMs a timed graph holds (GRAPH_MIN_CALLS unless set_graph_timing changed it)."""
    return _graph["min_calls"]


def graph_target_us() -> float:
    """The graph length (us) past which no more passes are added (GRAPH_TARGET_US unless set_graph_timing changed
    it; 0: none)."""
    return _graph["target_us"]


def passes_for(n_calls: int, pass_us: float | None, min_calls: int | None = None, target_us: float | None = None) -> int:
    """Passes over ``n_calls`` weight copies in a timed graph: enough for ``min_calls`` GEMMs (graph_min_calls()), but
    no more than make ``target_us`` (graph_target_us()) when one pass takes ``pass_us`` (None: not known, no cap)."""
    want = graph_min_calls() if min_calls is None else min_calls
    target = graph_target_us() if target_us is None else target_us
    passes = max(1, math.ceil(want / max(n_calls, 1)))
    if target and pass_us and pass_us > 0:
        passes = min(passes, max(1, math.ceil(target / pass_us)))
    return passes


def _cycled_graph(calls: list):
    """(graph, GEMMs in it) of ``calls`` cycled by passes_for, timing one pass first where more than one may do."""
    if not calls:
        raise ValueError("no calls to time")
    passes = passes_for(len(calls), None)
    if passes > 1 and graph_target_us():
        one = capture_graph(calls)
        passes = passes_for(len(calls), replay_time_us(one, 1, 3))
        del one
    calls = list(calls) * passes
    return capture_graph(calls), len(calls)


def cycled(calls: list, min_calls: int | None = None) -> list:
    """``calls`` repeated in order (whole passes) until there are at least ``min_calls`` (default graph_min_calls()):
    consecutive calls still use different weight copies, so each streams its weights from memory."""
    if not calls:
        raise ValueError("no calls to time")
    return list(calls) * passes_for(len(calls), None, min_calls)


def graph_time_us(calls, reps: int = 20) -> float:
    """Median time of one call, from CUDA-graph replays of ``calls`` cycled by passes_for."""
    graph, n = _cycled_graph(calls)
    return replay_time_us(graph, n, reps)


def capture_graph(calls):
    """A CUDA graph of the whole sequence of ``calls`` (run once eagerly on a side stream first, then captured and
    replayed once): what the kernels of the calls are is fixed at capture."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for f in calls:
            f()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for f in calls:
            f()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def replay_time_us(graph, calls: int, reps: int) -> float:
    """Median time of one of the graph's ``calls`` over ``reps`` timed replays (CUDA events)."""
    return statistics.median(replay_once_us(graph, calls) for _ in range(reps))


def replay_once_us(graph, calls: int) -> float:
    """One timed replay of the graph (CUDA events): us per one of its ``calls``."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of ``n`` timers, one per round, in which every timer takes every position equally often and follows
    every other timer equally often (a Williams design: n orders for even n, 2n for odd n). A plain rotation keeps
    the cyclic order, so with three or more timers each one always follows the same other one: on the H200
    a GEMM timed right after a low-power one (the mma.sync column) ran 12% faster at M=4096, and the rotation gave
    cuBLAS that place in 6 of 8 rounds, humming in 3."""
    if n <= 1:
        return [list(range(n))]
    first, low, high = [0], 1, n - 1  # 0, 1, n-1, 2, n-2, ...: consecutive differences all distinct mod n
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    orders = [[(v + shift) % n for v in first] for shift in range(n)]
    return orders + [order[::-1] for order in orders] if n % 2 else orders


def rotated_samples(timers: list, rounds: int) -> list[list[float]]:
    """One sample of every timer per round, the rounds in balanced_orders (``rounds`` rounded up to a whole number of
    its orders): the GPU's clock follows its recent load, so a fixed order favours one position (up to 8% at M >= 1024
    on the H200) and a fixed predecessor favours a timer too (balanced_orders)."""
    samples: list[list[float]] = [[] for _ in timers]
    if not timers:
        return samples
    orders = balanced_orders(len(timers))
    for r in range(-(-rounds // len(orders)) * len(orders)):
        for i in orders[r % len(orders)]:
            samples[i].append(timers[i]())
    return samples


def graph_timer(calls: list, reps: int = 5):
    """A timer (no arguments -> us) of one call's time over ``reps`` replays of a CUDA graph of ``calls`` (cycled by
    passes_for) captured now (the plans set now are the ones it runs)."""
    graph, n = _cycled_graph(calls)
    return lambda: replay_time_us(graph, n, reps)


def copies_for(nbytes: int) -> int:
    """How many copies of ``nbytes`` of weights together exceed twice the L2 (at least 2)."""
    return max(2, math.ceil(2 * L2_BYTES / max(nbytes, 1)))


@dataclass
class Timing:
    plan: object  # Plan
    us: float | None  # None: the device rejected it
    error: str = ""


@dataclass
class TuneResult:
    scheme: str
    n: int
    k: int
    m: int
    default: Timing
    timings: list[Timing] = field(default_factory=list)  # measured ones, fastest first (default included; re-timed first)
    failed: list[Timing] = field(default_factory=list)
    device: str = ""  # torch's name of the GPU that ran it
    emulated: bool = False  # the profile's kernels ran compiled for another target (HUMMING_DEVICE_PROFILE)

    @property
    def best(self) -> Timing:
        return self.timings[0]

    def winner(self, min_gain: float = 0.0) -> Timing:
        """The fastest plan, unless it beats the planner's default by less than ``min_gain`` (a fraction):
        then the default, so that noise does not replace a rule with an equal config."""
        if self.default.us is not None and self.best.us > self.default.us * (1.0 - min_gain):
            return self.default
        return self.best


def time_candidate(plan, time_it, wrong, error: str = "") -> Timing:
    """One candidate's Timing: ``time_it()`` -> us, then ``wrong()`` -> why its result is wrong ("" when right; a
    candidate only counts if it is right); an exception (a configuration the device rejects) or a given ``error``
    (e.g. it did not compile) is a failed result, not a crash."""
    import torch

    timing = Timing(plan, None, error)
    if error:
        return timing
    try:
        timing.us = time_it()
        why = wrong()
        if why:
            timing.us, timing.error = None, why
    except Exception as exc:  # noqa: BLE001 - a config the device rejects is a result, not a crash
        timing.us, timing.error = None, f"{type(exc).__name__}: {exc}"
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    return timing


def add_timing(result: TuneResult, timing: Timing, default) -> None:
    """File a timing under the result's timings or failures; the default plan's is the result's default."""
    (result.failed if timing.us is None else result.timings).append(timing)
    if timing.plan is default:
        result.default = timing


def _set_plan(api, handles, m: int, plan) -> None:
    for h in handles:
        api._registry[h].plans[m] = plan
        api._registry[h].launches.pop(m, None)


def _clear_plan(api, handles, m: int) -> None:
    for h in handles:
        api._registry[h].plans.pop(m, None)
        api._registry[h].launches.pop(m, None)


def tunable_shape(n: int, k: int) -> None:
    """ShapeError unless N and K are multiples of 64: other shapes are padded when prepared and run the tile kernel
    by its rules (humming.core.quant.padding), with nothing stored to choose between."""
    if n % 64 or k % 64:
        from humming.errors import ShapeError

        raise ShapeError(f"humming tune times weights of whole 64 x 64 atoms; {n}x{k} is padded when prepared and "
                         f"runs the tile kernel by its rules (python -m humming plan shows its plan)")


def tune_layer(scheme, n: int, k: int, ms, *, dtype: str = "f16", reps: int = 10, jobs: int | None = None,
               include_tile_for_stream: bool = True, progress=None, seed: int = 0,
               only: str | None = None, retime_top: int = 4) -> list[TuneResult]:
    """Time the planner's default and every candidate plan for each M on the live GPU (random weights), and
    check each one's result against ``reference_gemm`` (a wrong candidate is reported as failed, never timed
    as a winner). ``progress(text)`` is called with one line per step. Nothing is recorded here.

    ``only``: an option of the tiles (e.g. "x_smem"): time only the candidates that set it, next to the planner's
    default and the plan the runtime chooses now (a tuned entry, if any), so a winner beats both.

    ``retime_top``: the fastest this many and the default are timed again in rotated rounds (_retime) before the
    ranking is final; 0 keeps the first pass's times. N and K must be multiples of 64: other shapes run padded on the
    tile kernel by its rules (humming.core.quant.padding), with nothing stored to choose between."""
    tunable_shape(n, k)
    torch = require_gpu()
    import humming
    from humming import api
    from humming.core.families.mma_wna16.candidates import candidates
    from humming.core.families.mma_wna16.layout import layout_for
    from humming.core.families.mma_wna16.tuned import choose_plan, runtime_plan
    from humming.core.problem import scheme_of

    say = progress or (lambda text: None)
    torch.manual_seed(seed)
    sch = scheme_of(scheme)
    scheme_str = str(sch)
    if getattr(sch, "act", None):
        from humming.errors import UnsupportedOnDevice

        raise UnsupportedOnDevice(f"{scheme_str} quantizes activations; tuning covers the WnA16 kernels for now")
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    device = torch.device("cuda", torch.cuda.current_device())
    first = humming.quantize(torch.randn(n, k, device=device) * 0.05, sch)
    h0 = api.prepared(first, torch_dtype, device)
    prep = api._registry[h0]
    layout = layout_for(sch, n, k, dtype, caps=prep.caps)
    packed = prep.packed_for(choose_plan(prep.caps, layout, 1, dtype, scheme_str), "x")  # the WnA16 weights
    nbytes = sum(t.numel() * t.element_size() for t in packed.tensors() if t is not None)
    qws = [first] + [humming.quantize(torch.randn(n, k, device=device) * 0.05, sch) for _ in range(copies_for(nbytes) - 1)]
    handles = [api.prepared(qw, torch_dtype, device) for qw in qws]
    caps = prep.caps
    say(f"{n}x{k} {scheme_str} {dtype}: {len(qws)} weight copies of {nbytes / 2**20:.1f} MiB on "
        f"{torch.cuda.get_device_name()} (profile {caps.name})")
    results = []
    workers = jobs or min(16, os.cpu_count() or 1)
    try:
        for m in ms:
            m = int(m)
            plans = candidates(caps, layout, m, dtype, scheme_str, include_tile_for_stream=include_tile_for_stream)
            if only:
                now = runtime_plan(caps, layout, m, dtype, scheme_str)
                plans = [plans[0], now] + [p for p in plans[1:] if getattr(p.tiles, only, 0)]
            plans = [planner.launch_options(caps, p) for p in plans]  # timed as the runtime launches them (PDL, split clusters)
            default = plans[0]  # the planner's rules (what gemm runs without a tuned entry), never a tuned entry
            t0 = time.perf_counter()
            unique = {p.kernel_name: p for p in plans}
            with ThreadPoolExecutor(workers) as pool:
                compiled = list(pool.map(lambda p: _try_compile(api, p, prep), unique.values()))
            bad = {name: err for name, err in zip(unique, compiled) if err}
            say(f"  M={m}: {len(plans)} candidates, {len(unique)} kernels compiled in {time.perf_counter() - t0:.1f} s"
                + (f" ({len(bad)} rejected)" if bad else ""))
            x = torch.randn(m, k, device=device, dtype=torch_dtype)
            ref = humming.reference_gemm(x, first, out_dtype=torch.float32).double()
            tol = 2e-3 if torch_dtype == torch.float16 else 1e-2
            result = TuneResult(scheme_str, n, k, m, Timing(default, None), device=torch.cuda.get_device_name(),
                                emulated=prep.run_arch is not None)
            for p in plans:
                def time_it(p=p, x=x, m=m):
                    _set_plan(api, handles, m, p)
                    return graph_time_us([lambda h=h: api.gemm_prepared(x, h) for h in handles], reps=reps)

                def wrong(x=x, ref=ref, tol=tol):  # one more call, checked against the reference
                    err = float((api.gemm_prepared(x, h0).double() - ref).norm() / ref.norm().clamp_min(1e-30))
                    return "" if err <= tol else f"wrong result: relative error {err:.2e} > {tol:.0e}"
                add_timing(result, time_candidate(p, time_it, wrong, bad.get(p.kernel_name, "")), default)
            _clear_plan(api, handles, m)
            if not result.timings:
                raise RuntimeError(f"{n}x{k} M={m}: every candidate failed; first error: {result.failed[0].error}")
            result.timings.sort(key=lambda t: t.us)
            if retime_top and len(result.timings) > 1:
                _retime(api, handles, m, x, result, retime_top, say)
            results.append(result)
    finally:
        for m in ms:
            _clear_plan(api, handles, int(m))
        del qws
        torch.cuda.empty_cache()
    return results


RETIME_ROUNDS = 6


def _retime(api, handles, m: int, x, result: TuneResult, top: int, say) -> None:
    """Time the ``top`` fastest candidates and the default again in RETIME_ROUNDS rotated rounds (each one's graph
    captured with its plan set) and rank them by those medians ahead of the rest: the first pass timed them minutes
    apart. (TuneResult.timings is then no longer sorted by ``us`` past the re-timed ones.)"""
    def timer(t: Timing):
        _set_plan(api, handles, m, t.plan)  # (the graph captured next runs this plan)
        return graph_timer([lambda h=h: api.gemm_prepared(x, h) for h in handles])
    chosen = rerank(result, top, timer)
    _clear_plan(api, handles, m)
    say(f"  M={m}: the {len(chosen)} fastest (and the default) re-timed in {RETIME_ROUNDS} rotated rounds")


def rerank(result: TuneResult, top: int, timer) -> list[Timing]:
    """The ``top`` fastest of ``result`` and its default timed again, ``timer(timing)`` -> a timer of its plan, in
    RETIME_ROUNDS rounds of balanced orders; they go first in ``result.timings``, by their new medians, and are
    returned."""
    chosen = result.timings[:top]
    if result.default.us is not None and not any(result.default is c for c in chosen):
        chosen.append(result.default)
    medians = [statistics.median(s) for s in rotated_samples([timer(t) for t in chosen], RETIME_ROUNDS)]
    for t, us in zip(chosen, medians):
        t.us = us
    # the re-timed ones first, by their new times (the rest were slower in the first pass, in which they stay)
    rest = [t for t in result.timings if not any(t is c for c in chosen)]
    result.timings[:] = sorted(chosen, key=lambda t: t.us) + rest
    return chosen


def _try_compile(api, plan, prep) -> str:
    from humming.errors import HummingError

    try:
        api.compile_plan(plan, prep.caps, prep.run_arch)
    except HummingError as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return ""


__all__ = ["GRAPH_MIN_CALLS", "L2_BYTES", "Timing", "TuneResult", "capture_graph", "copies_for", "cycled", "passes_for", "graph_time_us", "graph_timer", "require_gpu", "rerank", "time_candidate", "add_timing",
           "rotated_samples", "tune_layer"]
