"""Run one humming GEMM a few times (for ncu / compute-sanitizer): python scripts/profile_one.py SCHEME M N K"""
import sys

import torch

import humming

scheme, m, n, k = sys.argv[1], *map(int, sys.argv[2:5])
qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
x = torch.randn(m, k, device="cuda", dtype=torch.float16)
for _ in range(3):
    y = humming.gemm(x, qw)
torch.cuda.synchronize()
print("ok", y.shape)
