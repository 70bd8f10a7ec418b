"""A/B on the GPU: the two register-A wgmma W4A16 forms at the same M (the small one-warpgroup form that the runtime
runs below M 1024, and the two-warpgroup prefill form with its producer warpgroup), CUDA-graph replay over weight
copies past the L2, each output checked against the reference. Prints one line per (shape, M) and writes JSON.

    python scripts/ab_register_a_forms.py --ms 128,256,512 [--shapes 8192x8192,28672x8192] [--out DIR]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming import api  # noqa: E402
from humming.core.families.register_a import planner as rs  # noqa: E402
from humming.tuner import copies_for, graph_time_us  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from results import save_rows  # noqa: E402


def _form_handle(base: int, small: bool) -> int:
    prep = api._registry[base]

    def plan_fn(m: int):
        return rs.plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, "f16", scheme="w4a16", small=small)

    return api._register(prep.packed, prep.caps, prep.run_arch, plan_fn, scheme="w4a16")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="128,256,512")
    ap.add_argument("--shapes", default="8192x8192,28672x8192,4096x14336")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16") for _ in range(copies_for(n * k // 2))]
        dev = torch.device("cuda", torch.cuda.current_device())
        bases = [api.prepared(q, torch.float16, dev) for q in qws]
        forms = {"default": bases, "small": [_form_handle(b, True) for b in bases],
                 "prefill": [_form_handle(b, False) for b in bases]}
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
            row = {"n": n, "k": k, "m": m}
            for name, handles in forms.items():
                p = api.plan_for(handles[0], m)
                out = api.gemm_prepared(x, handles[0]).double()
                row[f"{name}_err"] = float((out - ref).norm() / ref.norm())
                row[f"{name}_us"] = graph_time_us([lambda h=h, x=x: api.gemm_prepared(x, h) for h in handles])
                row[f"{name}_kernel"] = p.kernel_name
            rows.append(row)
            print(f"{n}x{k} M={m}: default {row['default_us']:.1f} us ({row['default_kernel']}), small "
                  f"{row['small_us']:.1f}, prefill {row['prefill_us']:.1f} ({row['prefill_kernel']}); errors "
                  f"{row['default_err']:.1e} {row['small_err']:.1e} {row['prefill_err']:.1e}", flush=True)
        del qws, bases, forms
        torch.cuda.empty_cache()
    save_rows(args.out, "ab_register_a_forms.json", rows)


if __name__ == "__main__":
    main()
