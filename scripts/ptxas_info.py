"""Registers, spills and shared memory of a planned kernel, from ptxas (through NVRTC), without a GPU.

    python scripts/ptxas_info.py --scheme w4a16 --n 8192 --k 8192 --ms 1,16 [--profile nvidia-h200]
"""
from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming.api import resolve_profile, source  # noqa: E402
from humming.core.compile.compiler import compile_cuda  # noqa: E402
from humming.devices import get_backend  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--profile", default="nvidia-h200")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--ms", default="1,16")
    ap.add_argument("--act", default="f16")
    args = ap.parse_args()
    for m in map(int, args.ms.split(",")):
        p = humming.plan(args.scheme, m=m, n=args.n, k=args.k, profile=args.profile, act=args.act)
        caps = resolve_profile(args.profile)
        route = get_backend(caps).compile_route(caps)
        mod = compile_cuda(source(p), [p.kernel_name], route.arch,
                           options=[*route.options, "--ptxas-options=-v"], cache=False)
        info = " ".join(re.findall(r"(Used \d+ registers|\d+ bytes spill stores|\d+ bytes spill loads|\d+ bytes stack frame)", mod.log))
        print(f"M={m}: {p.kernel_name}: {info or mod.log.strip()[:300]}")


if __name__ == "__main__":
    main()
