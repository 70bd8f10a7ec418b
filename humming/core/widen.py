"""Widened activations: W8A8 / W4A8 schemes on the weight-only kernels.

Activation codes of int8, e4m3 and e5m2 are exact in f16 and in bf16 (8 significant bits cover |int8| <= 127 and
every e4m3 / e5m2 value; the exponent ranges fit). So a scheme that quantizes activations per token (or per tensor)
can run as: quantize exactly as the reference does, widen the codes to the 16-bit activation type (exact), multiply
on the WnA16 kernel of the same weights (stream, tile or register-A wgmma), and apply the per-token scales in the
fp32 epilogue (``Plan.row_scale``: the kernel's GS parameter is then an fp32 vector [M]; a per-tensor scale stays
the device scalar GS). The result is the reference's ``dequant(x_q) @ dequant(W)^T`` up to fp32 summation order.

Why: the weight-only kernels stream the weights at decode sizes (M <= 16) at 2-3 TB/s, while the 8-bit tile
kernels were written for throughput; on the H200 the widened path was faster up to the M in ``DEFAULT_MAX_M``
(measured, see docs/performance.md). Above it the native 8-bit kernels (twice the tensor-core rate) stay.
"""
from __future__ import annotations

import os

import torch

from humming.errors import HummingError, UnsupportedOnDevice

ENV = "HUMMING_ACT_WIDEN"  # "0": never; "1": at every M; unset: up to DEFAULT_MAX_M
# Largest M that takes the widened path by default, by weight bits, for profiles whose native 8-bit kernels are
# wgmma (measured on the H200) and for the others (mma.sync 8-bit kernels: decode sizes only, where the
# stream kernel's weight bandwidth decides).
DEFAULT_MAX_M = {"wgmma": {4: 64, 8: 8}, "mma_sync": {4: 16, 8: 8}}
CODE_DTYPES = {"int8": torch.int8, "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


def refusal(scheme, n: int, k: int) -> str:
    """Why the scheme's activations cannot be widened onto the weight-only kernels ("" when they can)."""
    if scheme.act not in CODE_DTYPES:
        return f"{scheme.act} activation codes are not widened (int8, e4m3 and e5m2 are exact in 16 bits)"
    mode = scheme.act_scale.mode
    if mode not in ("dynamic_token", "static_tensor"):
        return f"{mode} activation scales vary along K (only per-token and per-tensor scales factor out of the sum)"
    if scheme.weight_scale.granularity == "block":
        return "128x128 weight blocks have no weight-only kernel"
    from humming.core.layout import layout_for

    try:
        layout_for(scheme.with_(act=None), n, k, "f16")
    except HummingError as exc:
        return f"the weight-only layout refuses it: {exc}"
    return ""


def native_refusal(caps, scheme) -> str:
    """Why the profile has no native kernel path for the scheme ("" when it has one): then the widened path takes
    every M (e.g. fp8 activations on a profile without fp8 tensor cores)."""
    from humming.core.paths import runnable_path

    try:
        runnable_path(caps, scheme)
    except UnsupportedOnDevice as exc:
        return str(exc)
    return ""


def max_m(caps, scheme) -> int | None:
    """The largest M that takes the widened path (None: every M; 0: never)."""
    env = os.environ.get(ENV, "")
    if env == "0":
        return 0
    if env == "1" or native_refusal(caps, scheme):
        return None
    from humming.core.formats import get as get_format

    table = DEFAULT_MAX_M["wgmma" if caps.find_mma(family="wgmma") else "mma_sync"]
    return table[8 if int(get_format(scheme.weight).bits) > 4 else 4]


_decided: dict[tuple, tuple[int | None, str]] = {}  # (profile, scheme, N, K, variable) -> (max_m, refusal)


def applies(caps, scheme, m: int, n: int, k: int) -> bool:
    """True when this call takes the widened path (decided once per profile, scheme, N, K and variable value: the
    hot path only compares M)."""
    key = (caps.name, str(scheme), n, k, os.environ.get(ENV, ""))
    decided = _decided.get(key)
    if decided is None:
        why = refusal(scheme, n, k)
        decided = _decided[key] = (0 if why else max_m(caps, scheme), why)
    limit = decided[0]
    return limit != 0 and (limit is None or m <= limit)


def act_dtype(caps, x_dtype: torch.dtype) -> torch.dtype:
    """bf16 for bf16 inputs where the profile has a bf16 MMA (the output range of the model's type), else f16."""
    if x_dtype == torch.bfloat16 and caps.find_mma(family="mma_sync", a_type="bf16", b_type="bf16", acc_type="f32"):
        return torch.bfloat16
    return torch.float16


def reason(caps, scheme, m: int) -> str:
    limit = max_m(caps, scheme)
    native = native_refusal(caps, scheme)
    scale = ("per-token scales applied per output row in the fp32 epilogue (row_scale)"
             if scheme.act_scale.mode == "dynamic_token" else "the per-tensor scale in the fp32 epilogue")
    text = (f"widened activations ({ENV}; {'every M' if limit is None else f'M <= {limit}'} here): {scheme.act} "
            f"codes quantized as the reference does, widened exactly to 16 bits, multiplied on the weight-only kernel "
            f"of the same weights; {scale}")
    return text + (f"; the only path here: {native.splitlines()[0]}" if native and limit is None else "")
