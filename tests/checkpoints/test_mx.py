"""OCP MX import: mxfp4 (nibbles), mxfp6 (3 bytes per 4), mxfp8 (float8 or bytes)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from humming.checkpoints import from_mx, import_tensors
from humming.errors import SchemeError, ShapeError

from ._writers import ML_TYPES, ml_values, pack_fp6, pack_nibbles


def build(fmt, n=16, k=128, seed=0):
    rng = np.random.default_rng(seed)
    bits = {"e2m1": 4, "e2m3": 6, "e3m2": 6, "e4m3": 8, "e5m2": 8}[fmt]
    codes = rng.integers(0, 2**bits, size=(n, k))
    if bits == 8:  # avoid NaN / inf codes
        vals = ml_values(codes, fmt)
        codes = np.where(np.isfinite(vals), codes, 0)
    e = rng.integers(100, 150, size=(n, k // 32)).astype(np.uint8)
    w = ml_values(codes, fmt) * np.ldexp(1.0, np.repeat(e.astype(np.int64), 32, axis=1) - 127)
    if bits == 4:
        packed = pack_nibbles(codes)
    elif bits == 6:
        packed = pack_fp6(codes)
    else:
        packed = codes.astype(np.uint8)
    return torch.from_numpy(packed), torch.from_numpy(e), torch.from_numpy(w.astype(np.float32)), codes


@pytest.mark.parametrize("fmt", ["e2m1", "e2m3", "e3m2", "e4m3", "e5m2"])
def test_mx_formula(fmt):
    packed, e, w, _ = build(fmt, seed=len(fmt) + ord(fmt[1]) + ord(fmt[3]))
    qw = from_mx(packed, e, element_format=fmt)
    assert qw.scheme.weight == fmt and qw.scheme.weight_scale.format == "ue8m0"
    assert qw.scheme.weight_scale.group_size == 32 and torch.equal(qw.scales, e)
    assert torch.equal(qw.dequantize(), w)


def test_mxfp8_from_float8_tensor_and_e8m0_dtype():
    packed, e, w, codes = build("e4m3", seed=3)
    f8 = torch.from_numpy(codes.astype(np.uint8).view(ML_TYPES["e4m3"]).view(np.uint8)).view(torch.float8_e4m3fn)
    qw = import_tensors({"a.weight": f8, "a.weight_scale": e.view(torch.float8_e8m0fnu)}, "a", "mxfp8")
    assert torch.equal(qw.dequantize(), w)
    with pytest.raises(ShapeError, match="element_format is e5m2"):
        from_mx(f8, e, element_format="e5m2")


def test_mx_activations_option():
    packed, e, _, _ = build("e2m1", seed=4)
    qw = import_tensors({"weight": packed, "weight_scale": e}, "", "mx", element_format="mxfp4",
                        activations="w4a4-mxfp4")
    assert qw.scheme.act == "e2m1" and qw.scheme.act_scale.format == "ue8m0"


def test_malformed_mx():
    packed, e, _, _ = build("e2m3", seed=5)
    with pytest.raises(ShapeError, match=r"weight must have shape \[16, 96\]"):
        from_mx(packed[:, :64], e, element_format="e2m3")
    with pytest.raises(ShapeError, match="weight_scale must be uint8"):
        from_mx(packed, e.float(), element_format="e2m3")
    with pytest.raises(SchemeError, match="not supported"):
        from_mx(packed, e, element_format="int8")
    with pytest.raises(ShapeError, match=r"weight_scale must be \[N=16"):
        from_mx(packed, e[:3], element_format="e2m3")
