"""Time the per-token FP8 activation quantization kernel alone (GPU), CUDA-graph replay over two inputs:

    python scripts/actquant_time.py [--loads 2,4,8]   (loads per thread of the block-per-row kernels; default: the
                                                       planner's BLOCK_LOADS_PER_THREAD)
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming import actquant as actquant_api  # noqa: E402
from humming.actquant import quantize_activation_cuda  # noqa: E402
from humming.core.actquant import generator as actquant_core  # noqa: E402
from humming.tuner import graph_time_us  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--loads", default=str(actquant_core.BLOCK_LOADS_PER_THREAD))
args = ap.parse_args()
sch = humming.schemes.get("w4a8-fp8")
for m, k in ((4096, 8192), (1024, 8192), (4096, 14336)):
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(2)]
    ref = quantize_activation_cuda(xs[0], sch)
    for loads in map(int, args.loads.split(",")):
        actquant_core.BLOCK_LOADS_PER_THREAD = loads
        actquant_api._prepared.clear()  # (its kernels are cached per shape, not per block size)
        plan = actquant_core.plan_actquant(sch, "f16", k)
        got = quantize_activation_cuda(xs[0], sch)
        same = torch.equal(got.codes.view(torch.uint8), ref.codes.view(torch.uint8)) and torch.equal(got.scales, ref.scales)
        t = graph_time_us([lambda x=x: quantize_activation_cuda(x, sch) for x in xs])
        mb = m * k * 3 / 1e6
        print(f"act quant fp8 per-token M={m} K={k} {loads} loads/thread ({plan.threads} threads): {t:.1f} us "
              f"({mb:.0f} MB moved: {mb / t:.2f} TB/s){'' if same else '  MISMATCH'}", flush=True)
    # the floor for the same traffic: torch's elementwise cast (reads x, writes one byte a value; no row amax, no
    # scale) and a plain copy of x, over the same inputs
    out8 = [torch.empty(m, k, device="cuda", dtype=torch.float8_e4m3fn) for _ in xs]
    t = graph_time_us([lambda x=x, o=o: o.copy_(x) for x, o in zip(xs, out8)])
    print(f"  floor: torch cast f16 -> e4m3 M={m} K={k}: {t:.1f} us ({mb / t:.2f} TB/s)", flush=True)
    cp = [torch.empty_like(x) for x in xs]
    t = graph_time_us([lambda x=x, o=o: o.copy_(x) for x, o in zip(xs, cp)])
    print(f"  floor: copy f16 M={m} K={k}: {t:.1f} us ({m * k * 4 / 1e6 / t:.2f} TB/s)", flush=True)
