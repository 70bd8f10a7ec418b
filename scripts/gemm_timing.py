"""What the GPU scripts do for every case: weight copies past the L2, then a checked and timed `humming.gemm`."""
from __future__ import annotations

import torch

import humming  # whichever humming the caller's path holds (scripts/ab_trees.py points it at another tree)
from humming.tuner import copies_for, graph_time_us


def weight_copies(scheme: str, n: int, k: int) -> list:
    """Quantized random N x K weights, enough copies to stream past the L2 (the benchmark's method)."""
    return [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme) for _ in range(copies_for(n * k // 2))]


def reference(x: torch.Tensor, qw) -> torch.Tensor:
    return humming.reference_gemm(x, qw, out_dtype=torch.float32).double()


def error_and_time(x: torch.Tensor, qws: list, ref: torch.Tensor | None = None) -> tuple[float, float]:
    """(relative error of humming.gemm(x, qws[0]) against the reference, median us per GEMM over the copies)."""
    ref = reference(x, qws[0]) if ref is None else ref
    err = float((humming.gemm(x, qws[0]).double() - ref).norm() / ref.norm())
    return err, graph_time_us([lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws])
