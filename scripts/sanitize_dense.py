"""One small plan of every dense kernel family and form, each once on random data against the reference: the program
compute-sanitizer runs (memcheck, racecheck, initcheck, synccheck) over the stream kernel (register ring, x ring,
cluster splits), the tile kernel (whole atoms and a padded weight), the register-A wgmma forms (small, 64 rows,
two-warpgroup, stream-K; e2m1 codes with the knob that takes them), the 8-bit kernels (mma.sync, wgmma, 128x128 blocks, W4A8), the widened and upconvert routes
and the activation-quantization kernels they run first. Prints each case's kernel, so the coverage shows.

    compute-sanitizer --tool memcheck --report-api-errors no python scripts/sanitize_dense.py [--only NAME,...]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming.core.runtime import layer as layer_mod  # noqa: E402
from humming.core.tuning import knobs  # noqa: E402

# (name, scheme, M, N, K): the forms the registry picks for these on an H100 / H200 (the printed kernel names say
# which ran)
CASES = [
    ("stream", "w4a16", 1, 512, 1024), ("stream-cluster", "w4a16", 1, 2048, 2048), ("stream-xring", "w8a16", 1, 512, 1024),
    ("stream-16", "w8a16", 16, 512, 1024),
    ("register-a-small", "w4a16", 16, 512, 1024), ("register-a-64", "w4a16", 64, 2048, 2048),
    ("register-a-112", "w4a16", 300, 512, 1024), ("register-a-2wg", "w4a16", 1024, 512, 1024),
    # stream-K (one persistent block per SM), in clusters of two blocks and alone; small enough for racecheck (a
    # 4096^3 GEMM did not finish under it in 200 s)
    ("register-a-streamk", "w4a16", 1024, 4352, 512), ("register-a-streamk-1", "w4a16", 768, 4352, 512),
    ("tile-64", "w8a16", 64, 512, 1024), ("tile-128", "w4a16-nvfp4", 300, 512, 1024),
    ("tile-padded-decode", "w4a16[group_size=32]", 5, 1008, 1056), ("tile-padded", "w4a16-zp[group_size=32]", 300, 208, 96),
    ("w8a8-mma", "w8a8-int8", 16, 512, 1024), ("w8a8-wgmma", "w8a8-fp8", 300, 512, 1024),
    ("w8a8-block-mma", "w8a8-fp8-block", 16, 512, 1024), ("w8a8-block-wgmma", "w8a8-fp8-block", 300, 512, 1024),
    ("w4a8-wgmma", "w4a8-fp8", 1024, 2048, 2048), ("w4a8-mxfp4-wgmma", "w4a8-mxfp4", 300, 512, 1024),
    ("widened", "w4a8-int8", 16, 512, 1024), ("widened-padded", "w8a8-int8", 64, 1008, 2880),
    ("upconvert", "w4a4-nvfp4", 64, 512, 1024),
    ("register-a-e2m1-small", "w4a16-mxfp4", 16, 512, 1024), ("register-a-e2m1-2wg", "w4a16-nvfp4", 1024, 512, 1024),
]
# the tuning knobs of the cases that run a layout off by default (humming.core.tuning.knobs)
CASE_KNOBS = {"register-a-e2m1-small": {"register_a.any_group": True},
              "register-a-e2m1-2wg": {"register_a.any_group": True}}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    layer_mod.POISON_OUTPUTS = True
    bad = 0
    for name, scheme, m, n, k in CASES:
        if only and name not in only:
            continue
        torch.manual_seed(len(name))
        try:
            with knobs.override(CASE_KNOBS.get(name, {})):  # (the plan is made in the first gemm call)
                qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
                bias = torch.randn(n, device="cuda", dtype=torch.float16)
                x = torch.randn(m, k, device="cuda", dtype=torch.float16)
                y = humming.gemm(x, qw, bias=bias)
                ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        except Exception as exc:  # noqa: BLE001  (the other cases still run under the sanitizer)
            bad += 1
            print(f"{name:20} {scheme:24} M={m:<5} {n}x{k:<5} FAILED {type(exc).__name__}: {str(exc).splitlines()[0]}")
            continue
        err = float((y.float() - ref).norm() / ref.norm().clamp_min(1e-30))
        ok = err < 1e-2 and not torch.isnan(y).any()
        bad += not ok
        lay = humming.api._registry[next(iter(qw._humming_prepared.values()))]
        print(f"{name:20} {scheme:24} M={m:<5} {n}x{k:<5} {lay.launches[m].plan.kernel_name}: "
              f"relative error {err:.2e} {'ok' if ok else 'WRONG'}")
    torch.cuda.synchronize()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
