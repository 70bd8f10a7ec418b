"""GPU smoke test of every preset scheme through humming.gemm: the family the registry chose per M, and the relative
error against humming.reference_gemm (fresh random data, poisoned outputs). Prints one line per case and a summary.

    python scripts/smoke_gemm.py [--ms 1,16,128,1024] [--shape 4096x4096]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import humming  # noqa: E402
from humming.core.runtime import layer as layer_mod  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,16,100,128,300,1024")
    ap.add_argument("--shape", default="4096x4096")
    ap.add_argument("--schemes", default="")
    args = ap.parse_args()
    n, k = map(int, args.shape.split("x"))
    ms = [int(m) for m in args.ms.split(",")]
    names = args.schemes.split(",") if args.schemes else humming.schemes.names()
    layer_mod.POISON_OUTPUTS = True
    torch.manual_seed(0)
    worst, failed = 0.0, []
    for name in names:
        try:
            w = torch.randn(n, k, device="cuda") * 0.02
            qw = humming.quantize(w, name)
        except Exception as exc:  # noqa: BLE001
            print(f"{name:18s} quantize: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        for m in ms:
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            t0 = time.perf_counter()
            try:
                y = humming.gemm(x, qw)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001
                failed.append((name, m, f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))
                print(f"{name:18s} M={m:5d} FAILED {failed[-1][2][:160]}")
                continue
            ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
            err = float((y.float() - ref).norm() / ref.norm().clamp_min(1e-30))
            lay = humming.api._registry[qw._humming_prepared[next(iter(qw._humming_prepared))]]
            spec = lay.launches[m]
            fam = spec.plan.kernel_name
            worst = max(worst, err) if err == err else float("inf")
            flag = "" if err < 2e-2 else "  <-- LARGE"
            print(f"{name:18s} M={m:5d} {spec.inputs:9s} err {err:.2e} {fam} ({time.perf_counter() - t0:.2f} s){flag}")
            if not err < 2e-2:
                failed.append((name, m, f"error {err:.2e}"))
    print(f"\n{len(failed)} failed, worst error {worst:.2e}")
    for f in failed:
        print("  ", *f)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
