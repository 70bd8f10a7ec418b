"""Relative error of the stream kernel's fold option against fold off, per weight width (decode, M=1..8).

    python scripts/fold_precision.py [--trials 8]
Fold multiplies the raw codes (magic + q in the activation type) and subtracts (magic + zero) * sum(x) per
atom in fp32; this measures how much the cancellation costs for each width on the live GPU.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "gpu"))

import torch  # noqa: E402
from conftest import rel_error  # noqa: E402
from one_gemm import _force  # noqa: E402

import humming  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=8)
    args = ap.parse_args()
    cases = [("w2a16-zp", "uint1"), ("w2a16-zp", "uint2"), ("w2a16-zp", "uint3"), ("w4a16", "int4"),
             ("w4a16-zp", "uint4"), ("w8a16", "int8"), ("w2a16", "int2")]
    for dtype in (torch.float16, torch.bfloat16):
        for base, weight in cases:
            sch = humming.schemes.get(base).with_(weight=weight)
            row = {}
            for fold in (0, 1):
                for m in (1, 8):
                    errs = []
                    for _ in range(args.trials):
                        qw = humming.quantize(torch.randn(512, 2048, device="cuda") * 0.05, sch)
                        x = torch.randn(m, 2048, device="cuda", dtype=dtype)
                        try:
                            _force(qw, x, {"fold": fold})
                        except Exception as e:  # noqa: BLE001
                            errs = [float("nan")]
                            print("  cannot force", weight, fold, e)
                            break
                        y = humming.gemm(x, qw)
                        errs.append(rel_error(y, humming.reference_gemm(x, qw, out_dtype=torch.float32)))
                    row[f"fold{fold} M{m}"] = max(errs)
            print(str(dtype)[6:], f"{base}[{weight}]", "  ".join(f"{k} {v:.1e}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    os.environ.setdefault("HUMMING_FORCE_QUIET", "1")
    main()
