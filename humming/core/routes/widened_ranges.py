"""Widened activations: W8A8 / W4A8 schemes on the weight-only kernels.

Activation codes of int8, e4m3 and e5m2 are exact in f16 and in bf16 (8 significant bits cover |int8| <= 127 and
every e4m3 / e5m2 value; the exponent ranges fit). So a scheme that quantizes activations per token (or per tensor)
can run as: quantize exactly as the reference does, widen the codes to the 16-bit activation type (exact), multiply
on the WnA16 kernel of the same weights (stream, tile or register-A wgmma), and apply the per-token scales in the
fp32 epilogue (``Plan.row_scale``: the kernel's GS parameter is then an fp32 vector [M]; a per-tensor scale stays
the device scalar GS). The result is the reference's ``dequant(x_q) @ dequant(W)^T`` up to fp32 summation order.

Why: the weight-only kernels stream the weights at decode sizes (M <= 16) at 2-3 TB/s, while the 8-bit tile
kernels were written for throughput; on the H200 the widened path was faster in the M ranges of
``DEFAULT_M_RANGES`` (measured, see docs/performance.md). Elsewhere the native 8-bit kernels (twice the
tensor-core rate) stay; where a profile has no native path for the activation format (fp8 activations without
fp8 tensor cores: Ampere, Turing, the Zhenwu 810E) the widened path takes every M.
"""
from __future__ import annotations

import math

import torch

from humming.core.tuning import knobs
from humming.errors import HummingError, UnsupportedOnDevice

# M ranges that take the widened path by default, for profiles whose native 8-bit kernels are wgmma (measured on the
# H200, docs/performance.md) and for the others (mma.sync 8-bit kernels: decode sizes only, where the
# stream kernel's weight bandwidth decides); keyed by (weight width class, activation class). "4bit-rs8": int4
# weights the register-A W4A8 kernel takes (groups of 128 or per channel, no zero points): the ranges of
# ``rs8_ranges`` (M <= 64, and where that kernel's blocks would not fill the SMs); the entry here holds where N is not
# known. "4bit": other 4-bit layouts (the warp-specialised wgmma W4A8 kernel): widened 1.3-2.8x faster at M <= 64
# and 4-15% at M >= 1024 (fp8; int8 up to M = 2048). W8A8 (8-bit weights): widened faster up to M = 8 only.
OPEN = 1 << 30  # no upper bound
DEFAULT_M_RANGES = {
    "wgmma": {("4bit-rs8", "fp8"): ((1, 64),), ("4bit-rs8", "int8"): ((1, 64),),
              ("4bit", "fp8"): ((1, 64), (1024, OPEN)), ("4bit", "int8"): ((1, 64), (1024, 2048)),
              ("8bit", "fp8"): ((1, 8),), ("8bit", "int8"): ((1, 8),)},
    "mma_sync": {("4bit", "fp8"): ((1, 16),), ("4bit", "int8"): ((1, 16),),
                 ("8bit", "fp8"): ((1, 8),), ("8bit", "int8"): ((1, 8),)},
}
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
    from humming.core.families.mma_wna16.layout import layout_for

    try:
        layout_for(scheme.with_(act=None), n, k, "f16")
    except HummingError as exc:
        return f"the weight-only layout refuses it: {exc}"
    return ""


def native_refusal(caps, scheme) -> str:
    """Why the profile has no native kernel path for the scheme ("" when it has one): then the widened path takes
    every M (e.g. fp8 activations on a profile without fp8 tensor cores)."""
    from humming.core.families.runnable import runnable_path

    try:
        runnable_path(caps, scheme)
    except UnsupportedOnDevice as exc:
        return str(exc)
    return ""


def m_ranges(caps, scheme, n: int = 0, k: int = 0, act_widen: bool | None = None) -> tuple[tuple[int, int], ...] | None:
    """The M ranges that take the widened path (None: every M;: never); N and K (0: not known) tell whether the
    register-A W4A8 kernel takes the weights; ``act_widen`` (GemmOptions.act_widen) True: every M, False: never."""
    if act_widen is False:
        return ()
    if act_widen or native_refusal(caps, scheme):
        return None
    from humming.core.quant.formats import get as get_format

    family = "wgmma" if caps.find_mma(family="wgmma") else "mma_sync"
    width = "8bit" if int(get_format(scheme.weight).bits) > 4 else "4bit"
    if family == "wgmma" and width == "4bit" and _register_a_w4a8(caps, scheme, n, k):
        return rs8_ranges(caps, n, RS8_MIN_FILL_INT32_SUMS if _int32_sums(caps, scheme, k) else RS8_MIN_FILL)
    return DEFAULT_M_RANGES[family][(width, "int8" if scheme.act == "int8" else "fp8")]


