"""A new layer's first call with an empty kernel cache (GPU), with the shipped background precompile or with
HUMMING_PRECOMPILE set to MODE, and which kernels were compiled meanwhile (slowest first):

    python scripts/cold_start_probe.py [--mode default|decode|all|0] [--n 4096] [--k 4096] [--m 1]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))

import torch  # noqa: E402

import humming  # noqa: E402
from humming import aot  # noqa: E402
from humming.core.compile.compiler import compile_stats  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="default")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--m", type=int, default=1)
    args = ap.parse_args()
    from bench_wna16 import first_call_s

    if args.mode != "default":
        os.environ[aot.ENV_PRECOMPILE] = args.mode
    qw = humming.quantize(torch.randn(args.n, args.k, device="cuda") * 0.05, "w4a16")
    x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
    first, ready = first_call_s(qw, x)
    stats = sorted(compile_stats(), key=lambda s: -s.seconds)
    print(f"{args.mode}: first call {first:.2f} s, every scheduled kernel ready {ready:.2f} s, {len(stats)} compiles: "
          + ", ".join(f"{s.kernel_names[0]} {s.seconds:.2f} s" for s in stats[:12]))


if __name__ == "__main__":
    main()
