"""How a decode kernel's time scales with its number of 64-channel slabs (blocks), the plan held fixed: the plan
tuned for one layer (--n) timed at other widths. If time follows the most blocks any SM holds rather than the bytes,
the SMs, not the DRAM, set the pace (and an uneven last share of blocks costs time).

    python scripts/wave_probe.py --m 1 --n 28672 --k 8192 --widths 25344,27136,28672,30720,33792
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming import api  # noqa: E402
from humming.core.plan import plan_wna16  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from gemm_timing import error_and_time, weight_copies  # noqa: E402
from results import save_rows  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--n", type=int, default=28672)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--widths", default="25344,27136,28672,30720,33792")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    base = humming.plan(args.scheme, args.m, args.n, args.k)
    print("plan of", args.n, ":", base.summary())
    rows = []
    for n in map(int, args.widths.split(",")):
        qws = weight_copies(args.scheme, n, args.k)
        x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
        for qw in qws:
            prep = api._registry[api.prepared(qw, x.dtype, x.device)]
            prep.plans[args.m] = plan_wna16(prep.caps, prep.packed.layout, args.m, base.act, scheme=base.scheme,
                                            path=base.path, splits=base.splits, tiles=base.tiles)
            prep.launches.pop(args.m, None)
        err, us = error_and_time(x, qws)
        slabs = n // 64
        rows.append({"n": n, "slabs": slabs, "us": us, "err": err, "us_per_slab": us / slabs})
        print(f"N={n}: {slabs} slabs, {us:.1f} us ({us / slabs * 1000:.1f} ns per slab), err {err:.1e}", flush=True)
        del qws
        torch.cuda.empty_cache()
    save_rows(args.out, f"wave_probe_m{args.m}_n{args.n}.json", rows)


if __name__ == "__main__":
    main()
