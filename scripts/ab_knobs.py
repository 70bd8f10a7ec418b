"""A/B on the GPU: one scheme's `humming.gemm` under several settings of one environment switch, against cuBLAS fp16
in the same run. One CUDA graph per setting (and one of cuBLAS) over weight copies past the L2, captured after the
setting's plans are made; then ``--rounds`` rounds (rounded up to a whole balanced design) that replay every graph in
orders giving each graph every position and predecessor equally often (the GPU's clock follows its recent load: a
fixed order favours one position), the median per setting. Every
setting's output checked against the reference (relative error printed), and the kernels that ran recorded
(``*_ran``). Prints one line per (shape, M) with the median and the rounds' min-max, and writes JSON.

    python scripts/ab_env.py --env HUMMING_WGMMA_W4A8_RS_CHAIN --values 128,64 --scheme w4a8-fp8 \
        --ms 512,1024,4096 [--shapes 8192x8192,28672x8192,4096x14336] [--out DIR]
    (several switches at once: --env A+B --values 1+0,unset)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming import api  # noqa: E402
from humming.tuner import copies_for, graph_timer, rotated_samples  # noqa: E402


def prepared_handles(qw) -> list:
    """The registry entries of ``qw``'s prepared handles (from M 513 the two-warpgroup form has a handle of its own)."""
    return [api._registry[h] for h in qw.__dict__.get("_humming_prepared", {}).values() if isinstance(h, int) and h >= 0]


def forget_plans(qws) -> None:
    """Drop every prepared handle's cached plans and launch specs, so that the next call plans under the current
    environment (the weights stay prepared)."""
    for qw in qws:
        for prep in prepared_handles(qw):
            prep.plans.clear()
            prep.launches.clear()


def ran_kernels(qw, m: int) -> list[str]:
    """The kernel names of the plans the prepared handles of ``qw`` made for M (what humming.gemm launched)."""
    return [prep.plans[m].kernel_name for prep in prepared_handles(qw) if m in prep.plans]


def _apply(env: str, value: str) -> None:
    """Set the switch(es): ``env`` may name several variables joined by '+', each value then gives one per variable
    ('unset' leaves a variable at its default)."""
    names = env.split("+")
    parts = value.split("+") if value != "unset" else ["unset"] * len(names)
    if len(parts) != len(names):
        raise SystemExit(f"value {value!r} does not give one setting per variable of {env!r}")
    for name, part in zip(names, parts):
        if part == "unset":
            os.environ.pop(name, None)
        else:
            os.environ[name] = part


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", required=True)
    ap.add_argument("--values", required=True, help="comma-separated; 'unset' for the default")
    ap.add_argument("--scheme", default="w4a8-fp8", help="a scheme name; NAME:channel for its per-channel form")
    ap.add_argument("--ms", default="512,1024,4096")
    ap.add_argument("--shapes", default="8192x8192,28672x8192,4096x14336")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--rounds", type=int, default=8, help="rounds over all settings in balanced orders (rounded up to a whole design)")
    ap.add_argument("--reps", type=int, default=5, help="timed graph replays per visit (their median is one sample)")
    args = ap.parse_args()
    values = args.values.split(",")
    base_name, _, form = args.scheme.partition(":")
    scheme = humming.schemes.get(base_name)
    if form == "channel":
        scheme = scheme.with_(granularity="channel", group_size=None)
    elif form:
        raise SystemExit(f"--scheme {args.scheme}: only NAME:channel is understood")
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
               for _ in range(copies_for(n * k // 2))]
        ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) for _ in range(copies_for(n * k * 2))]
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
            row = {"n": n, "k": k, "m": m}
            # one graph per setting (the kernels are fixed at capture), then rounds that visit every graph in
            # balanced orders: the GPU's clock follows its recent load, so a fixed order favours whichever setting
            # runs first (up to 8% in the thirteenth session's a b b a runs), a fixed predecessor one setting too
            timers = {"cublas": graph_timer([lambda w=w, x=x: torch.matmul(x, w.t()) for w in ws], args.reps)}
            for v in values:
                _apply(args.env, v)
                forget_plans(qws)
                out = humming.gemm(x, qws[0]).double()
                row[f"{v}_err"] = float((out - ref).norm() / ref.norm())
                timers[v] = graph_timer([lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws], args.reps)
                row[f"{v}_plan"] = humming.plan(scheme, m, n, k).summary()
                row[f"{v}_ran"] = ran_kernels(qws[0], m)
            for name, samples in zip(timers, rotated_samples(list(timers.values()), args.rounds)):
                key = "cublas_us" if name == "cublas" else f"{name}_us"
                row[key] = statistics.median(samples)
                row[key.replace("_us", "_rounds_us")] = samples
            del timers
            _apply(args.env, "unset")
            forget_plans(qws)
            rows.append(row)
            cells = ", ".join(f"{args.env}={v}: {row[f'{v}_us']:.1f} us ({row['cublas_us'] / row[f'{v}_us']:.2f}x, "
                              f"{min(row[f'{v}_rounds_us']):.1f}-{max(row[f'{v}_rounds_us']):.1f}, "
                              f"err {row[f'{v}_err']:.1e})" for v in values)
            print(f"{args.scheme} {n}x{k} M={m}: cuBLAS fp16 {row['cublas_us']:.1f} us; {cells}", flush=True)
        del qws, ws
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    name = f"ab_{args.env.lower().replace('+', '_')}_{args.scheme.replace(':', '_')}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "env": args.env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
