"""Time candidate tile configurations of the WnA16 kernel on the live GPU (the seed of `humming tune`).

    python bench/sweep_wna16.py --out OUTDIR
Prints, per (shape, M), every candidate's time (graph replay, rotating weights past L2) and the winner.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming import api  # noqa: E402
from humming.core.planner import TileConfig, plan_wna16  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from bench_wna16 import copies_for, graph_time_us  # noqa: E402


def candidates(m: int):
    if m <= 64:
        tm = (m + 15) // 16
        for ta, wk, stages in itertools.product((1,), (1, 4), (3, 4)):
            yield TileConfig(16 * tm, 64 * ta, 64 * wk, stages, 1, 1, wk)
    else:
        for bm, wm, wn, wk, bk, stages in [(64, 2, 2, 1, 64, 4), (64, 2, 2, 2, 128, 3), (128, 2, 2, 1, 64, 4),
                                           (128, 2, 2, 2, 128, 3), (128, 2, 4, 1, 64, 4), (64, 1, 2, 2, 128, 4),
                                           (128, 4, 2, 1, 64, 4), (128, 2, 2, 1, 64, 3)]:
            yield TileConfig(bm, 64 * wn, bk, stages, wm, wn, wk)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--shapes", default="8192x8192,28672x8192")
    ap.add_argument("--ms", default="1,16,128,1024")
    args = ap.parse_args()
    results = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16") for _ in range(copies_for(n * k // 2))]
        handles = [api.prepared(qw, torch.float16, torch.device("cuda")) for qw in qws]
        caps = api._registry[handles[0]].caps
        layout = api._registry[handles[0]].packed.layout
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            default = plan_wna16(caps, layout, m, "f16")
            plans = [default]
            for t in candidates(m):
                for s in (1, 2, 3, 4, 6, 8):
                    try:
                        plans.append(plan_wna16(caps, layout, m, "f16", tiles=t, splits=s))
                    except Exception:
                        pass
            if m <= 16:
                for wk, s, pf in itertools.product((2, 4, 8), (1, 2, 4, 8), (1, 2, 3)):
                        try:
                            plans.append(plan_wna16(caps, layout, m, "f16", splits=s, path="stream",
                                                    tiles=TileConfig(8 if m <= 8 else 16, 64, 64 * wk, pf + 1, 1, 1, wk)))
                        except Exception:
                            pass
            # compile all in parallel first
            from concurrent.futures import ThreadPoolExecutor

            uniq = {p.kernel_name: p for p in plans}
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p, c=caps: api.compile_plan(p, c), uniq.values()))
            rows = []
            for p in plans:
                for h in handles:
                    api._registry[h].plans[m] = p
                    api._registry[h].launches.pop(m, None)
                try:
                    t = graph_time_us([lambda h=h, x=x: api.gemm_prepared(x, h) for h in handles], reps=10)
                except Exception as exc:  # a config the device rejects
                    print("  failed:", p.summary(), exc)
                    continue
                rows.append((t, p))
            rows.sort(key=lambda r: r[0])
            t_def = next(t for t, p in rows if p is default)
            print(f"{n}x{k} M={m}: default {t_def:.1f} us; best {rows[0][0]:.1f} us: {rows[0][1].summary()}", flush=True)
            for t, p in rows[:4]:
                print(f"    {t:8.1f} us  {p.tiles} split {p.splits}")
            results.append({"n": n, "k": k, "m": m, "default_us": t_def,
                            "rows": [{"us": t, "tiles": p.tiles.__dict__, "splits": p.splits} for t, p in rows]})
            for h in handles:
                api._registry[h].plans.pop(m, None)
                api._registry[h].launches.pop(m, None)
        del qws
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "sweep_wna16.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
