"""`python -m humming build`: precompile the kernels of a model's layers ahead of time.

    python -m humming build --model-config llama-3-8b/config.json --scheme w4a16
    python -m humming build --shapes 4096x4096,14336x4096 --profile nvidia-h200 --jobs 8
    python -m humming build --shapes 8192x8192 --profile nvidia-h200 --decode    # M <= 64 only

Plans every layer shape for every M of the M buckets (default: all, decode and prefill), compiles the
distinct kernels in parallel through the kernel cache, and prints a progress bar and a summary. A second
build, and the runtime's first calls, then find every kernel in the cache. Without a GPU, ``--profile``
names the target (kernels are compiled for the profile's architecture).
"""
from __future__ import annotations

import json
import os
import sys
import time

from humming.cli._args import positive_int

HELP = "precompile the kernels of a model's layer shapes (all M buckets) into the kernel cache"


def add_arguments(p) -> None:
    p.add_argument("--shapes", default=None, help="NxK,... (output x input features)")
    p.add_argument("--model-config", default=None, help="a HuggingFace config.json of a Llama-like decoder, dense or "
                   "mixture-of-experts (Qwen3-MoE, Mixtral, gpt-oss; DeepSeek-V3's experts and dense MLPs)")
    p.add_argument("--fused", action="store_true", help="with --model-config: fused qkv and gate_up GEMMs (vLLM)")
    p.add_argument("--scheme", default="w4a16", help="preset or scheme string (see humming.schemes.names())")
    p.add_argument("--group-size", type=positive_int, default=None)
    p.add_argument("--profile", default=None, help="target profile (default: this device or HUMMING_DEVICE_PROFILE)")
    p.add_argument("--dtype", default="f16", choices=["f16", "bf16"], help="activation type")
    p.add_argument("--m", default=None,
                   help="comma-separated M values; every M of their buckets is built (default: every bucket)")
    p.add_argument("--exact", action="store_true", help="build only the M values given with --m, not their buckets")
    p.add_argument("--decode", action="store_true",
                   help="only the decode buckets (M <= 64): what a layer's first call compiles (HUMMING_PRECOMPILE)")
    p.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: CPUs, at most 16)")


class _Bar:
    """A plain-text progress bar: redrawn in place on a terminal, one line per kernel otherwise."""

    def __init__(self, stream=None, width: int = 30):
        self.stream = stream or sys.stdout
        self.width = width
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.perf_counter()
        self.hits = 0

    def __call__(self, done: int, total: int, name: str, hit: bool) -> None:
        self.hits += int(hit)
        filled = self.width * done // max(total, 1)
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} kernels, {self.hits} cached, "
                f"{time.perf_counter() - self.t0:5.1f} s  {name}{' (cache hit)' if hit else ''}")
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if done == total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _describe_ms(args, m_values) -> str:
    if args.decode:
        return f"M 1-{max(m_values)} (decode buckets)"
    if args.exact:
        return "M " + ",".join(map(str, m_values))
    return f"{len(m_values)} M values (buckets of {args.m or 'all'})"


def main(args) -> int:
    from humming import aot, api
    from humming.cli._args import parse_ms, parse_shapes
    from humming.core.compile import cache
    from humming.errors import ShapeError, UnsupportedOnDevice

    named: list[tuple[str, int, int]] = []
    experts: list[tuple[str, int, int, int, int]] = []
    if args.model_config:
        try:
            with open(args.model_config) as f:
                config = json.load(f)
        except (OSError, ValueError) as exc:
            raise ShapeError(f"cannot read the model config {args.model_config}: {exc}") from None
        named += aot.model_shapes(config, fused=args.fused)
        experts = aot.moe_shapes(config)
    if args.shapes:
        named += [("--shapes", n, k) for n, k in parse_shapes(args.shapes)]
    if not named:
        raise ShapeError("nothing to build: give --shapes NxK,... or --model-config path/to/config.json")
    from humming.core.problem import scheme_of

    scheme = scheme_of(args.scheme)
    if args.group_size is not None:
        scheme = scheme.with_(group_size=args.group_size)
    shapes = aot.unique_shapes(named)
    ms = parse_ms(args.m) if args.m else None
    if args.decode:
        if ms is not None:
            raise ShapeError("--decode and --m exclude each other")
        from humming.core.runtime.precompile import precompile_ms

        ms, args.exact = precompile_ms("decode"), True
    if args.exact and ms is None:
        raise ShapeError("--exact needs --m")
    try:
        caps = api.resolve_profile(args.profile)  # early, so that a missing device is said before any work
    except UnsupportedOnDevice as exc:
        raise UnsupportedOnDevice(f"{exc}; or name the target with --profile NAME") from None
    for (n, k), names in shapes:
        print(f"  {n}x{k}: {', '.join(names)}")
    for name, n, k, e, top_k in experts:
        print(f"  {n}x{k} x {e} experts, top-{top_k}: {name} (MoE)")
    m_values = aot.ms_for(ms, args.exact)
    print(f"building {scheme} ({args.dtype}) on {caps.name} for {len(shapes)} layer shape(s)"
          + (f" and {len(experts)} MoE GEMM(s)" if experts else "") + " x "
          f"{_describe_ms(args, m_values)}, "
          f"{args.jobs or min(16, os.cpu_count() or 1)} job(s)", flush=True)
    report = aot.build_kernels([s for s, _ in shapes], scheme, caps if args.profile else None, ms, act=args.dtype,
                               exact=args.exact, jobs=args.jobs, progress=_Bar(),
                               moe=[(n, k, e, top_k) for _, n, k, e, top_k in experts])
    for (n, k), why in report.skipped_shapes:
        print(f"skipped {n}x{k}: {why}", file=sys.stderr)
    for name, why in report.failed:
        print(f"failed {name}: {why}", file=sys.stderr)
    print(f"built {report.kernels} kernel(s) for {report.profile} ({report.arch}): {report.compiled} compiled, "
          f"{report.cache_hits} cache hit(s), {len(report.failed)} failed; {report.seconds:.1f} s total "
          f"({report.compile_seconds:.1f} s of NVRTC summed over jobs); cache {cache.cache_dir()}")
    return 0 if report.ok else 1
