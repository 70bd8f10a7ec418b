"""Registers, spills and stack of a planned kernel, from ptxas (through NVRTC), without a GPU.

    python scripts/ptxas_info.py --scheme w4a16 --n 8192 --k 8192 --ms 1,16 [--profile nvidia-h200] [--act bf16]
        [--knob register_a.prefetch=8] [--option fast_accum=true] (tuning knobs / GemmOptions fields; JSON values)
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming.api import resolve_profile, source  # noqa: E402
from humming.core.compile.compiler import compile_cuda  # noqa: E402
from humming.core.tuning import knobs  # noqa: E402
from humming.devices import get_backend  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--profile", default="nvidia-h200")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--act", default="f16")
    ap.add_argument("--knob", nargs="+", action="extend", default=[], help="NAME=VALUE tuning knobs in force while planning (JSON)")
    ap.add_argument("--option", nargs="+", action="extend", default=[], help="NAME=VALUE humming.GemmOptions fields (JSON)")
    args = ap.parse_args()
    overrides, options = assignments(args.knob), humming.GemmOptions(**assignments(args.option))
    caps = resolve_profile(args.profile)
    route = get_backend(caps).compile_route(caps)
    for m in map(int, args.ms.split(",")):
        with knobs.override(overrides):
            p = humming.plan(args.scheme, m=m, n=args.n, k=args.k, profile=args.profile, act=args.act,
                             options=options)
            text = source(p, caps)
        mod = compile_cuda(text, [p.kernel_name], route.arch, options=[*route.options, "--ptxas-options=-v"],
                           cache=False)
        info = " ".join(re.findall(r"(Used \d+ registers|\d+ bytes spill stores|\d+ bytes spill loads|\d+ bytes stack frame)", mod.log))
        print(f"M={m}: {p.kernel_name}: {info or mod.log.strip()[:300]}")


if __name__ == "__main__":
    main()
