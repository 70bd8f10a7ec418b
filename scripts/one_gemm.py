"""Run one quantized GEMM a few times on the GPU: the program a profiler watches (scripts/ncu_stalls.sh,
scripts/ncu_source.sh; Nsight Systems, compute-sanitizer). Prints the kernel that ran.

    python scripts/one_gemm.py --scheme w4a8-fp8 --m 4096 --n 8192 --k 8192 [--reps 3]
        [--knob register_a8.chain=128 ...] [--option fast_accum=true ...] (tuning knobs / GemmOptions fields; JSON)
        [--tiles '{"bm": 16, "bk": 512, "stages": 2, "warps_k": 8, "fold": 2, "bulk": 1, "splits": 2}'] (a forced
        WnA16 plan of the mma.sync family: MmaWnA16Tiles fields plus "splits" and "path")
    python scripts/one_gemm.py --scheme cublas-fp16 ...   (torch.matmul on random fp16 weights instead: the
                                                            baseline's kernels, e.g. for ncu -k regex:. )
    compute-sanitizer python scripts/one_gemm.py --scheme w4a16 --m 16
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming import api  # noqa: E402
from humming.core.tuning import knobs  # noqa: E402


def assignments(pairs: list[str]) -> dict:
    """NAME=VALUE pairs as a dict, each value parsed as JSON (null, true, 128) or else kept as text (prmt)."""
    out = {}
    for kv in pairs:
        name, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"{kv!r}: expected NAME=VALUE")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def force(qw, x, spec: dict, options=None) -> None:
    """Make the prepared weight run the given WnA16 stream / tile configuration at x's M (a plan of the mma.sync
    family, humming.core.families.mma_wna16.planner.plan_wna16). Tile fields not given come from the runtime plan
    where that is a stream / tile plan; otherwise give every MmaWnA16Tiles field or none (the planner's tiles)."""
    from humming.core.families.mma_wna16.layout import layout_for
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
    from humming.core.plan import launch_options

    lay = api._registry[api.prepared(qw, x.dtype, x.device, options=options)]
    m = x.shape[0]
    base = lay.plan_for(m)
    own = base.path in ("stream", "tile")
    names = list(MmaWnA16Tiles.__dataclass_fields__)
    given = {f: spec[f] for f in names if f in spec}
    if own:
        tiles = MmaWnA16Tiles(**{**{f: getattr(base.tiles, f) for f in names}, **given})
    else:
        tiles = MmaWnA16Tiles(**given) if given else None
    path = spec.get("path", base.path if own else None)
    layout = layout_for(lay.scheme, lay.n, lay.k, lay.act, caps=lay.caps)
    p = plan_wna16(lay.caps, layout, m, lay.act, scheme=base.scheme, path=path,
                   splits=spec.get("splits", base.splits if own else None), tiles=tiles)
    p = launch_options(lay.caps, p)  # launched as the runtime launches its plans (PDL, split-K clusters)
    lay.plans[m] = p
    lay.launches.pop(m, None)
    print("forced", p.kernel_name, "split-K", p.splits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="w4a8-fp8")
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--knob", nargs="+", action="extend", default=[], help="NAME=VALUE tuning knobs in force (JSON values)")
    ap.add_argument("--option", nargs="+", action="extend", default=[], help="NAME=VALUE humming.GemmOptions fields (JSON values)")
    ap.add_argument("--tiles", default=None,
                    help='force a WnA16 plan: JSON of MmaWnA16Tiles fields plus "splits" and "path", e.g. '
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
    options = humming.GemmOptions(**assignments(args.option))
    qw = humming.quantize(torch.randn(args.n, args.k, device="cuda") * 0.05, args.scheme)
    with knobs.override(assignments(args.knob)):
        if args.tiles:
            force(qw, x, json.loads(args.tiles), options)
        for _ in range(args.reps):
            y = humming.gemm(x, qw, options=options)
        torch.cuda.synchronize()
    spec = api._registry[api.prepared(qw, x.dtype, x.device, options=options)].launches[args.m]
    print(args.scheme, tuple(y.shape), float(y.float().abs().mean()), f"ran {spec.plan.kernel_name} ({spec.inputs})")


if __name__ == "__main__":
    main()
