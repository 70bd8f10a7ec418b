"""Quantized-activation benchmark (issue 5): W8A8-FP8 vs cuBLASLt FP8 (torch._scaled_mm, row-wise scales),
W8A8-INT8 vs torch._int_mm, W4A8-FP8 / W4A8-INT8 vs cuBLAS fp16, on the shapes of shared/FACTS.md section 5.
Activation quantization is included in every quantized time (humming's and the baselines').

    python bench/bench_quantized.py --out OUTDIR [--ms 1,16,128,1024,4096] [--shapes 8192x8192,28672x8192]
        [--schemes w8a8-fp8,w8a8-int8] [--no-wgmma]
W8A8 and W4A8 schemes are also timed with HUMMING_WGMMA=1 (the wgmma kernels, M >= 64; columns "... wgmma";
W4A8 wgmma is compared with cuBLAS fp16), W8A8-FP8
also with HUMMING_WGMMA_FAST_ACCUM=1 (no fp32 promotion of partial sums; JSON key w8a8-fp8_wgmma_fast_us).
Same method as bench_wna16.py: CUDA-graph replay over weight copies rotated past L2, median.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming.tuner import copies_for, graph_time_us  # noqa: E402

SCHEMES = ["w8a8-fp8", "w8a8-int8", "w4a8-fp8", "w4a8-int8"]
# also timed with HUMMING_WGMMA=1 (M >= 64); w8a8-fp8-block only when asked for (--schemes)
WGMMA_SCHEMES = ["w8a8-fp8", "w8a8-int8", "w4a8-fp8", "w4a8-int8", "w8a8-fp8-block"]


def _fp8_rowwise(x: torch.Tensor):
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12)
    scale = amax / 448.0
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


def _int8_rowwise(x: torch.Tensor):
    amax = x.abs().amax(dim=-1, keepdim=True).float().clamp_min(1e-12)
    scale = amax / 127.0
    return torch.round(x.float() / scale).clamp(-127, 127).to(torch.int8), scale


def baselines(x: torch.Tensor, n: int, k: int) -> dict:
    """Times of cuBLAS fp16, cuBLASLt FP8 row-wise and torch._int_mm (with their activation quantization)."""
    m = x.shape[0]
    out = {}
    w16 = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.05 for _ in range(copies_for(n * k * 2))]
    out["cublas_fp16_us"] = graph_time_us([lambda w=w: x @ w.t() for w in w16])
    del w16
    w8 = [(torch.randn(n, k, device="cuda") * 0.05).to(torch.float8_e4m3fn) for _ in range(copies_for(n * k))]
    sb = torch.ones(1, n, device="cuda")

    def fp8(w):
        a, sa = _fp8_rowwise(x)
        return torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float16)

    try:
        out["cublaslt_fp8_rowwise_us"] = graph_time_us([lambda w=w: fp8(w) for w in w8])
    except (RuntimeError, TypeError) as exc:
        out["cublaslt_fp8_rowwise_us"] = None
        out["cublaslt_fp8_error"] = str(exc).splitlines()[0]
    del w8
    if m > 16:
        wi = [torch.randint(-127, 128, (k, n), device="cuda", dtype=torch.int8) for _ in range(copies_for(n * k))]

        def int8(w):
            a, sa = _int8_rowwise(x)
            return (torch._int_mm(a, w).float() * sa).half()

        out["torch_int_mm_us"] = graph_time_us([lambda w=w: int8(w) for w in wi])
        del wi
    torch.cuda.empty_cache()
    return out


def _time_scheme(row: dict, scheme: str, key: str, qws: list, x: torch.Tensor) -> None:
    """row[key_us]: graph-replay time of humming.gemm over the weight copies; row[key_err]: error vs reference."""
    try:
        for qw in qws:
            humming.gemm(x, qw)  # plan, compile, prepare outside the graph
        row[f"{key}_us"] = graph_time_us([lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws])
        ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
        row[f"{key}_err"] = float((humming.gemm(x, qws[0]).double() - ref).norm() / ref.norm())
    except humming.HummingError as exc:
        row[f"{key}_us"] = None
        row[f"{key}_why"] = str(exc).splitlines()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--ms", default="1,16,128,1024,4096")
    ap.add_argument("--shapes", default="8192x8192,28672x8192")
    ap.add_argument("--schemes", default=",".join(SCHEMES))
    ap.add_argument("--no-wgmma", action="store_true", help="skip the HUMMING_WGMMA=1 (wgmma kernel) timings")
    args = ap.parse_args()
    rows = []
    os.environ["HUMMING_WGMMA"] = "0"  # the plain columns time the mma.sync kernels; wgmma columns switch it on
    for shape in args.shapes.split(","):
        n, k = map(int, shape.split("x"))
        weights = {s: [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, s) for _ in range(copies_for(n * k))]
                   for s in args.schemes.split(",")}
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.float16)
            row = {"n": n, "k": k, "m": m, **baselines(x, n, k)}
            for s, qws in weights.items():
                _time_scheme(row, s, s, qws, x)
                if s in WGMMA_SCHEMES and m >= 64 and not args.no_wgmma:
                    os.environ["HUMMING_WGMMA"] = "1"
                    try:
                        _time_scheme(row, s, f"{s}_wgmma", qws, x)
                        if s == "w8a8-fp8":  # without the fp32 promotion of partial sums (BN 256 allowed)
                            os.environ["HUMMING_WGMMA_FAST_ACCUM"] = "1"
                            _time_scheme(row, s, f"{s}_wgmma_fast", qws, x)
                    finally:
                        os.environ["HUMMING_WGMMA"] = "0"  # the plain columns: the mma.sync kernels
                        os.environ.pop("HUMMING_WGMMA_FAST_ACCUM", None)
            rows.append(row)
            print(json.dumps(row), flush=True)
        del weights
        torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    with open(os.path.join(args.out, "bench_quantized.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\n| N x K | M | fp16 | FP8 cuBLASLt | int_mm | W8A8-FP8 | W8A8-INT8 | W4A8-FP8 | W4A8-INT8 |"
          " W8A8-FP8 wgmma | wgmma / cuBLASLt | FP8 wgmma fast-accum | fast / cuBLASLt | W8A8-INT8 wgmma |"
          " wgmma / int_mm | W4A8-FP8 wgmma | / fp16 | W4A8-INT8 wgmma | / fp16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def f(v):
        return "-" if v is None else f"{v:.1f}"

    def speedup(base, v):  # > 1: humming faster
        return "-" if base is None or v is None else f"{base / v:.2f}x"

    for r in rows:
        fp8w, i8w = r.get("w8a8-fp8_wgmma_us"), r.get("w8a8-int8_wgmma_us")
        fast = r.get("w8a8-fp8_wgmma_fast_us")
        w4f, w4i = r.get("w4a8-fp8_wgmma_us"), r.get("w4a8-int8_wgmma_us")
        print(f"| {r['n']}x{r['k']} | {r['m']} | {f(r['cublas_fp16_us'])} | {f(r.get('cublaslt_fp8_rowwise_us'))} | "
              f"{f(r.get('torch_int_mm_us'))} | " + " | ".join(f(r.get(f'{s}_us')) for s in SCHEMES) + " | "
              f"{f(fp8w)} | {speedup(r.get('cublaslt_fp8_rowwise_us'), fp8w)} | "
              f"{f(fast)} | {speedup(r.get('cublaslt_fp8_rowwise_us'), fast)} | "
              f"{f(i8w)} | {speedup(r.get('torch_int_mm_us'), i8w)} | "
              f"{f(w4f)} | {speedup(r['cublas_fp16_us'], w4f)} | {f(w4i)} | {speedup(r['cublas_fp16_us'], w4i)} |")

if __name__ == "__main__":
    main()
