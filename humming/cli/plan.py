"""`python -m humming plan`: show the execution plan (and optionally the generated CUDA) for a GEMM, or with
`--moe` for the mixture-of-experts GEMM of stacked experts."""
from __future__ import annotations

import json

from humming.cli._args import knob_assignment, positive_int

HELP = "plan a quantized GEMM for a profile: instructions, tiles, and why"


def add_arguments(p) -> None:
    p.add_argument("--scheme", default="w4a16", help="preset or scheme string (see humming.schemes.names())")
    p.add_argument("--m", type=positive_int, default=16)
    p.add_argument("--n", type=positive_int, default=4096)
    p.add_argument("--k", type=positive_int, default=4096)
    p.add_argument("--profile", default=None, help="profile name (default: this device or HUMMING_DEVICE_PROFILE)")
    p.add_argument("--act", default="f16", choices=["f16", "bf16"], help="activation type")
    p.add_argument("--group-size", type=positive_int, default=None)
    p.add_argument("--source", action="store_true", help="print the generated CUDA C++")
    p.add_argument("--compile", action="store_true", help="also compile it with NVRTC and report time and registers")
    p.add_argument("--json", action="store_true")
    p.add_argument("--knob", type=knob_assignment, action="append", default=[], metavar="NAME=VALUE",
                   help="a tuning knob for this plan (repeatable; `humming info --knobs` lists them), e.g. "
                        "moe.wgmma_8bit_min_rows=16 to see a kernel that is off by default")
    moe = p.add_argument_group("mixture of experts", "plan the MoE GEMM of stacked experts instead (humming.moe_gemm)")
    moe.add_argument("--moe", action="store_true", help="plan a mixture-of-experts GEMM")
    moe.add_argument("--experts", type=int, default=None, help="number of experts E (with --moe)")
    moe.add_argument("--top-k", type=int, default=None, help="experts per token (with --moe)")
    moe.add_argument("--tokens", type=int, default=None, help="tokens T (with --moe; default: --m)")
    moe.add_argument("--form", default=None, choices=["indexed", "grouped", "masked"],
                     help="how rows reach the experts (with --moe; default indexed): routed by index, contiguous per "
                          "expert, or a fixed capacity per expert")
    moe.add_argument("--act-order", action="store_true", default=None,
                     help="the experts are act-order (GPTQ desc_act: each its own column order; with --moe)")


def _no_moe_options(args) -> None:
    names = ("experts", "top_k", "tokens", "form", "act_order")
    given = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]
    if given:
        from humming.errors import ShapeError

        raise ShapeError(f"{', '.join(given)}: only with --moe (they describe a mixture-of-experts GEMM)")


def main(args) -> int:
    from humming.core.tuning import knobs

    with knobs.override(dict(args.knob)):
        return _main(args)


def _main(args) -> int:
    from humming import api

    if args.moe:
        from humming.cli.moe_plan import moe_plan

        plan = moe_plan(args)
    else:
        _no_moe_options(args)
        plan = api.plan(args.scheme, args.m, args.n, args.k, profile=args.profile, act=args.act,
                        group_size=args.group_size)
    if args.json:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print(plan.explain())
    if args.source:
        print(api.source(plan))
    if args.compile:
        from humming.core.compile.compiler import compile_cuda
        from humming.core.runtime.compiled import check_registers
        from humming.devices import get_backend

        caps = api.resolve_profile(plan.profile)
        route = get_backend(caps).compile_route(caps)
        mod = compile_cuda(api.source(plan), [plan.kernel_name], route.arch, min_nvrtc=route.min_nvrtc)
        check_registers(mod.cubin, plan.kernel_name, caps)  # the profile's registers_per_thread
        print(f"compiled {plan.kernel_name} for {mod.arch} with NVRTC {mod.nvrtc_version[0]}.{mod.nvrtc_version[1]}: "
              f"{len(mod.cubin)} B cubin, {mod.original_compile_seconds:.2f} s"
              + (" (cache hit)" if mod.cache_hit else ""))
    return 0
