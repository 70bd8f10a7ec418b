"""How fast can one kernel read N bytes once on this GPU (the ceiling of a decode GEMM)? A pure streaming read
(16-byte loads, U loads in flight per thread, results folded so nothing is optimized away), compiled with
NVRTC, timed by CUDA-graph replay over buffers rotated past the L2. Variants: the load's cache hint and whether
the grid covers the buffer once (one block per chunk) or persistently (a grid-stride loop over SMs x blocks).

    python scripts/read_ceiling.py [--mb 117.4,33.6,29.4] [--out DIR]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

from humming.core.compile.compiler import compile_cuda  # noqa: E402
from humming.core.runtime.kernel import LoadedKernel  # noqa: E402
from humming.tuner import graph_time_us  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from results import save_rows  # noqa: E402

HINTS = {"plain": "ld.global.nc.L1::no_allocate.v4.u32",
         "l2_256b": "ld.global.nc.L1::no_allocate.L2::256B.v4.u32",
         "cs_256b": "ld.global.cs.nc.L2::256B.v4.u32"}

SOURCE = r"""
typedef unsigned int uint32_t;
__device__ __forceinline__ void ld16(uint32_t (&r)[4], const void* p) {
  asm volatile("LOAD {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}
// every thread reads U 16-byte words per step, the block's words of one step contiguous; `steps` steps per
// chunk; chunk c of the grid-stride loop starts at c * (blockDim * U * steps) words
extern "C" __global__ void __launch_bounds__(THREADS) read_words(const uint4* __restrict__ src, long long words,
                                                                  int steps, uint32_t* __restrict__ sink) {
  uint32_t acc = 0;
  const long long chunk_words = (long long)THREADS * U * steps;
  for (long long c = blockIdx.x; c * chunk_words < words; c += gridDim.x) {
    const uint4* p = src + c * chunk_words + threadIdx.x;
    for (int s = 0; s < steps; ++s) {
      uint32_t r[U][4];
      #pragma unroll
      for (int u = 0; u < U; ++u)
        if (c * chunk_words + ((long long)s * U + u) * THREADS + threadIdx.x < words)
          ld16(r[u], p + ((long long)s * U + u) * THREADS);
        else
          r[u][0] = r[u][1] = r[u][2] = r[u][3] = 0u;
      #pragma unroll
      for (int u = 0; u < U; ++u) acc ^= r[u][0] ^ r[u][1] ^ r[u][2] ^ r[u][3];
    }
  }
  if (acc == 0x9e3779b9u) sink[threadIdx.x] = acc;  // practically never: keeps the loads alive
}
"""


def kernel(hint: str, threads: int, unroll: int, smem: int = 0) -> LoadedKernel:
    src = f"#define THREADS {threads}\n#define U {unroll}\n" + SOURCE.replace("LOAD", HINTS[hint])
    cc = torch.cuda.get_device_capability()
    mod = compile_cuda(src, ["read_words"], f"sm_{cc[0]}{cc[1]}", cache=False)
    return LoadedKernel(mod.cubin, "read_words", smem)


def buffers(mb: float) -> tuple[int, list]:
    """(bytes, copies of random data of that size together past twice the 60 MB L2)."""
    nbytes = int(mb * 1e6) // 16 * 16
    copies = max(2, int(2 * 60e6 / nbytes) + 1)
    return nbytes, [torch.randint(-2**31, 2**31 - 1, (nbytes // 4,), dtype=torch.int32, device="cuda")
                    for _ in range(copies)]


def reader(k: LoadedKernel, grid: int, threads: int, buf, words: int, steps: int, sink):
    """One launch of the read kernel over ``buf`` on the current stream, as a callable."""
    args = [ctypes.c_void_p(buf.data_ptr()), ctypes.c_longlong(words), ctypes.c_int(steps),
            ctypes.c_void_p(sink.data_ptr())]
    return lambda: k.launch(0, (grid, 1, 1), threads, torch.cuda.current_stream().cuda_stream, args)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", default="117.4,33.6,29.4")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--inflight", action="store_true",
                    help="instead: bandwidth against the bytes in flight per SM (blocks per SM capped by shared memory)")
    args = ap.parse_args()
    if args.inflight:
        inflight_sweep(args)
        return
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    sink = torch.zeros(1024, dtype=torch.int32, device="cuda")
    rows = []
    for mb in (float(v) for v in args.mb.split(",")):
        nbytes, bufs = buffers(mb)
        words = nbytes // 16
        best = None
        for hint in HINTS:
            for threads, unroll, steps in ((256, 4, 4), (256, 8, 2), (512, 4, 2), (128, 8, 4), (256, 4, 16)):
                k = kernel(hint, threads, unroll)
                chunk = threads * unroll * steps
                chunks = -(-words // chunk)
                for mode, grid in (("once", chunks), ("persistent", sms * 4), ("persistent8", sms * 8)):
                    grid = min(grid, chunks)

                    us = graph_time_us([reader(k, grid, threads, b, words, steps, sink) for b in bufs])
                    row = {"mb": mb, "hint": hint, "threads": threads, "unroll": unroll, "steps": steps,
                           "mode": mode, "grid": grid, "us": us, "tb_s": nbytes / us / 1e6}
                    rows.append(row)
                    if best is None or us < best["us"]:
                        best = row
        for hint in HINTS:
            h = min((r for r in rows if r["mb"] == mb and r["hint"] == hint), key=lambda r: r["us"])
            print(f"{mb:7.1f} MB {hint:12s}: best {h['us']:6.2f} us ({h['tb_s']:.2f} TB/s) threads {h['threads']} "
                  f"U {h['unroll']} steps {h['steps']} {h['mode']} grid {h['grid']}", flush=True)
        del bufs
        torch.cuda.empty_cache()
    save_rows(args.out, "read_ceiling.json", rows)


def inflight_sweep(args) -> None:
    """Plain loads, one pass over the buffer; blocks per SM capped with dynamic shared memory so that the bytes in
    flight per SM are (blocks per SM) x threads x U x 16."""
    sink = torch.zeros(1024, dtype=torch.int32, device="cuda")
    rows = []
    for mb in (float(v) for v in args.mb.split(",")):
        nbytes, bufs = buffers(mb)
        words = nbytes // 16
        for threads in (128, 256):
            for unroll in (2, 4, 8, 16):
                for per_sm in (1, 2, 4, 8):
                    smem = (220 * 1024) // per_sm - 1024
                    k = kernel("plain", threads, unroll, smem)
                    steps = 2
                    grid = -(-words // (threads * unroll * steps))
                    us = graph_time_us([reader(k, grid, threads, b, words, steps, sink) for b in bufs])
                    kb = per_sm * threads * unroll * 16 / 1024
                    rows.append({"mb": mb, "threads": threads, "unroll": unroll, "blocks_per_sm": per_sm,
                                 "inflight_kb_per_sm": kb, "us": us, "tb_s": nbytes / us / 1e6})
        for r in sorted((r for r in rows if r["mb"] == mb), key=lambda r: (r["inflight_kb_per_sm"], r["us"])):
            print(f"{mb:7.1f} MB in flight {r['inflight_kb_per_sm']:6.1f} KB/SM ({r['blocks_per_sm']} x {r['threads']} "
                  f"threads x U {r['unroll']:2d}): {r['us']:7.2f} us {r['tb_s']:.2f} TB/s", flush=True)
        del bufs
        torch.cuda.empty_cache()
    save_rows(args.out, "read_inflight.json", rows)


if __name__ == "__main__":
    main()
