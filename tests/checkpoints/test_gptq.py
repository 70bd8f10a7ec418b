"""GPTQ v1/v2 import: 2/3/4/8 bits, symmetric and asymmetric, desc_act, channel-wise, malformed input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import humming
from humming.checkpoints import from_gptq, import_tensors
from humming.errors import SchemeError, ShapeError

from ._writers import gptq_tensors


def build(bits, *, version=1, sym=False, desc_act=False, k=256, n=64, group=64, seed=0):
    rng = np.random.default_rng(seed)
    g = k // group if group else 1
    q = rng.integers(0, 2**bits, size=(k, n))
    if sym:
        z = np.full((g, n), 2 ** (bits - 1))
    else:
        z = rng.integers(1, 2**bits, size=(g, n))  # true zeros >= 1 (v1 stores z - 1 >= 0)
    scales = (rng.uniform(0.001, 0.1, size=(g, n))).astype(np.float16)
    if group and desc_act:
        g_idx = rng.permutation(np.arange(k) // group)
    elif group:
        g_idx = np.arange(k) // group
    else:
        g_idx = np.zeros(k, dtype=np.int64)
    stored = z - 1 if version == 1 else z
    tensors = gptq_tensors(q, stored, scales, bits, g_idx)
    # the documented formula: W[n, k] = s[g_idx[k], n] * (q[k, n] - zero[g_idx[k], n])
    w = scales.astype(np.float64)[g_idx, :] * (q - z[g_idx, :])
    return tensors, torch.from_numpy(w.T.astype(np.float32)), g_idx


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("sym", [False, True])
def test_gptq_dequantizes_to_the_formula(bits, version, sym):
    t, w, _ = build(bits, version=version, sym=sym, seed=bits * 10 + version)
    qw = from_gptq(t["qweight"], t["qzeros"], t["scales"], t["g_idx"], bits=bits, version=version)
    assert qw.shape == (64, 256) and qw.g_idx is None
    assert torch.equal(qw.dequantize(), w)
    if sym:
        assert qw.scheme.weight == f"int{bits}" and qw.zeros is None
    else:
        assert qw.scheme.weight == f"uint{bits}" and qw.scheme.zero_point == "int" and qw.zeros.dtype == torch.uint8
    assert qw.scheme.weight_scale.group_size == 64


def test_symmetric_4bit_g128_is_the_w4a16_preset():
    t, w, _ = build(4, sym=True, group=128)
    qw = from_gptq(t["qweight"], t["qzeros"], t["scales"], bits=4)
    assert qw.scheme == humming.schemes.get("w4a16") and torch.equal(qw.dequantize(), w)
    kept = from_gptq(t["qweight"], t["qzeros"], t["scales"], bits=4, sym=False)
    assert kept.scheme.zero_point == "int" and torch.equal(kept.dequantize(), w)


@pytest.mark.parametrize("bits", [3, 4])
def test_desc_act_keeps_g_idx(bits):
    t, w, g_idx = build(bits, desc_act=True, seed=5)
    qw = import_tensors({"l." + k: v for k, v in t.items()}, "l", "gptq", bits=bits, group_size=64)
    assert qw.scheme.act_order and torch.equal(qw.g_idx, torch.from_numpy(g_idx.astype(np.int32)))
    assert torch.equal(qw.dequantize(), w)
    # the oracle runs on it
    x = torch.randn(2, 256)
    assert torch.allclose(humming.reference_gemm(x, qw), x @ w.t(), rtol=1e-5, atol=1e-4)


def test_channelwise():
    t, w, _ = build(4, group=None, seed=6)
    qw = from_gptq(t["qweight"], t["qzeros"], t["scales"], t["g_idx"], bits=4, group_size=-1)
    assert qw.scheme.weight_scale.granularity == "channel" and torch.equal(qw.dequantize(), w)


def test_v1_formula_holds_for_a_stored_all_ones_zero():
    # v1 stores zero - 1; a stored 15 (4 bits) means an effective zero of 16, which the formula keeps
    rng = np.random.default_rng(8)
    q = rng.integers(0, 16, size=(128, 32))
    stored = np.full((1, 32), 15)
    s = rng.uniform(0.01, 0.1, size=(1, 32)).astype(np.float16)
    t = gptq_tensors(q, stored, s, 4)
    qw = from_gptq(t["qweight"], t["qzeros"], t["scales"], bits=4)
    assert int(qw.zeros.max()) == 16
    assert torch.equal(qw.dequantize(), torch.from_numpy((s.astype(np.float64) * (q - 16)).T.astype(np.float32)))


def test_v1_zero_that_wrapped_in_8_bits_is_refused():
    t, _, _ = build(8, version=2, seed=7)
    t["qzeros"] = torch.full_like(t["qzeros"], -1)  # every stored zero 255 -> 256 in v1
    with pytest.raises(SchemeError, match="gptq_v2"):
        from_gptq(t["qweight"], t["qzeros"], t["scales"], bits=8, version=1)


def test_malformed_gptq():
    t, _, _ = build(4)
    with pytest.raises(ShapeError, match="qweight must be int32, got int64"):
        from_gptq(t["qweight"].long(), t["qzeros"], t["scales"])
    with pytest.raises(ShapeError, match=r"scales must be \[groups, N=64\]"):
        from_gptq(t["qweight"], t["qzeros"], t["scales"][:, :32])
    with pytest.raises(ShapeError, match="qzeros must have shape"):
        from_gptq(t["qweight"], t["qzeros"][:, :4], t["scales"])
    with pytest.raises(ShapeError, match="g_idx must have shape"):
        from_gptq(t["qweight"], t["qzeros"], t["scales"], t["g_idx"][:100])
    with pytest.raises(ShapeError, match="scales must be float16 or bfloat16 or float32"):
        from_gptq(t["qweight"], t["qzeros"], t["scales"].to(torch.int16))
    with pytest.raises(ShapeError, match="group_size=32 and K=256 give 8 groups"):
        from_gptq(t["qweight"], t["qzeros"], t["scales"], group_size=32)
    with pytest.raises(SchemeError, match="bits=5"):
        from_gptq(t["qweight"], t["qzeros"], t["scales"], bits=5)
    with pytest.raises(SchemeError, match=r"tensor 'layer\.qzeros' is missing.*layer\.qweight"):
        import_tensors({"layer.qweight": t["qweight"], "layer.scales": t["scales"]}, "layer", "gptq")
    with pytest.raises(SchemeError, match="sym=True"):
        from_gptq(t["qweight"], t["qzeros"], t["scales"], sym=True)
