"""Run one quantized GEMM a few times (for a profiler such as Nsight Compute on the device machine).

    python scripts/one_gemm.py --scheme w4a8-fp8 --m 4096 --n 8192 --k 8192 [--reps 3]
    python scripts/one_gemm.py --scheme cublas-fp16 ...   (torch.matmul on random fp16 weights instead: the
                                                            baseline's kernels, e.g. for ncu -k regex:. )
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402


def _force(qw, x, spec: dict) -> None:
    """Make the prepared weight run the given stream/tile configuration at x's M."""
    from humming import api
    from humming.core.plan import TileConfig, plan_wna16

    handle = api.prepared(qw, x.dtype, x.device)
    prep = api._registry[handle]
    m = x.shape[0]
    base = api.plan_for(handle, m)
    fields = {f: spec.get(f, getattr(base.tiles, f)) for f in TileConfig.__dataclass_fields__}
    p = plan_wna16(prep.caps, prep.packed.layout, m, base.act, scheme=base.scheme, path=spec.get("path", base.path),
                   splits=spec.get("splits", base.splits), tiles=TileConfig(**fields))
    prep.plans[m] = p
    prep.launches.pop(m, None)
    if os.environ.get("HUMMING_FORCE_QUIET") != "1":
        print("forced", p.kernel_name, "split-K", p.splits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheme", default="w4a8-fp8")
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tiles", default=None,
                    help='force a WnA16 plan: JSON of TileConfig fields plus "splits" and "path", e.g. '
                         '\'{"bm": 16, "bk": 512, "stages": 2, "warps_k": 8, "fold": 2, "bulk": 1, "splits": 2}\'')
    args = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(args.m, args.k, device="cuda", dtype=torch.float16)
    if args.scheme == "cublas-fp16":  # the baseline of the benchmarks: fp16 torch.matmul on the same weights
        w16 = torch.randn(args.n, args.k, device="cuda", dtype=torch.float16) * 0.05  # as bench/bench_wna16.py's
        for _ in range(args.reps):
            y = x @ w16.t()
        torch.cuda.synchronize()
        print(args.scheme, tuple(y.shape), float(y.float().abs().mean()))
        return
    qw = humming.quantize(torch.randn(args.n, args.k, device="cuda") * 0.05, args.scheme)
    if args.tiles:
        _force(qw, x, json.loads(args.tiles))
    for _ in range(args.reps):
        y = humming.gemm(x, qw)
    torch.cuda.synchronize()
    print(args.scheme, tuple(y.shape), float(y.float().abs().mean()))


if __name__ == "__main__":
    main()
