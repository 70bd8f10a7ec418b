"""The main loop of a planned kernel in SASS, without a GPU: compile the plan's source with NVRTC for the profile's
target, disassemble the CUBIN with cuobjdump and count the instructions of the loop that holds the tensor-core
instructions (the innermost backward branch around them), by opcode. A kernel's time can follow that count (in the
register-A W4A8 kernel at M=4096 about 0.15% per instruction per stage), so it is a quick check of a generator change.

    python scripts/sass_loop.py --scheme w4a8-fp8 --m 4096 --n 8192 --k 8192 [--knob register_a8.streamk=132]
        [--option fast_accum=true] (tuning knobs / GemmOptions fields in force while planning; JSON values)
        (--scheme NAME:channel: the scheme with per-channel scales)
        [--profile nvidia-h200] [--save /tmp/kernel] (writes .cu, .cubin and .sass there) [--variant V] (an ablation of
        scripts/ablate.py applied to the source first)

cuobjdump: the CUDA toolkit's, or the wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm unpacked (chmod +x their
bin/ files); found on PATH or given by CUOBJDUMP=/path/to/cuobjdump.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

_LINE = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(.*?);", re.M)
_MMA = re.compile(r"\b(?:[QHI]GMMA|HMMA|IMMA|QMMA|UTCHMMA|UTCQMMA|UTCIMMA|UTCOMMA)\b")


def main_loop(sass: str) -> tuple[list[str], int]:
    """The instructions of the innermost loop around the first tensor-core instruction (a backward branch after it
    to before it), and the highest vector register the kernel names."""
    lines = [(int(a, 16), text) for a, text in _LINE.findall(sass)]
    mma = [a for a, text in lines if _MMA.search(text)]
    if not mma:
        raise SystemExit("no tensor-core instruction in the SASS")
    best = None
    for a, text in lines:
        target = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if target and a > mma[0] and int(target.group(1), 16) <= mma[0]:
            span = (int(target.group(1), 16), a)
            if best is None or span[1] - span[0] < best[1] - best[0]:
                best = span
    if best is None:
        raise SystemExit("no loop around the tensor-core instructions")
    body = [re.sub(r"^@!?U?P\w+\s+", "", text) for a, text in lines if best[0] <= a <= best[1]]
    top = max((int(r) for r in re.findall(r"\bR(\d+)\b", sass)), default=0)
    return body, top


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
    ap.add_argument("--scheme", default="w4a8-fp8")
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--k", type=int, default=8192)
    ap.add_argument("--profile", default="nvidia-h200")
    ap.add_argument("--knob", nargs="+", action="extend", default=[], help="NAME=VALUE tuning knobs in force while planning (JSON)")
    ap.add_argument("--option", nargs="+", action="extend", default=[], help="NAME=VALUE humming.GemmOptions fields (JSON)")
    ap.add_argument("--save", default="", help="path prefix for the .cu, .cubin and .sass")
    ap.add_argument("--variant", default="", help="an ablation of scripts/ablate.py applied to the source")
    args = ap.parse_args()

    import humming
    from humming.api import resolve_profile, source
    from humming.core.compile.compiler import compile_cuda
    from humming.core.tuning import knobs
    from humming.devices import get_backend

    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        raise SystemExit("cuobjdump not found: put it on PATH or set CUOBJDUMP (see the module docstring)")
    name, _, form = args.scheme.partition(":")  # NAME:channel: the scheme's per-channel form
    scheme = humming.schemes.get(name)
    if form == "channel":
        scheme = scheme.with_(granularity="channel", group_size=None)
    elif form:
        raise SystemExit(f"--scheme {args.scheme}: only NAME:channel is understood")
    overrides, options = assignments(args.knob), humming.GemmOptions(**assignments(args.option))
    caps = resolve_profile(args.profile)
    with knobs.override(overrides):  # (the generators read some knobs too)
        plan = humming.plan(scheme, m=args.m, n=args.n, k=args.k, profile=args.profile, options=options)
        text = source(plan, caps)
    route = get_backend(caps).compile_route(caps)
    if args.variant:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from ablate import apply

        try:
            text = apply(args.variant, text)
        except KeyError as exc:
            raise SystemExit(f"--variant {args.variant}: not applicable to {plan.kernel_name}: {exc}") from None
    mod = compile_cuda(text, [plan.kernel_name], route.arch, options=[*route.options, "--ptxas-options=-v"],
                       cache=False)
    prefix = args.save or os.path.join(tempfile.mkdtemp(), "kernel")
    with open(prefix + ".cu", "w") as f:
        f.write(text)
    with open(prefix + ".cubin", "wb") as f:
        f.write(mod.cubin)
    sass = subprocess.run([tool, "-sass", prefix + ".cubin"], capture_output=True, text=True, check=True).stdout
    with open(prefix + ".sass", "w") as f:
        f.write(sass)
    body, top = main_loop(sass)
    ops = Counter(t.split()[0].split(".")[0] for t in body)
    ptxas = " ".join(re.findall(r"(Used \d+ registers|\d+ bytes spill stores)", mod.log))
    print(f"{plan.kernel_name} ({route.arch}; ptxas: {ptxas}; highest register R{top})")
    print(f"main loop: {len(body)} instructions: " + ", ".join(f"{op} {n}" for op, n in ops.most_common()))
    for line in mod.log.splitlines():  # ptxas warnings (e.g. serialized wgmmas: "Potential Performance Loss")
        if "warning" in line.lower() or "performance" in line.lower():
            print("ptxas:", line.strip())
    print(f"files: {prefix}.cu / .cubin / .sass")


if __name__ == "__main__":
    main()
