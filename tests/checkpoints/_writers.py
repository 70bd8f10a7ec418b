"""Independent writers of the checkpoint layouts (numpy, written from the layouts' own packing loops, not from
humming's packing code), plus value tables for the documented dequantization formulas."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

FP4_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
AWQ_PACK_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]


def autogptq_pack_rows(intweight: np.ndarray, bits: int) -> np.ndarray:
    """AutoGPTQ's packing loop: rows of ``intweight`` [R, C] packed into int32 rows [R * bits / 32, C]."""
    iw = intweight.astype(np.uint32)
    rows = iw.shape[0] * bits // 32
    q = np.zeros((rows, iw.shape[1]), dtype=np.uint32)
    i = row = 0
    if bits in (2, 4, 8):
        while row < rows:
            for j in range(i, i + 32 // bits):
                q[row] |= iw[j] << np.uint32(bits * (j - i))
            i += 32 // bits
            row += 1
    elif bits == 3:
        while row < rows:
            for j in range(i, i + 10):
                q[row] |= iw[j] << np.uint32(3 * (j - i))
            i += 10
            q[row] |= iw[i] << np.uint32(30)
            row += 1
            q[row] |= (iw[i] >> np.uint32(2)) & np.uint32(1)
            i += 1
            for j in range(i, i + 10):
                q[row] |= iw[j] << np.uint32(3 * (j - i) + 1)
            i += 10
            q[row] |= iw[i] << np.uint32(31)
            row += 1
            q[row] |= (iw[i] >> np.uint32(1)) & np.uint32(3)
            i += 1
            for j in range(i, i + 10):
                q[row] |= iw[j] << np.uint32(3 * (j - i) + 2)
            i += 10
            row += 1
    else:
        raise ValueError(bits)
    return q.view(np.int32)


def gptq_tensors(q: np.ndarray, z_stored: np.ndarray, scales: np.ndarray, bits: int,
                 g_idx: np.ndarray | None = None) -> dict[str, torch.Tensor]:
    """q [K, N] codes, z_stored [G, N] (already minus one for v1), scales [G, N] float16."""
    out = {
        "qweight": torch.from_numpy(autogptq_pack_rows(q, bits)),
        "qzeros": torch.from_numpy(np.ascontiguousarray(autogptq_pack_rows(z_stored.T, bits).T)),
        "scales": torch.from_numpy(scales),
    }
    if g_idx is not None:
        out["g_idx"] = torch.from_numpy(g_idx.astype(np.int32))
    return out


def awq_pack(intweight: np.ndarray) -> np.ndarray:
    """AutoAWQ's GEMM packing: [R, C] nibbles -> int32 [R, C / 8] along columns in AWQ order."""
    iw = intweight.astype(np.uint32)
    out = np.zeros((iw.shape[0], iw.shape[1] // 8), dtype=np.uint32)
    for col in range(iw.shape[1] // 8):
        for i in range(8):
            out[:, col] |= iw[:, col * 8 + AWQ_PACK_ORDER[i]] << np.uint32(i * 4)
    return out.view(np.int32)


def ct_pack_to_int32(value: np.ndarray, bits: int, packed_dim: int = 1) -> np.ndarray:
    """compressed-tensors pack_to_int32: signed values + 2**(bits-1), 32/bits per int32 along packed_dim,
    LSB first, the last word zero-padded."""
    v = (value.astype(np.int64) + (1 << (bits - 1))).astype(np.uint32)
    if packed_dim == 0:
        v = v.T
    per = 32 // bits
    pad = (-v.shape[1]) % per
    v = np.pad(v, ((0, 0), (0, pad)))
    out = np.zeros((v.shape[0], v.shape[1] // per), dtype=np.uint32)
    for i in range(per):
        out |= v[:, i::per] << np.uint32(bits * i)
    out = out.view(np.int32)
    return np.ascontiguousarray(out.T) if packed_dim == 0 else out


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[.., K] 4-bit codes -> uint8 [.., K/2], low nibble = even element."""
    c = codes.astype(np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def pack_fp6(codes: np.ndarray) -> np.ndarray:
    """[N, K] 6-bit codes -> uint8 [N, 3K/4]: four codes per three bytes, LSB first."""
    c = codes.astype(np.uint8).reshape(codes.shape[0], -1, 4)
    v0, v1, v2, v3 = (c[..., i].astype(np.uint16) for i in range(4))
    b0 = v0 | ((v1 & 0x3) << 6)
    b1 = (v1 >> 2) | ((v2 & 0xF) << 4)
    b2 = (v2 >> 4) | (v3 << 2)
    return np.stack([b0, b1, b2], axis=-1).astype(np.uint8).reshape(codes.shape[0], -1)


ML_TYPES = {"e2m1": ml_dtypes.float4_e2m1fn, "e2m3": ml_dtypes.float6_e2m3fn, "e3m2": ml_dtypes.float6_e3m2fn,
            "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def ml_values(codes: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values of element codes, decoded by ml_dtypes."""
    return codes.astype(np.uint8).view(ML_TYPES[fmt]).astype(np.float64)


def e4m3_bytes(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(values.astype(np.float32).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)).view(
        torch.float8_e4m3fn)


def random_e4m3_scales(rng: np.random.Generator, shape) -> tuple[torch.Tensor, np.ndarray]:
    """Positive e4m3 scales (as torch float8) and their float64 values."""
    codes = rng.integers(0x08, 0x78, size=shape).astype(np.uint8)  # normal, positive, finite
    return torch.from_numpy(codes).view(torch.float8_e4m3fn), ml_values(codes, "e4m3")
