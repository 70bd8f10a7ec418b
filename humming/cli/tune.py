"""`python -m humming tune`: time candidate plans on the live GPU and store the winners.

    python -m humming tune --scheme w4a16 --shapes 8192x8192,28672x8192 --m 1,16,128,1024

For each layer shape and M: quantize random weights (enough copies to stream past the L2), time the planner's
default and every candidate configuration with CUDA-graph replay, print the fastest, and record the winner
per (profile, scheme, layout, N, K, M bucket) in the tuning file (``humming.core.tuning.entries.tune_file()``), which
the planner reads from then on. Needs a CUDA GPU; without one it says so and exits with status 2.

    python -m humming tune --moe --experts 128 --top-k 8 --shapes 1536x2048,2048x768 --tokens 1,64,2048

``--moe``: the MoE GEMM of stacked experts instead (humming.moe_tuner): per token count, the rules' plan and every
token tile x tile x split-K of the MoE tile kernel and the register-A kernel's token tiles, stored per (profile,
scheme, layout, N, K, experts, top_k, bucket of tokens).
"""
from __future__ import annotations

import json
import sys

from humming.cli._args import positive_int

HELP = "time candidate kernel configurations on this GPU and store the winners for the planner"


def add_arguments(p) -> None:
    p.add_argument("--scheme", default="w4a16", help="preset or scheme string (see humming.schemes.names())")
    p.add_argument("--group-size", type=positive_int, default=None)
    p.add_argument("--shapes", default="8192x8192,28672x8192,4096x14336", help="NxK,... (output x input features)")
    p.add_argument("--m", default="1,16,128,1024", help="comma-separated M values; each is stored for its M bucket")
    p.add_argument("--dtype", default="f16", choices=["f16", "bf16"], help="activation type")
    p.add_argument("--reps", type=int, default=10, help="graph replays per candidate (median)")
    p.add_argument("--jobs", type=int, default=None, help="parallel NVRTC compiles (default: CPUs, at most 16)")
    p.add_argument("--top", type=int, default=5, help="rows of the table per (shape, M)")
    p.add_argument("--min-gain", type=float, default=0.01,
                   help="keep the planner's default unless a candidate is this fraction faster (default 0.01)")
    p.add_argument("--stream-only", action="store_true", help="for M <= 16 time only stream-path candidates")
    p.add_argument("--only", default=None, choices=["x_ring", "x_smem", "fold", "bulk", "cluster", "balance", "occupancy",
                                                   "tail", "streamk"],
                   help="time only candidates with this option (plus the default and the plan chosen now)")
    p.add_argument("--file", default=None, help="tuning file to write (default: $HUMMING_TUNE_FILE or <cache>/tuning.json)")
    p.add_argument("--retime", type=int, default=4,
                   help="time the fastest N and the default again in rotated rounds before ranking (0: off)")
    p.add_argument("--no-record", action="store_true", help="only print; store nothing")
    p.add_argument("--json", default=None, help="also write every timing to this JSON file")
    moe = p.add_argument_group("mixture of experts", "tune the MoE GEMM of stacked experts (humming.moe_gemm)")
    moe.add_argument("--moe", action="store_true", help="tune mixture-of-experts GEMMs")
    moe.add_argument("--experts", type=positive_int, default=None, help="number of experts E (with --moe)")
    moe.add_argument("--top-k", type=positive_int, default=None, help="experts per token (with --moe)")
    moe.add_argument("--tokens", default="1,8,64,512,2048", help="comma-separated token counts (with --moe)")


def _row(rank, t, default_us) -> str:
    p, tl = t.plan, t.plan.tiles
    ratio = f"x{default_us / t.us:.2f}" if default_us else "-"
    kind = {"stream": "stream", "wgmma-rs": "rs", "moe-wgmma-rs": "rs"}.get(p.path, "tile")
    tile = f"{tl.bm}x{tl.bn}x{tl.bk}"
    o = tl.option
    options = ",".join(name for name, on in (
        ("x_ring", o("x_ring")), ("x_smem", o("x_smem")), (f"fold{o('fold')}", o("fold")), ("bulk", o("bulk")),
        (f"cluster{o('cluster')}", o("cluster")), (f"balance{o('balance')}", o("balance")),
        (f"raster{o('raster')}", o("raster")), (f"occupancy{o('occupancy')}", o("occupancy")),
        (f"prefetch{o('prefetch')}", o("prefetch")), (f"tail{o('tail')}", o("tail")),
        (f"streamk{o('streamk')}", o("streamk")), ("split-cluster", p.cluster_splits)) if on)
    return (f"  {rank:>4} {t.us:9.1f} {ratio:>7}  {kind:6} {tile:<12} {tl.stages:>6} "
            f"{tl.warps_m}x{tl.warps_n}x{tl.warps_k:<3} {p.splits:>5}  {options or '-'}")


_HEADER = "  rank   time us  vs def  path   tile         stages warps  split  options"