RS8_MIN_FILL = 0.75  # the register-A W4A8 kernel's 128 x 128 blocks per SM below which the widened path takes over
# ... where that kernel accumulates exact int32 sums across stages (int8 activations, per-channel scales: no promotion,
# RegisterA8Tiles.direct), its blocks are ~1.6x cheaper and win from a lower fill. Measured on the H200 (scripts/ab_knobs.py act_widen None / False, W4A8-INT8 per channel, us, widened / native): 4096x14336 M128 (32
# blocks, 24%) 30.7 / 47.3, M200 (64, 48%) 52.2 / 48.6, M300 (96) 101.1 / 51.6, M384 (96) 94.2 / 52.0; 8192x8192
# M128 (64 blocks) 30.7 / 31.1, M200-384 native either way
RS8_MIN_FILL_INT32_SUMS = 0.45


def _int32_sums(caps, scheme, k: int) -> bool:
    """The register-A W4A8 kernel accumulates exact int32 sums across stages for this scheme
    (register_a8.planner.int32_sums_wanted)."""
    from humming.core.families.register_a8.layout import rs8_group
    from humming.core.families.register_a8.planner import int32_sums_wanted

    return scheme.act == "int8" and int32_sums_wanted("s8", rs8_group(scheme, k), k, caps)


