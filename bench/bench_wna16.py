"""W4A16 benchmark against cuBLAS fp16 on three layer shapes of a Llama-3-70B-like decoder (8192x8192, 28672x8192,
4096x14336; N x K) at M 1 to 4096.

Method: CUDA-graph replay of a sequence of GEMMs that rotate over several weight copies (together past the L2; the
copies cycled until a graph holds at least 16 GEMMs or lasts about 1 ms, --graph-min-calls / --graph-target-us, which
call humming.tuner.set_graph_timing: each replay is timed from an idle GPU and pays the graph's launch, ~12 us on the
H200, once), CUDA events; cuBLAS's graph and humming's (and the mma.sync column's) are timed in rounds (``--rounds``,
default 8, rounded up to a whole balanced design, of 5 replays each) whose orders give every graph every position and
every predecessor equally often (humming.tuner.balanced_orders), the median over the rounds; every round's sample is
kept in the JSON (``rounds_us``). Timed one after the other instead (``--rounds 0``: cuBLAS's 20 replays right after
the CPU work of the row, then humming's), the first library runs on a GPU that has just been idle: cuBLAS's decode
GEMMs then read 7-11% slower on the H200 and the ratio favours humming.
The mma.sync column: the same GEMM with the tuning knob wgmma_wna16.enabled false (the mma.sync stream and tile
kernels), where the default runs a wgmma kernel.
Also: effective weight bandwidth, cold compile time of the first kernel (empty cache), host overhead per eager call,
and the GPU's clock / power / power-cap flag right after each row (bench/gpu_state.py: the H200 reaches its 700 W cap
within about a second of load, and a row's number depends on the load before it). Writes OUT/bench_wna16.json and
OUT/bench_wna16.png, both naming the GPU.

    python bench/bench_wna16.py --out OUTDIR [--quick] [--rounds N] [--ms 1,16] [--no-wgmma]
        [--graph-min-calls 16] [--graph-target-us 1000]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming import api, tuner  # noqa: E402
from humming.core.runtime import compiled, launch, precompile  # noqa: E402
from humming.core.tuning import knobs  # noqa: E402
from humming.tuner import copies_for, graph_min_calls, graph_target_us, graph_timer, rotated_samples  # noqa: E402  (shared with `humming tune`)

sys.path.insert(0, os.path.dirname(__file__))
import gpu_state  # noqa: E402  (the clock and power after each row)

SHAPES = [(8192, 8192), (28672, 8192), (4096, 14336)]
MS = [1, 16, 64, 128, 256, 1024, 4096]
ROUNDS = 8  # balanced rounds of 5 replays per library (the module docstring says why not one after the other)


def _empty_cache(d: str) -> None:
    """An empty kernel cache at ``d``: the disk cache moved there, the in-memory ones (compiled modules, loaded
    kernels) cleared."""
    os.environ["HUMMING_CACHE_DIR"] = d
    from humming.core.compile import cache

    cache.clear_memory_caches()
    compiled._compiled.clear()


def first_call_s(qw, x) -> tuple[float, float]:
    """(seconds of the first ``humming.gemm(x, qw)`` from an empty kernel cache, seconds until every kernel it
    scheduled in the background is ready as well)."""
    with tempfile.TemporaryDirectory() as d:
        _empty_cache(d)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        humming.gemm(x, qw)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        precompile.wait_precompiled()
        return first, time.perf_counter() - t0


def cold_start(scheme: str = "w4a16") -> dict:
    """A new layer with an empty kernel cache (quantization excluded): the first call (prepare, plan, compile,
    launch) with the shipped background precompile, and the time until every decode-bucket kernel is ready
    (``humming.aot.wait_precompiled``); then, from another empty cache and without background compiles, every
    decode bucket (M <= 64) compiled in parallel by ``api.warmup``, then the remaining prefill buckets."""
    qw = humming.quantize(torch.randn(4096, 4096, device="cuda") * 0.05, scheme)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    saved = {k: os.environ.get(k) for k in ("HUMMING_CACHE_DIR", precompile.ENV_PRECOMPILE)}
    try:
        first, ready = first_call_s(qw, x)
        os.environ[precompile.ENV_PRECOMPILE] = "0"  # the explicit warmups below measure compiles alone
        with tempfile.TemporaryDirectory() as d:
            _empty_cache(d)
            qw2 = humming.quantize(torch.randn(4096, 4096, device="cuda") * 0.05, scheme)
            t0 = time.perf_counter()
            decode = api.warmup(qw2, torch.float16, [1, 8, 16, 33, 64])
            decode_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            mods = api.warmup(qw2, torch.float16, [1, 16, 33, 64, 128, 256, 1024])
            all_buckets = decode_s + time.perf_counter() - t0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return {"first_call_s": first, "first_call_until_decode_ready_s": ready, "decode_buckets_s": decode_s,
            "decode_kernels": len(decode), "all_buckets_s": all_buckets, "kernels": len(mods),
            "compile_s": [round(m.compile_seconds, 3) for m in mods]}


def host_overhead_us(n_calls: int = 2000) -> float:
    """Host time of an eager humming.gemm call on a tiny layer (the GPU never is the bottleneck here)."""
    return host_overhead_parts(n_calls)["gemm"]


def host_overhead_parts(n_calls: int = 2000) -> dict:
    """Per-call host time (us) of the eager path and of its layers: output allocation (torch.empty, new_empty),
    the current-stream query, the driver call alone (cuLaunchKernel through ctypes, or cuLaunchKernelEx where the
    plan launches with PDL / a cluster; prepared arguments), the spec's prepared launcher (the driver call the hot
    path makes, PDL / cluster attributes included), the launch (the prepared layer's run: spec lookup, output
    allocation, argument slots, the launcher), gemm_prepared, gemm, and gemm into a given output (``out=``: no
    allocation)."""
    qw = humming.quantize(torch.randn(256, 1024, device="cuda") * 0.05, "w4a16")
    x = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    handle = api.prepared(qw, x.dtype, x.device)
    lay = api._registry[handle]
    # cuLaunchKernel alone needs a launch spec whose every pointer slot is valid: one real launch fills the
    # weight slots (and builds the spec's launcher), then x and a kept output buffer fill the per-call ones
    out_keep = torch.empty((1, 256), dtype=x.dtype, device=x.device)
    lay.run(x, out=out_keep)
    spec = lay.launches[1]
    spec.args.slots[0].value = x.data_ptr()
    spec.args.slots[6].value = out_keep.data_ptr()
    stream = launch.current_stream(x.get_device())
    calls = {
        "torch_empty": lambda: torch.empty((1, 256), dtype=x.dtype, device=x.device),
        "new_empty": lambda: x.new_empty((1, 256)),
        "current_stream": lambda: launch.current_stream(0),
        "driver_launch": lambda: spec.kernel.launch(0, spec.grid, spec.threads, stream, spec.args, spec.pdl,
                                                    spec.cluster),
        "prepared_launch": lambda: spec.fire(stream),  # the hot path's launcher (PDL / cluster attributes as planned)
        "launch": lambda: lay.run(x),
        "gemm_prepared": lambda: api.gemm_prepared(x, handle),
        "gemm": lambda: humming.gemm(x, qw),
        "gemm_out": lambda: humming.gemm(x, qw, out=out_keep),  # into the caller's output: no allocation
    }
    out = {}
    for name, fn in calls.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):  # best of three loops: the machine's other load only adds time
            t0 = time.perf_counter()
            for _ in range(n_calls):
                fn()
            best = min(best, time.perf_counter() - t0)
            torch.cuda.synchronize()
        out[name] = round(best / n_calls * 1e6, 2)
    return out


def mma_sync_column(x: torch.Tensor, qws: list, m: int, reps: int) -> dict:
    """The mma.sync family alone (the tuning knob wgmma_wna16.enabled false around the calls: the stream and tile
    kernels), where the default (the main column) runs a wgmma kernel: a timer of its graph (``reps`` replays a
    sample; the kernels are fixed at capture), error and plan; {} where the default already is the mma.sync family."""
    handles = [api.prepared(qw, x.dtype, x.device) for qw in qws]

    def forget():  # launches are kept per M: drop them so that the knob takes effect, and again after
        for h in handles:
            api._registry[h].plans.pop(m, None)
            api._registry[h].launches.pop(m, None)

    forget()
    try:
        with knobs.override({"wgmma_wna16.enabled": False}):
            plan = api.plan_for(handles[0], m)
            out = humming.gemm(x, qws[0])
            timer = graph_timer([lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws], reps)
        ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
        err = float((out.double() - ref).norm() / ref.norm())
        return {"timer": timer, "err": err, "plan": plan.summary()}
    finally:
        forget()


def run(out_dir: str, quick: bool, ms_arg: str | None = None, wgmma: bool = True, rounds: int = ROUNDS) -> dict:
    torch.manual_seed(0)
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "rows": [],
               "method": (f"cuBLAS, humming (and the mma.sync-only column) graphs in at least {rounds} rounds of 5 "
                          f"replays in balanced orders (every graph every position and predecessor equally often; "
                          f"median of the rounds)" if rounds else
                          "cuBLAS then humming (then mma.sync only), each the median of 20 graph replays")
               + f"; every graph at least {graph_min_calls()} GEMMs or about {graph_target_us():g} us (the weight "
                 "copies cycled)",
               "graph_min_calls": graph_min_calls(), "graph_target_us": graph_target_us()}
    results["cold_start"] = cold_start()
    results["host_overhead_parts_us"] = host_overhead_parts()
    results["host_overhead_us"] = results["host_overhead_parts_us"]["gemm"]
    shapes = SHAPES[:1] if quick else SHAPES
    ms = [1, 16, 128] if quick else MS
    if ms_arg:
        ms = [int(v) for v in ms_arg.split(",")]
    for n, k in shapes:
        w_bytes16 = n * k * 2
        n16 = copies_for(w_bytes16)
        w16 = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05 for _ in range(n16)]
        nq = copies_for(n * k // 2)
        qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16") for _ in range(nq)]
        for qw in qws:
            api.warmup(qw, torch.float16, ms)
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            cublas_calls = [lambda w=w, x=x: torch.matmul(x, w.t()) for w in w16]
            hm_calls = [lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws]
            reps = 5 if rounds else 20  # graph replays per sample
            plan = humming.plan("w4a16", m, n, k)  # the plan humming.gemm runs
            timers = {"cublas": graph_timer(cublas_calls, reps), "humming": graph_timer(hm_calls, reps)}
            wg = mma_sync_column(x, qws, m, reps) if wgmma and plan.family == "wgmma" else {}
            if wg:
                timers["mma_sync"] = wg["timer"]
            rounds_us = {}  # every round's sample in order: where a row's median moves between runs, these say why
            if rounds:  # every graph once a round, in balanced orders: no position or predecessor is favoured
                rounds_us = dict(zip(timers, rotated_samples(list(timers.values()), rounds)))
                times = {name: statistics.median(samples) for name, samples in rounds_us.items()}
            else:  # one after the other (the first right after the row's CPU work)
                times = {name: timer() for name, timer in timers.items()}
            t_cublas, t_hm = times["cublas"], times["humming"]
            del timers
            state = gpu_state.read(torch.cuda.current_device())  # the regime the row ran in (capped or not)
            ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
            err = float((humming.gemm(x, qws[0]).double() - ref).norm() / ref.norm())
            # the weight bytes the main column's kernel reads (its packed weights, as this call launched it)
            packed = api._registry[api.prepared(qws[0], torch.float16, x.device)].launches[m].packed
            q_bytes = sum(t.numel() * t.element_size() for t in packed.tensors() if t is not None)
            row = {
                "n": n, "k": k, "m": m, "cublas_fp16_us": round(t_cublas, 2), "humming_w4a16_us": round(t_hm, 2),
                "speedup_vs_cublas": round(t_cublas / t_hm, 3), "weight_tb_s": round(q_bytes / t_hm / 1e6, 3),
                "tflops": round(2 * m * n * k / t_hm / 1e6, 1), "rel_err": err, "plan": plan.summary(),
                "gpu_state_after": state,
                "rounds_us": {name: [round(v, 2) for v in samples] for name, samples in rounds_us.items()},
            }
            if wg:
                wg["us"] = times["mma_sync"]
                row.update(humming_w4a16_mma_sync_us=round(wg["us"], 2),
                           mma_sync_speedup_vs_cublas=round(t_cublas / wg["us"], 3), mma_sync_rel_err=wg["err"],
                           mma_sync_plan=wg["plan"])
            results["rows"].append(row)
            wg_text = f"  mma.sync {wg['us']:8.1f} us  x{t_cublas / wg['us']:5.2f}  err {wg['err']:.1e}" if wg else ""
            print(f"  {n}x{k} M={m}: cuBLAS {t_cublas:8.1f} us  humming {t_hm:8.1f} us  x{t_cublas / t_hm:5.2f}  "
                  f"{row['weight_tb_s']:.2f} TB/s  err {err:.1e}{wg_text}{gpu_state.describe(state)}", flush=True)
        del w16, qws
        torch.cuda.empty_cache()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "bench_wna16.json"), "w") as f:
        json.dump(results, f, indent=1)
    plot(results, os.path.join(out_dir, "bench_wna16.png"))
    return results


def plot(results: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for n, k in sorted({(r["n"], r["k"]) for r in results["rows"]}):
        rows = [r for r in results["rows"] if (r["n"], r["k"]) == (n, k)]
        ax.plot([r["m"] for r in rows], [r["speedup_vs_cublas"] for r in rows], marker="o", label=f"{n}x{k}")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("speed-up vs cuBLAS fp16")
    ax.set_title(f"humming W4A16 g128, {results['device']}, {results['date']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "out"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--ms", default=None, help="comma-separated M values (default: all)")
    parser.add_argument("--no-wgmma", action="store_true",
                        help="skip the mma.sync-only column (where the default runs a wgmma kernel)")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"time cuBLAS and humming in this many balanced rounds (default {ROUNDS}; 0: cuBLAS's "
                             "20 replays, then humming's)")
    parser.add_argument("--graph-min-calls", type=int, default=None,
                        help=f"GEMMs a timed graph holds at least (default {tuner.GRAPH_MIN_CALLS})")
    parser.add_argument("--graph-target-us", type=float, default=None,
                        help=f"no more passes over the weight copies than make a graph this long (default "
                             f"{tuner.GRAPH_TARGET_US:g}; 0: no cap)")
    args = parser.parse_args()
    tuner.set_graph_timing(min_calls=args.graph_min_calls, target_us=args.graph_target_us)
    res = run(args.out, args.quick, args.ms, wgmma=not args.no_wgmma, rounds=args.rounds)
    print("\n| N x K | M | cuBLAS fp16 us | humming W4A16 us | x cuBLAS | weight TB/s | mma.sync only us | "
          "x cuBLAS (mma.sync) | GPU after the row |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in res["rows"]:
        print(f"| {r['n']}x{r['k']} | {r['m']} | {r['cublas_fp16_us']} | {r['humming_w4a16_us']} | "
              f"{r['speedup_vs_cublas']} | {r['weight_tb_s']} | {r.get('humming_w4a16_mma_sync_us', '-')} | "
              f"{r.get('mma_sync_speedup_vs_cublas', '-')} | {gpu_state.describe(r['gpu_state_after']).strip() or '-'} |")
    cs = res["cold_start"]
    print(f"cold start (empty cache): first call {cs['first_call_s']:.2f} s, every decode kernel ready (background "
          f"precompile) {cs['first_call_until_decode_ready_s']:.2f} s; {cs['decode_kernels']} decode-bucket "
          f"kernels {cs['decode_buckets_s']:.2f} s; all {cs['kernels']} bucket kernels "
          f"{cs['all_buckets_s']:.2f} s; host overhead {res['host_overhead_us']:.1f} us/call "
          f"(parts: {res['host_overhead_parts_us']})")


if __name__ == "__main__":
    main()
