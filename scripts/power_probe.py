"""SM clock and board power while one GEMM runs back to back (GPU): is a kernel held back by the power limit?
Samples `nvidia-smi` every 50 ms during ~2 s of CUDA-graph replays of each workload and prints median clock / power.

    python scripts/power_probe.py [--m 4096] [--n 8192] [--k 8192] [--schemes w4a8-fp8,w4a16] [--seconds 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402


def _sampled(fn, seconds: float) -> dict:
    """Replay ``fn`` (a captured graph's replay) for ``seconds`` while nvidia-smi samples clock and power."""
    mon = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        fn()
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    mon.terminate()
    out, _ = mon.communicate()
    rows = [[f.strip() for f in ln.split(",")] for ln in out.strip().splitlines() if ln.count(",") == 3]
    clocks = [float(r[0]) for r in rows[2:]]  # the first samples precede the load
    power = [float(r[1]) for r in rows[2:]]
    # every 4th sample (~200 ms apart): clock MHz / W / degrees C / the clock-event reasons (nvidia-smi's bit mask:
    # 0x4 software power cap, 0x20 software thermal slowdown, 0x40 hardware thermal slowdown, 0x80 power brake)
    trace = " ".join(f"{r[0]}/{float(r[1]):.0f}/{r[2]}/{r[3][-3:] if r[3].startswith('0x') else r[3]}"
                     for r in rows[2::4])
    return {"ms_per_replay": 1e3 * elapsed / calls, "sm_mhz": statistics.median(clocks) if clocks else None,
            "watts": statistics.median(power) if power else None, "samples": len(rows), "trace": trace}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--schemes", default="w4a8-fp8,w4a16")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
    w16 = torch.randn(args.n, args.k, device="cuda", dtype=torch.float16)
    work = {"cublas-fp16": (lambda: x @ w16.t())}
    for s in args.schemes.split(","):
        qw = humming.quantize(torch.randn(args.n, args.k, device="cuda") * 0.05, s)
        work[s] = (lambda qw=qw: humming.gemm(x, qw))
    for name, fn in work.items():
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(10):
                fn()
        r = _sampled(graph.replay, args.seconds)
        print(f"{name} M={args.m} N={args.n} K={args.k}: {r['ms_per_replay'] / 10 * 1e3:.1f} us per GEMM sustained, "
              f"SM clock {r['sm_mhz']} MHz, {r['watts']} W (median of {r['samples']} samples)\n  trace (MHz/W/C/reasons): "
              f"{r['trace']}", flush=True)
        time.sleep(1.0)  # let the clock recover before the next workload


if __name__ == "__main__":
    main()
