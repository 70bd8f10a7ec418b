"""Quantized-activation benchmark: W8A8-FP8 vs cuBLASLt FP8 (torch._scaled_mm, row-wise scales), W8A8-INT8 vs
torch._int_mm, W4A8-FP8 / W4A8-INT8 vs cuBLAS fp16, on layer shapes of a Llama-3-70B-like decoder (default 8192x8192,
28672x8192; N x K). Activation quantization is included in every quantized time (humming's and the baselines').

    python bench/bench_quantized.py --out OUTDIR [--ms 1,16,128,1024,4096] [--shapes 8192x8192,28672x8192]
        [--schemes w8a8-fp8,w8a8-int8] [--no-fast-accum] [--graph-min-calls 16] [--graph-target-us 1000]
Any preset scheme runs (--schemes w4a16,w4a8-mxfp4,w4a16-nvfp4,w4a4-nvfp4: the formats of the headline, each
against cuBLAS fp16 and beside W4A16 int4). Every scheme with 8-bit activations is timed twice: "native" (humming.GemmOptions(act_widen=False): the 8-bit kernels, wgmma from M >= 64
where declared) and "widened" (act_widen=True: codes widened to f16 on the weight-only kernels,
humming.core.routes.widened_ranges); the default column is the one humming.gemm picks without the option (bold in the
table). W8A8-FP8 also with GemmOptions(fast_accum=True) from M >= 64 (no fp32 promotion of partial sums; JSON key
w8a8-fp8_fast_us), W4A8-FP8 from M >= 256 (the wide form's direct accumulation; JSON key w4a8-fp8_fast_us, compared
with cuBLAS fp16); --no-fast-accum leaves these columns out.
Same method as bench_wna16.py: CUDA-graph replay over weight copies rotated past L2 (cycled until a graph holds at
least 16 GEMMs or lasts about 1 ms, --graph-min-calls / --graph-target-us: humming.tuner.set_graph_timing); every
column's graph of a row is captured first, then all are timed in rounds (``--rounds``, default 8, rounded up to a
whole balanced design, of 5 replays) whose orders give every graph every position and predecessor equally often
(humming.tuner.balanced_orders), the median over the rounds; every round's sample is kept (``rounds_us``).
``--rounds 0``: each graph's 20 replays one after the other, in column order (the first column right after the row's
CPU work). Writes OUT/bench_quantized.json (with the GPU's name).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming import tuner  # noqa: E402
from humming.tuner import copies_for, graph_min_calls, graph_target_us, graph_timer, rotated_samples  # noqa: E402

SCHEMES = ["w8a8-fp8", "w8a8-int8", "w4a8-fp8", "w4a8-int8"]
VARIANTS = {"native": humming.GemmOptions(act_widen=False),  # the call options of each timed variant
            "widened": humming.GemmOptions(act_widen=True)}
FAST = humming.GemmOptions(act_widen=False, fast_accum=True)
ROUNDS = 8  # balanced rounds of 5 replays over every column's graph (the module docstring)
BASELINE = {"w8a8-fp8": ("cublaslt_fp8_rowwise_us", "cuBLASLt"), "w8a8-int8": ("torch_int_mm_us", "int_mm"),
            "w4a8-fp8": ("cublas_fp16_us", "fp16"), "w4a8-int8": ("cublas_fp16_us", "fp16")}


def _fp8_rowwise(x: torch.Tensor):
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12)
    scale = amax / 448.0
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


def _int8_rowwise(x: torch.Tensor):
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12)
    scale = amax / 127.0
    return torch.round(x.float() / scale).clamp(-127, 127).to(torch.int8), scale


def baselines(x: torch.Tensor, n: int, k: int, reps: int, row: dict) -> tuple[dict, list]:
    """Timers (JSON key -> timer of one call's us) of cuBLAS fp16, cuBLASLt FP8 row-wise and torch._int_mm (with
    their activation quantization), and the weight copies their graphs read (keep them alive while timing); a
    baseline torch refuses is noted in ``row``."""
    m = x.shape[0]
    timers, keep = {}, []
    w16 = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05 for _ in range(copies_for(n * k * 2))]
    timers["cublas_fp16_us"] = graph_timer([lambda w=w: x @ w.t() for w in w16], reps)
    w8 = [(torch.randn(n, k, device="cuda") * 0.05).to(torch.float8_e4m3fn) for _ in range(copies_for(n * k))]
    sb = torch.ones(1, n, device="cuda")
    keep += [w16, w8, sb]

    def fp8(w):
        a, sa = _fp8_rowwise(x)
        return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float16)

    try:
        timers["cublaslt_fp8_rowwise_us"] = graph_timer([lambda w=w: fp8(w) for w in w8], reps)
    except (RuntimeError, TypeError) as exc:
        row["cublaslt_fp8_rowwise_us"] = None
        row["cublaslt_fp8_error"] = str(exc).splitlines()[0]
    if m > 16:
        wi = [torch.randint(-127, 128, (k, n), device="cuda", dtype=torch.int8) for _ in range(copies_for(n * k))]
        keep.append(wi)

        def int8(w):
            a, sa = _int8_rowwise(x)
            return (torch._int_mm(a, w).float() * sa).half()

        timers["torch_int_mm_us"] = graph_timer([lambda w=w: int8(w) for w in wi], reps)
    return timers, keep


def variants_of(scheme: str) -> dict:
    """The call options timed for ``scheme``: native and widened for 8-bit activations, the default otherwise."""
    spec = humming.schemes.get(scheme)
    return VARIANTS if spec.quantizes_activations and spec.act_bits == 8 else {"native": None}


def _time_scheme(row: dict, key: str, qws: list, x: torch.Tensor, reps: int, options):
    """A timer of humming.gemm's graph over the weight copies with the call options ``options`` (planned, compiled
    and captured now) or None where humming refuses (row[key_why]); row[key_err]: error vs reference."""
    try:
        for qw in qws:
            humming.gemm(x, qw, options=options)  # plan, compile, prepare outside the graph
        timer = graph_timer([lambda qw=qw, x=x: humming.gemm(x, qw, options=options) for qw in qws], reps)
        ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
        row[f"{key}_err"] = float((humming.gemm(x, qws[0], options=options).double() - ref).norm() / ref.norm())
        return timer
    except humming.HummingError as exc:
        row[f"{key}_us"] = None
        row[f"{key}_why"] = str(exc).splitlines()[0]
        return None


def main() -> None:
    from humming.api import resolve_profile
    from humming.core.routes import widened_ranges

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--ms", default="1,16,128,1024,4096")
    ap.add_argument("--shapes", default="8192x8192,28672x8192")
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--no-fast-accum", action="store_true",
                    help="skip the humming.GemmOptions(fast_accum=True) columns")
    ap.add_argument("--rounds", type=int, default=ROUNDS,
                    help=f"balanced rounds over every column's graph (default {ROUNDS}; 0: one after the other)")
    ap.add_argument("--graph-min-calls", type=int, default=None,
                    help=f"GEMMs a timed graph holds at least (default {tuner.GRAPH_MIN_CALLS})")
    ap.add_argument("--graph-target-us", type=float, default=None,
                    help=f"no more passes over the weight copies than make a graph this long (default "
                         f"{tuner.GRAPH_TARGET_US:g}; 0: no cap)")
    args = ap.parse_args()
    tuner.set_graph_timing(min_calls=args.graph_min_calls, target_us=args.graph_target_us)
    reps = 5 if args.rounds else 20  # graph replays per sample
    caps = resolve_profile(None)
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        weights = {s: [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, s) for _ in range(copies_for(n * k))]
                   for s in args.schemes.split(",")}
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            row = {"n": n, "k": k, "m": m}
            timers, keep = baselines(x, n, k, reps, row)
            for s, qws in weights.items():
                keys = [(f"{s}_{variant}", options) for variant, options in variants_of(s).items()]
                if ((s == "w8a8-fp8" and m >= 64) or (s == "w4a8-fp8" and m >= 256)) and not args.no_fast_accum:
                    keys.append((f"{s}_fast", FAST))
                for key, options in keys:
                    timer = _time_scheme(row, key, qws, x, reps, options)
                    if timer is not None:
                        timers[f"{key}_us"] = timer
            # every column's graph once a round, in balanced orders: the GPU's clock and power state
            # follow its recent load, so a fixed order favours one position
            samples = (rotated_samples(list(timers.values()), args.rounds) if args.rounds
                       else [[timer()] for timer in timers.values()])
            for key, values in zip(timers, samples):
                row[key] = statistics.median(values)
            # every round's time in order (humming.tuner.balanced_orders): where a median moves between
            # runs, these say whether one round or a whole regime (the power cap) moved it
            row["rounds_us"] = {key: [round(v, 2) for v in values] for key, values in zip(timers, samples)}
            del timers, keep
            torch.cuda.empty_cache()
            for s in weights:
                picked = ("widened" if "widened" in variants_of(s)
                          and widened_ranges.applies(caps, humming.schemes.get(s), m, n, k) else "native")
                row[f"{s}_default"] = picked
                row[f"{s}_us"] = row.get(f"{s}_{picked}_us")
            rows.append(row)
            print(json.dumps(row), flush=True)
        del weights
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "rows": rows,
              "graph_min_calls": graph_min_calls(), "graph_target_us": graph_target_us()}
    with open(os.path.join(args.out, "bench_quantized.json"), "w") as f:
        json.dump(result, f, indent=1)
    schemes = args.schemes.split(",")

    def f(v):
        return "-" if v is None else f"{v:.1f}"

    def speedup(base, v):  # > 1: humming faster
        return "-" if base is None or v is None else f"{base / v:.2f}x"

    head = "| N x K | M | fp16 | FP8 cuBLASLt | int_mm |"
    for s in schemes:
        base = BASELINE.get(s, ("cublas_fp16_us", "fp16"))[1]
        head += f" {s} native | {s} widened | default / {base} |"
    fast_cols = [s for s in ("w8a8-fp8", "w4a8-fp8") if s in schemes]
    fast_base = {"w8a8-fp8": ("cublaslt_fp8_rowwise_us", "cuBLASLt"), "w4a8-fp8": ("cublas_fp16_us", "fp16")}
    head += "".join(f" {s} fast-accum | fast / {fast_base[s][1]} |" for s in fast_cols)
    print("\n" + head)
    print("|---" * (head.count("|") - 1) + "|")
    for r in rows:
        line = (f"| {r['n']}x{r['k']} | {r['m']} | {f(r['cublas_fp16_us'])} | {f(r.get('cublaslt_fp8_rowwise_us'))} | "
                f"{f(r.get('torch_int_mm_us'))} |")
        for s in schemes:
            base = r.get(BASELINE.get(s, ("cublas_fp16_us",))[0]) or r["cublas_fp16_us"]
            mark = {v: "**" if r.get(f"{s}_default") == v else "" for v in VARIANTS}
            line += (f" {mark['native']}{f(r.get(f'{s}_native_us'))}{mark['native']} |"
                     f" {mark['widened']}{f(r.get(f'{s}_widened_us'))}{mark['widened']} |"
                     f" {speedup(base, r.get(f'{s}_us'))} |")
        for s in fast_cols:
            line += f" {f(r.get(f'{s}_fast_us'))} | {speedup(r.get(fast_base[s][0]), r.get(f'{s}_fast_us'))} |"
        print(line)
    print("(bold: the variant humming.gemm picks by default; int_mm has no M <= 16 form, so W8A8-INT8 is then "
          "compared with fp16)")


if __name__ == "__main__":
    main()
