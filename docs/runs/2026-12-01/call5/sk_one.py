"""One stream-K launch, for compute-sanitizer: python sk_one.py M BT BLOCKS [N K]"""
import sys

import torch

import humming
from humming import api
from humming.core.planner_wgmma_rs import plan_wna16_wgmma_rs

m, bt, blocks = (int(v) for v in sys.argv[1:4])
n, k = (int(v) for v in sys.argv[4:6]) if len(sys.argv) > 5 else (1024, 4096)
torch.manual_seed(0)
qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
handle = api.prepared(qw, torch.float16, torch.device("cuda", 0))
prep = api._registry[handle]
p = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, "f16", scheme="", bt=bt, small=False, streamk=blocks)
print(p.kernel_name, p.grid, p.smem_bytes, p.tiles, flush=True)
prep.plans[m] = p
x = torch.randn(m, k, device="cuda", dtype=torch.float16)
out = api.gemm_prepared(x, handle)
torch.cuda.synchronize()
ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
print("rel err", float((out.float() - ref).norm() / ref.norm()))
