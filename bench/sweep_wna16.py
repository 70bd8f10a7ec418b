"""Time every candidate configuration of the WnA16 kernels on the live GPU and save all timings.

    python bench/sweep_wna16.py --out OUTDIR [--shapes 8192x8192,28672x8192] [--ms 1,16,128,1024] [--record]

The candidates and the timing live in the library (``humming.core.tuning.entries.candidates``,
``humming.tuner.tune_layer``: graph replay, weights rotated past L2); `python -m humming tune` is the same
search that stores the winners. This script writes every row to OUTDIR/sweep_wna16.json
({n, k, m, default_us, rows: [{us, path, tiles, splits}]}), fastest first.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from humming import tuner  # noqa: E402
from humming.core.tuning import entries as tuning  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--shapes", default="8192x8192,28672x8192")
    ap.add_argument("--ms", default="1,16,128,1024")
    ap.add_argument("--record", action="store_true", help="also store the winners in the tuning file")
    args = ap.parse_args()
    results = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        ms = [int(m) for m in args.ms.split(",")]
        for res in tuner.tune_layer(args.scheme, n, k, ms, progress=lambda text: print(text, flush=True)):
            best, d_us = res.best, res.default.us
            print(f"{n}x{k} M={res.m}: default {d_us or float('nan'):.1f} us; best {best.us:.1f} us: {best.plan.summary()}", flush=True)
            for t in res.timings[:4]:
                print(f"    {t.us:8.1f} us  {t.plan.path} {t.plan.tiles} split {t.plan.splits}")
            results.append({"n": n, "k": k, "m": res.m, "default_us": d_us,
                            "rows": [{"us": t.us, "path": t.plan.path, "tiles": t.plan.tiles.__dict__,
                                      "splits": t.plan.splits} for t in res.timings]})
            if args.record and not res.emulated:
                print("    recorded", tuning.record(res.winner(0.01).plan, res.winner(0.01).us, device=res.device,
                                                    default_us=d_us))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "sweep_wna16.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
