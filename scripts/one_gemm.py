"""Run one quantized GEMM a few times (for a profiler such as Nsight Compute on the device machine).

    python scripts/one_gemm.py --scheme w4a8-fp8 --m 4096 --n 8192 --k 8192 [--reps 3]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheme", default="w4a8-fp8")
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    qw = humming.quantize(torch.randn(args.n, args.k, device="cuda") * 0.05, args.scheme)
    x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
    for _ in range(args.reps):
        y = humming.gemm(x, qw)
    torch.cuda.synchronize()
    print(args.scheme, tuple(y.shape), float(y.float().abs().mean()))


if __name__ == "__main__":
    main()
