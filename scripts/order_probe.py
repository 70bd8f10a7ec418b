"""Why does a GEMM's time depend on what ran before it? Times single CUDA-graph replays of humming and of cuBLAS fp16
(weights rotated past the L2) in three states: after an idle gap, right after the other library's graph, and after
many replays of itself, and reads the SM clock after each replay (a one-thread kernel that spins a fixed number of
cycles and reads %globaltimer around them). Prints one line per (shape, M, library, state): median us per GEMM and
median MHz; writes JSON.

    python scripts/order_probe.py [--shapes 28672x8192,8192x8192] [--ms 1,16] [--reps 12] [--out DIR]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming.core.compile.compiler import compile_cuda  # noqa: E402
from humming.core.runtime.kernel import LoadedKernel  # noqa: E402
from humming.tuner import capture_graph, copies_for  # noqa: E402

CLOCK_SOURCE = r"""
extern "C" __global__ void sm_clock(unsigned long long* out, int spins) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  while (clock64() - c0 < spins) {}
  const long long c1 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  out[0] = (unsigned long long)(c1 - c0), out[1] = t1 - t0;
}
"""


class ClockReader:
    """Launches the spinning kernel into a slot of a device buffer; ``mhz()`` reads every slot written so far."""

    def __init__(self, slots: int = 4096, spins: int = 200_000) -> None:
        cc = torch.cuda.get_device_capability()
        mod = compile_cuda(CLOCK_SOURCE, ["sm_clock"], f"sm_{cc[0]}{cc[1]}", cache=False)
        self.kernel = LoadedKernel(mod.cubin, "sm_clock", 0)
        self.buf = torch.zeros(slots, 2, dtype=torch.int64, device="cuda")
        self.spins, self.used = spins, 0

    def launch(self) -> int:
        slot = self.used
        self.used += 1
        args = [ctypes.c_void_p(self.buf[slot].data_ptr()), ctypes.c_int(self.spins)]
        self.kernel.launch(0, (1, 1, 1), 1, torch.cuda.current_stream().cuda_stream, args)
        return slot

    def mhz(self, slots: list[int]) -> list[float]:
        v = self.buf[slots].cpu()
        return [float(c) / float(ns) * 1000.0 for c, ns in v.tolist() if ns > 0]


def timed(graph, calls: int, clock: ClockReader) -> tuple[float, int]:
    """One replay: us per GEMM, and the clock slot written right after it."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    slot = clock.launch()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls, slot


def states(mine, other, calls: int, other_calls: int, clock: ClockReader, reps: int) -> dict:
    """Times of ``mine`` after an idle gap, right after ``other`` and after many replays of itself."""
    out = {}
    for state in ("idle", "after_other", "hot"):
        us, slots = [], []
        for _ in range(reps):
            if state == "idle":
                torch.cuda.synchronize()
                time.sleep(0.05)
            elif state == "after_other":
                for _ in range(3):
                    other.replay()
            t, s = timed(mine, calls, clock)
            us.append(t)
            slots.append(s)
        if state == "hot":  # the first few replays of the run warm it up: keep the later half
            us, slots = us[reps // 2:], slots[reps // 2:]
        out[state] = {"us": statistics.median(us), "us_all": us, "mhz": statistics.median(clock.mhz(slots))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="28672x8192,8192x8192")
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    clock = ClockReader()
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16") for _ in range(copies_for(n * k // 2))]
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05 for _ in range(copies_for(n * k * 2))]
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            g_hm = capture_graph([lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws])
            g_cb = capture_graph([lambda w=w, x=x: torch.matmul(x, w.t()) for w in ws])
            hm = states(g_hm, g_cb, len(qws), len(ws), clock, args.reps)
            cb = states(g_cb, g_hm, len(ws), len(qws), clock, args.reps)
            rows.append({"n": n, "k": k, "m": m, "humming": hm, "cublas": cb})
            for name, res in (("humming", hm), ("cublas", cb)):
                cells = "  ".join(f"{s}: {v['us']:7.1f} us @ {v['mhz']:4.0f} MHz" for s, v in res.items())
                print(f"{n}x{k} M={m:<3} {name:8s} {cells}", flush=True)
            ratios = "  ".join(f"{s}: {cb[s]['us'] / hm[s]['us']:.2f}x" for s in hm)
            print(f"{n}x{k} M={m:<3} cuBLAS/humming by state  {ratios}", flush=True)
        del qws, ws
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "order_probe.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
