"""How fast this GPU streams memory with plain torch kernels (a ceiling for the decode kernels): a read-mostly
reduction and a device-to-device copy over buffers of the given sizes, CUDA-graph replay, L2 flushed by rotation.

    python scripts/read_roofline.py --mb 34,121
"""
from __future__ import annotations

import argparse
import statistics

import torch


def timed(fn, reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", default="34,121")
    args = ap.parse_args()
    for mb in (float(v) for v in args.mb.split(",")):
        n = int(mb * 2**20) // 4
        copies = max(2, int(240 / mb) + 1)
        bufs = [torch.randint(0, 7, (n,), dtype=torch.int32, device="cuda") for _ in range(copies)]
        dst = torch.empty_like(bufs[0])
        def rotating(op, bufs=bufs, dst=dst):
            state = {"i": 0}

            def call():
                state["i"] = (state["i"] + 1) % len(bufs)
                op(bufs[state["i"]], dst)
            return call

        reduce = rotating(lambda src, dst: src.sum(dtype=torch.int64))
        copy = rotating(lambda src, dst: dst.copy_(src))

        r, c = timed(reduce), timed(copy)
        print(f"{mb:6.0f} MB: sum {r:7.1f} us ({n * 4 / r / 1e6:.2f} TB/s read)   "
              f"copy {c:7.1f} us ({2 * n * 4 / c / 1e6:.2f} TB/s read+write)")


if __name__ == "__main__":
    main()
