"""Sustained speed (GPU): each library ALONE for a few seconds, the way a server runs one of them, instead of the
benchmark's interleaved rounds. The H200 reaches its 700 W cap within about a second of load and then sets its clock
by the power it draws; when two kernels alternate every few milliseconds (bench/bench_wna16.py, scripts/ab_knobs.py)
they share one clock, set by both, so a kernel that draws less power at a given clock lends its headroom to the other.
Here every visit replays one library's graph (the benchmark's graphs: weight copies past the L2, cycled to ~1 ms) back
to back for ``--seconds``, timed with CUDA events per replay, the median of the visit's second half (the steady state
under the cap) with the SM clock and power nvidia-smi reports meanwhile; ``--rest`` seconds idle between visits; the
visits go cuBLAS, humming, humming, cuBLAS (drift cancels). Every humming row is checked against the reference.
Writes OUT/sustained_<scheme>.json (with the GPU's name); `bash scripts/gpu_suite.sh sustained` runs it.

    python scripts/sustained.py [--scheme w4a16] [--ms 1024,4096] [--shapes 8192x8192,28672x8192,4096x14336]
        [--seconds 3] [--rest 2] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming.tuner import _cycled_graph, copies_for, replay_once_us  # noqa: E402


def visit(graph, calls: int, seconds: float) -> dict:
    """Replay ``graph`` back to back for ``seconds``: us per GEMM (median of the second half's replays), the median
    SM clock and board power of the second half's nvidia-smi samples."""
    mon = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    times, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        times.append(replay_once_us(graph, calls))
    mon.terminate()
    out, _ = mon.communicate()
    samples = [[float(f) for f in ln.split(",")] for ln in out.strip().splitlines() if ln.count(",") == 1]
    late = samples[len(samples) // 2:] or [[float("nan"), float("nan")]]
    return {"us": statistics.median(times[len(times) // 2:]), "first_us": times[0], "replays": len(times),
            "sm_mhz": statistics.median(s[0] for s in late), "watts": statistics.median(s[1] for s in late)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--ms", default="1024,4096")
    ap.add_argument("--shapes", default="8192x8192,28672x8192,4096x14336")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rest", type=float, default=2.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        w16 = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05 for _ in range(copies_for(n * k * 2))]
        qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, args.scheme)
               for _ in range(copies_for(n * k // 2))]
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
            err = float((humming.gemm(x, qws[0]).double() - ref).norm() / ref.norm())
            graphs = {"cublas": _cycled_graph([lambda w=w, x=x: torch.matmul(x, w.t()) for w in w16]),
                      "humming": _cycled_graph([lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws])}
            visits: dict[str, list] = {"cublas": [], "humming": []}
            for lib in ("cublas", "humming", "humming", "cublas"):
                time.sleep(args.rest)
                visits[lib].append(visit(*graphs[lib], args.seconds))
            c = statistics.mean(v["us"] for v in visits["cublas"])
            h = statistics.mean(v["us"] for v in visits["humming"])
            row = {"n": n, "k": k, "m": m, "err": err, "cublas_us": c, "humming_us": h, "x_cublas": c / h,
                   "visits": visits}
            rows.append(row)
            def seen(vs: list) -> str:
                return " / ".join(f"{v['us']:.1f} us @{v['sm_mhz']:.0f} MHz {v['watts']:.0f} W" for v in vs)
            firsts = " / ".join(f"{v['first_us']:.1f}" for v in visits["cublas"] + visits["humming"])
            print(f"{args.scheme} {n}x{k} M={m}: sustained cuBLAS {c:.1f} us, humming {h:.1f} us ({c / h:.3f}x, err "
                  f"{err:.1e}); visits cuBLAS {seen(visits['cublas'])}; humming {seen(visits['humming'])}; first "
                  f"replays (cuBLAS, cuBLAS, humming, humming) {firsts}", flush=True)
            del graphs
        del w16, qws
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"sustained_{args.scheme}.json")
    with open(path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
