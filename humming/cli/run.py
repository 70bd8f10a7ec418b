"""`python -m humming run`: the main job. Quantize a layer, plan, compile and run it.

On a GPU: checks the kernel against the reference on fresh random data and times it against cuBLAS.
Without one: compiles the kernels for the chosen profile with NVRTC and runs the reference backend,
saying so.
"""
from __future__ import annotations

import time

from humming.cli._args import positive_int

HELP = "quantize a layer, plan, compile and run it (checked against the reference)"


def add_arguments(p) -> None:
    p.add_argument("--scheme", default="w4a16")
    p.add_argument("--profile", default=None, help="profile to plan for (default: this device; CPU default nvidia-h200)")
    p.add_argument("--n", type=positive_int, default=4096)
    p.add_argument("--k", type=positive_int, default=4096)
    p.add_argument("--m", type=positive_int, nargs="+", default=[1, 16, 128])
    p.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    p.add_argument("--seed", type=int, default=0)


def _rel(out, ref) -> float:
    return float((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30))


def _plan(api, qw, m, args, caps):
    """The plan of the kernel that runs this scheme on the profile, or None (after saying why)."""
    from humming.errors import UnsupportedOnDevice

    try:
        return api.plan(qw.scheme, m, args.n, args.k, profile=caps, act=args.dtype)
    except UnsupportedOnDevice as exc:
        if not qw.scheme.act:
            raise
        print(f"  M={m}: {exc}")
        return None


def main(args) -> int:
    import torch

    import humming
    from humming import api
    from humming.core.compile.compiler import compile_cuda
    from humming.devices import get_backend

    torch.manual_seed(args.seed)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    gpu = torch.cuda.is_available()
    profile = args.profile
    if profile is None and not gpu:
        profile = "nvidia-h200"
    caps = api.resolve_profile(profile)
    device = "cuda" if gpu else "cpu"
    print(f"humming {humming.__version__}: scheme {args.scheme}, layer {args.n}x{args.k}, {args.dtype}, "
          f"profile {caps.name} ({caps.target.arch}), {'GPU ' + torch.cuda.get_device_name() if gpu else 'no GPU'}")
    t0 = time.perf_counter()
    w = torch.randn(args.n, args.k, device=device) * 0.05
    qw = humming.quantize(w, args.scheme)
    print(f"quantized in {time.perf_counter() - t0:.3f} s: {qw}")
    for m in args.m:
        plan = _plan(api, qw, m, args, caps)
        if plan is None:  # a planned path whose kernel is not generated yet: the reference runs it
            x = torch.randn(m, args.k, device=device, dtype=dtype)
            out = humming.reference_gemm(x, qw)
            print(f"  ran the reference backend instead; output {tuple(out.shape)} {out.dtype}")
            continue
        print(plan.explain())
        x = torch.randn(m, args.k, device=device, dtype=dtype)
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        if not gpu:
            route = get_backend(caps).compile_route(caps)
            mod = compile_cuda(api.source(plan, caps), [plan.kernel_name], route.arch, min_nvrtc=route.min_nvrtc)
            print(f"  compiled for {mod.arch} (NVRTC {mod.nvrtc_version[0]}.{mod.nvrtc_version[1]}): {len(mod.cubin)} B, "
                  f"{mod.original_compile_seconds:.2f} s{' (cache hit)' if mod.cache_hit else ''}")
            out = humming.gemm(x, qw)  # CPU tensors: the reference backend
            print(f"  no GPU: ran the reference backend; output {tuple(out.shape)} {out.dtype}, "
                  f"|y| = {float(out.float().norm()):.3f}")
            continue
        out = humming.gemm(x, qw, profile=caps)
        torch.cuda.synchronize()
        err = _rel(out, ref)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        w16 = qw.dequantize(dtype)
        timings = {}
        for name, fn in (("humming", lambda x=x: humming.gemm(x, qw, profile=caps)), ("cuBLAS", lambda x=x, w=w16: x @ w.t())):
            for _ in range(3):
                fn()
            start.record()
            for _ in range(50):
                fn()
            end.record()
            end.synchronize()
            timings[name] = start.elapsed_time(end) / 50 * 1000
        print(f"  M={m}: rel. error vs reference {err:.2e}; humming {timings['humming']:.1f} us, "
              f"cuBLAS {args.dtype} {timings['cuBLAS']:.1f} us (x{timings['cuBLAS'] / timings['humming']:.2f}; "
              f"eager launches, not graph replay)")
        if err > (1e-3 if args.dtype == "f16" else 5e-3):
            print("  ERROR: kernel disagrees with the reference")
            return 1
    return 0
