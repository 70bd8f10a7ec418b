"""Where do the planned kernels pad their token tiles? For every M in a range, the plan humming would make on a
profile (tuned entry or rules, planned on the CPU as on that GPU) and the share of its token-tile rows that are tokens.
Rows past M cost their full share of the tensor work and, where a TMA box runs past the tensor, more (docs/performance
.md, nineteenth session: 8192x8192 W4A16 M=80 with 128-token tiles 57.4 us against 34.5 with 80): the rows this lists
are the places to A/B next (``scripts/ab_env.py``, e.g. HUMMING_WGMMA_W4A8_RS_BT=128 for the W4A8 kernel).

    python scripts/padding_audit.py [--scheme w4a16] [--profile nvidia-h200] [--shapes 8192x8192,28672x8192]
        [--ms 17-1024] [--below 0.75] (list the M whose tiles are under that share tokens)
"""
from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming import api  # noqa: E402


def token_rows(plan) -> int:
    """Token rows the plan's tiles cover: its token tile (the M side of its tiles) times the tiles M needs."""
    tile = plan.tiles.bm
    return tile * math.ceil(plan.m / tile)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--profile", default="nvidia-h200")
    ap.add_argument("--shapes", default="8192x8192,28672x8192,4096x14336")
    ap.add_argument("--ms", default="17-1024", help="a range lo-hi or a comma list")
    ap.add_argument("--below", type=float, default=0.75, help="list M whose token tiles are under this share tokens")
    args = ap.parse_args()
    if "-" in args.ms:
        lo, hi = map(int, args.ms.split("-"))
        ms = range(lo, hi + 1)
    else:
        ms = [int(m) for m in args.ms.split(",")]
    # plan as on the profile's own GPU (the register-A kernels are planned only where the live GPU runs them)
    api._wgmma_runs_here = lambda caps: True
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        worst, runs = [], {}
        for m in ms:
            p = humming.plan(args.scheme, m, n, k, profile=args.profile)
            share = m / token_rows(p)
            key = (p.path, p.tiles.bm, p.tiles.bn)
            runs.setdefault(key, []).append(m)
            if share < args.below:
                worst.append((m, share, p))
        print(f"{args.scheme} {shape}: {len(worst)} of {len(ms)} M under {args.below:.0%} tokens in their tiles")
        for (path, bm, bn), got in sorted(runs.items(), key=lambda kv: kv[1][0]):
            print(f"  {path} token tile {bm} x {bn} channels: M {got[0]}-{got[-1]} ({len(got)} values)")
        for m, share, p in worst[:: max(1, len(worst) // 12)]:
            print(f"  M={m}: {share:.0%} tokens; {p.summary().split(': ', 1)[1][:110]}")


if __name__ == "__main__":
    main()