def main(args) -> int:
    from humming import tuner
    from humming.cli._args import parse_ms, parse_shapes, unique
    from humming.core.tuning import entries as tuning

    if args.moe:
        return _main_moe(args)
    shapes = unique(parse_shapes(args.shapes))
    ms = unique(parse_ms(args.m))
    for n, k in shapes:
        tuner.tunable_shape(n, k)  # ShapeError -> exit status 2 with the message, before looking for a GPU
    tuner.require_gpu("`python -m humming tune`")  # UnsupportedOnDevice -> exit status 2 with the message

    from humming.core.problem import scheme_of

    scheme = scheme_of(args.scheme)
    if args.group_size is not None:
        scheme = scheme.with_(group_size=args.group_size)
    target = tuning.tune_file() if args.file is None else args.file
    dump = []
    for n, k in shapes:
        results = tuner.tune_layer(scheme, n, k, ms, dtype=args.dtype, reps=args.reps, jobs=args.jobs,
                                   include_tile_for_stream=not args.stream_only, only=args.only,
                                   retime_top=args.retime, progress=lambda text: print(text, flush=True))
        for res in results:
            d_us = res.default.us
            win = res.winner(args.min_gain)
            _report(res, args, f"{n}x{k} M={res.m}")
            dump.append({"n": n, "k": k, "m": res.m, "scheme": res.scheme, "device": res.device,
                         "default_us": d_us, "winner_us": win.us,
                         "rows": [{"us": t.us, "path": t.plan.path, "tiles": t.plan.tiles.__dict__,
                                   "splits": t.plan.splits} for t in res.timings],
                         "failed": [{"kernel": t.plan.kernel_name, "error": t.error} for t in res.failed]})
            if args.no_record:
                continue
            if res.emulated:
                print("  not recorded: the profile's kernels ran compiled for another GPU (HUMMING_DEVICE_PROFILE)",
                      file=sys.stderr)
                continue
            key = tuning.record(win.plan, win.us, device=res.device, default_us=d_us, path=target)
            print(f"  recorded {key}: {win.plan.path}, {win.us:.1f} us -> {target}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)
    return 0


def _report(res, args, label: str) -> None:
    """The result table of one (shape, M or tokens)."""
    from humming.core.tuning import entries as tuning

    d_us = res.default.us
    print(f"{label} (bucket {tuning.m_bucket(res.m)}): default {'failed' if d_us is None else f'{d_us:.1f} us'}, "
          f"best {res.best.us:.1f} us" + (f" (x{d_us / res.best.us:.2f})" if d_us else ""))
    print(_HEADER)
    for i, t in enumerate(res.timings, 1):
        if i <= max(1, args.top) or t is res.default:  # the default's row is always shown
            print(_row(i, t, d_us) + ("   <- default" if t is res.default else ""))
    if res.failed:
        print(f"  {len(res.failed)} candidate(s) failed; first: {res.failed[0].error}")
        for t in [t for t in res.failed if t.error.startswith("wrong result")][:10]:
            print(f"  WRONG {t.plan.kernel_name}: {t.error}")


def _main_moe(args) -> int:
    from humming import moe_tuner, tuner
    from humming.cli._args import parse_ms, parse_shapes, unique
    from humming.core.tuning import entries as tuning
    from humming.errors import ShapeError

    if args.experts is None or args.top_k is None:
        raise ShapeError("--moe needs --experts E and --top-k K")
    if args.top_k > args.experts:
        raise ShapeError(f"--top-k {args.top_k} is more than --experts {args.experts}")
    shapes = unique(parse_shapes(args.shapes))
    tokens = unique(parse_ms(args.tokens))
    tuner.require_gpu("`python -m humming tune --moe`")
    target = tuning.tune_file() if args.file is None else args.file
    dump = []
    for n, k in shapes:
        results = moe_tuner.tune_moe(args.scheme, args.experts, args.top_k, n, k, tokens, dtype=args.dtype,
                                     group_size=args.group_size, reps=args.reps, retime_top=args.retime,
                                     progress=lambda text: print(text, flush=True))
        for res in results:
            _report(res, args, f"MoE E={args.experts} top-{args.top_k} {n}x{k} T={res.m}")
            win = res.winner(args.min_gain)
            dump.append({"n": n, "k": k, "tokens": res.m, "experts": args.experts, "top_k": args.top_k,
                         "scheme": res.scheme, "device": res.device, "default_us": res.default.us,
                         "winner_us": win.us, "rows": [{"us": t.us, "path": t.plan.path, "tiles": t.plan.tiles.__dict__,
                                                       "splits": t.plan.splits} for t in res.timings],
                         "failed": [{"kernel": t.plan.kernel_name, "error": t.error} for t in res.failed]})
            if args.no_record or res.emulated:
                continue
            key = tuning.record(moe_tuner.keyed(win.plan), win.us, device=res.device, default_us=res.default.us,
                                path=target, moe=(args.experts, args.top_k))
            print(f"  recorded {key}: {win.plan.path}, {win.us:.1f} us -> {target}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dump, f, indent=1)
    return 0
