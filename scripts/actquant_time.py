"""Time the per-token FP8 activation quantization kernel alone (GPU): python scripts/actquant_time.py"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming.actquant import quantize_activation_cuda  # noqa: E402
from humming.tuner import graph_time_us  # noqa: E402

sch = humming.schemes.get("w4a8-fp8")
for m, k in ((4096, 8192), (1024, 8192), (4096, 14336)):
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(2)]
    t = graph_time_us([lambda x=x: quantize_activation_cuda(x, sch) for x in xs])
    mb = m * k * 3 / 1e6
    print(f"act quant fp8 per-token M={m} K={k}: {t:.1f} us ({mb:.0f} MB moved: {mb / t:.2f} TB/s)")
