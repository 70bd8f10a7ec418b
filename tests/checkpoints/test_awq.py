"""AWQ import: nibble order, zero points, malformed input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from humming.checkpoints import from_awq, import_tensors
from humming.errors import SchemeError, ShapeError

from ._writers import awq_pack


def build(k=256, n=64, group=128, seed=0):
    rng = np.random.default_rng(seed)
    g = k // group
    q = rng.integers(0, 16, size=(k, n))
    z = rng.integers(0, 16, size=(g, n))
    s = rng.uniform(0.001, 0.1, size=(g, n)).astype(np.float16)
    t = {"qweight": torch.from_numpy(awq_pack(q)), "qzeros": torch.from_numpy(awq_pack(z)),
         "scales": torch.from_numpy(s)}
    gi = np.arange(k) // group
    w = (q - z[gi, :]) * s.astype(np.float64)[gi, :]
    return t, torch.from_numpy(w.T.astype(np.float32))


def test_awq_dequantizes_to_the_formula():
    t, w = build()
    qw = from_awq(t["qweight"], t["qzeros"], t["scales"])
    assert qw.scheme.name == "w4a16-zp" and qw.scheme.weight_scale.group_size == 128
    assert torch.equal(qw.dequantize(), w)


def test_awq_nibble_order_is_not_sequential():
    q = np.arange(8)[None, :].repeat(32, 0) % 16
    word = int(awq_pack(q)[0, 0].view(np.uint32))
    assert word == 0x75316420


def test_awq_via_import_tensors_with_bias():
    t, w = build(group=64, seed=1)
    b = torch.randn(64)
    qw = import_tensors({"m.qweight": t["qweight"], "m.qzeros": t["qzeros"], "m.scales": t["scales"], "m.bias": b},
                        "m.", "awq")
    assert torch.equal(qw.dequantize(), w) and torch.equal(qw.bias, b)


def test_malformed_awq():
    t, _ = build()
    with pytest.raises(ShapeError, match="scales say N=64"):
        from_awq(t["qweight"][:, :4], t["qzeros"], t["scales"])
    with pytest.raises(ShapeError, match=r"qzeros must have shape \[2, 8\]"):
        from_awq(t["qweight"], t["qzeros"][:1], t["scales"])
    with pytest.raises(ShapeError, match="qweight must be int32"):
        from_awq(t["qweight"].float(), t["qzeros"], t["scales"])
    with pytest.raises(SchemeError, match="only 4-bit"):
        from_awq(t["qweight"], t["qzeros"], t["scales"], bits=8)
    with pytest.raises(SchemeError, match="scales' is missing"):
        import_tensors({"qweight": t["qweight"], "qzeros": t["qzeros"]}, "", "awq")