def rs8_ranges(caps, n: int, fill: float = RS8_MIN_FILL) -> tuple[tuple[int, int], ...]:
    """Where int4 weights of the register-A W4A8 kernel take the widened path: M <= 64, every M whose 128-token x
    128-channel blocks (that kernel has no split-K) fill fewer than RS8_MIN_FILL of the SMs, and the M whose token tiles
    would hold fewer than RS8_MIN_TOKEN_SHARE tokens (_padded_rs8_ranges). Measured on the H200
    (W4A8-FP8 native / widened, us): 8192x8192 M128 (64 blocks) 57.8 / 48.7, M256 (128) 59.0 / 66.0;
    28672x8192 M128 (224) 116.7 / 123.5; 4096x14336 M128 (32) 92.2 / 47.4, M256 (64) 94.2 / 76.2, M512 (128) 99.1 /
    109.1; W4A8-INT8 alike (8192x8192 M128 52.0 / 47.9, 28672x8192 M128 104.3 / 123.8)."""
    sms = caps.limits.sms or 0
    tiles = n // 128
    if not (sms and tiles):
        return DEFAULT_M_RANGES["wgmma"][("4bit-rs8", "fp8")]
    token_tiles = max(0, -(-int(fill * sms) // tiles) - 1)  # most 128-token tiles with blocks < the fill
    first = max(64, 128 * token_tiles)
    from humming.core.families.register_a8.planner import MIN_M

    ranges = [(1, first), *_padded_rs8_ranges(caps, n, max(first + 1, MIN_M))]
    merged = [ranges[0]]
    for lo, hi in ranges[1:]:  # adjacent ranges as one
        if lo == merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


# the register-A W4A8 kernel's token tiles (128, or 256 / 192 in whole 64-token chains) fit M coarsely: where they would
# hold fewer than this share of tokens, the widened path (whose W4A16 kernels fit their tiles in 16 rows) takes M.
# Measured on the H200 (scripts/ab_knobs.py, W4A8-FP8, us, native / widened, token share of the native
# tiles): 8192x8192 M150 (two 128-token tiles, 59%) 48.4 / 46.8; 28672x8192 M150 189.9 / 131.4; with the wide tiles
# fitted (192 tokens, `call13/`): 8192x8192 M270 (70%) 52.5 / 57.1, M300 (78%) 52.7 / 60.8, M380 (99%) 53.3 / 71.8,
# M513 (89%) 97.9 / 110.0; 28672x8192 M270 191.1 / 217.2, M300 200.8 / 234.1, M513 306.8 / 370.6; native 128-token
# tiles at M200 (78%): 8192x8192 49.5 / 52.6, 28672x8192 193.3 / 163.1 (left native by this rule)
RS8_MIN_TOKEN_SHARE = 0.65


def _padded_rs8_ranges(caps, n: int, start: int) -> tuple[tuple[int, int], ...]:
    """The M from ``start`` whose native register-A W4A8 token tiles hold fewer than RS8_MIN_TOKEN_SHARE tokens,
    merged into ranges."""
    from humming.core.families.register_a8 import planner as rs8

    try:
        producer = rs8._producer_wanted(caps, None)
    except HummingError:
        producer = False
    ranges: list[list[int]] = []
    # from T tiles on, a tile's rows are at least (T - 1) / T tokens: past this many tiles of 256 none is under the share
    last = rs8.WIDE_BT * math.ceil(1 / (1 - RS8_MIN_TOKEN_SHARE))
    for m in range(start, last + 1):
        bt = rs8.planned_token_tile(m, producer, n, caps.limits.sms or 0, caps)
        if m / (-(-m // bt) * bt) >= RS8_MIN_TOKEN_SHARE:
            continue
        if ranges and ranges[-1][1] == m - 1:
            ranges[-1][1] = m
        else:
            ranges.append([m, m])
    return tuple((lo, hi) for lo, hi in ranges)


def _register_a_w4a8(caps, scheme, n: int, k: int) -> bool:
    """The register-A wgmma W4A8 kernel is on and takes these weights (N, K of 0: any multiple of 128)."""
    from humming.core.families.register_a8 import planner as rs8
    from humming.core.families.register_a8.layout import rs8_refusal

    a_type = "s8" if scheme.act == "int8" else str(scheme.act)
    return (rs8.enabled(caps) and caps.find_mma(family="wgmma", a_type=a_type) is not None
            and not rs8_refusal(scheme, n or 128, k or 128, a_type))


def describe_ranges(ranges) -> str:
    if ranges is None:
        return "every M"
    if not ranges:
        return "never"
    return ", ".join(f"M <= {hi}" if lo <= 1 else f"M >= {lo}" if hi >= OPEN else f"M {lo}-{hi}" for lo, hi in ranges)


# (profile, scheme, N, K, act_widen, knob overrides) -> the M ranges ((): never). The knobs the ranges read (the
# register-A W4A8 kernel's, through _padded_rs8_ranges) are read once per layer and override, like every plan's
# (a prepared layer keeps its launches per M): reading them on each call would cost host time.
_decided: dict[tuple, tuple] = {}


def applies(caps, scheme, m: int, n: int, k: int, act_widen: bool | None = None) -> bool:
    """True when this call takes the widened path (decided once per profile, scheme, N, K, option and knob
    overrides: the hot path only compares M)."""
    key = (caps.name, str(scheme), n, k, act_widen, knobs.overridden())
    ranges = _decided.get(key, False)
    if ranges is False:
        ranges = _decided[key] = () if refusal(scheme, n, k) else m_ranges(caps, scheme, n, k, act_widen)
    return ranges is None or any(lo <= m <= hi for lo, hi in ranges)


def act_dtype(caps, x_dtype: torch.dtype) -> torch.dtype:
    """bf16 for bf16 inputs where the profile has a bf16 MMA (the output range of the model's type), else f16."""
    if x_dtype == torch.bfloat16 and caps.find_mma(family="mma_sync", a_type="bf16", b_type="bf16", acc_type="f32"):
        return torch.bfloat16
    return torch.float16


def reason(caps, scheme, m: int, n: int = 0, k: int = 0, act_widen: bool | None = None) -> str:
    ranges = m_ranges(caps, scheme, n, k, act_widen)
    native = native_refusal(caps, scheme)
    scale = ("per-token scales applied per output row in the fp32 epilogue (row_scale)"
             if scheme.act_scale.mode == "dynamic_token" else "the per-tensor scale in the fp32 epilogue")
    text = (f"widened activations (GemmOptions.act_widen; {describe_ranges(ranges)} here): {scheme.act} "
            f"codes quantized as the reference does, widened exactly to 16 bits, multiplied on the weight-only kernel "
            f"of the same weights; {scale}")
    why = native.splitlines()[0].split("; use ")[0] if native else ""  # (its advice names the weight-only scheme)
    return text + (f"; the only path here: {why}" if native and ranges is None else "")
