"""compressed-tensors import: pack-quantized int4/int8 (group/channel, zero points, act-order), nvfp4, fp8, int8."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from humming.checkpoints import compressed_tensors, import_tensors
from humming.errors import SchemeError, ShapeError

from ._writers import FP4_VALUES, ct_pack_to_int32, pack_nibbles, random_e4m3_scales


def pack_quantized(bits, *, n=64, k=256, group=128, asym=False, actorder=False, packed_zp=True, seed=0):
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    g = k // group if group else 1
    q = rng.integers(lo, hi + 1, size=(n, k))
    s = rng.uniform(0.001, 0.1, size=(n, g)).astype(np.float32).astype(np.float16)
    zp = rng.integers(lo, hi + 1, size=(n, g)) if asym else np.zeros((n, g), dtype=np.int64)
    gi = rng.permutation(np.arange(k) // group) if actorder else (np.arange(k) // group if group else
                                                                  np.zeros(k, dtype=np.int64))
    t = {"weight_packed": torch.from_numpy(ct_pack_to_int32(q, bits)), "weight_scale": torch.from_numpy(s),
         "weight_shape": torch.tensor([n, k])}
    if asym:
        t["weight_zero_point"] = torch.from_numpy(ct_pack_to_int32(zp, bits, packed_dim=0)) if packed_zp else \
            torch.from_numpy(zp.astype(np.int8))
    if actorder:
        t["weight_g_idx"] = torch.from_numpy(gi.astype(np.int32))
    w = (q - zp[:, gi]) * s.astype(np.float64)[:, gi]
    return t, torch.from_numpy(w.astype(np.float32))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [128, None])
@pytest.mark.parametrize("asym", [False, True])
def test_pack_quantized(bits, group, asym):
    t, w = pack_quantized(bits, group=group, asym=asym, seed=bits + (group or 0))
    qw = compressed_tensors.load(t)
    assert torch.equal(qw.dequantize(), w)
    assert qw.scheme.weight == (f"uint{bits}" if asym else f"int{bits}")
    assert qw.scheme.weight_scale.granularity == ("group" if group else "channel")


def test_pack_quantized_actorder_and_unpacked_zero_points():
    t, w = pack_quantized(4, asym=True, actorder=True, packed_zp=False, seed=3)
    qw = import_tensors({"x." + k: v for k, v in t.items()}, "x", "compressed-tensors")
    assert qw.scheme.act_order and torch.equal(qw.dequantize(), w)


def test_pack_quantized_ragged_k_channelwise():
    t, w = pack_quantized(4, k=100, group=None, seed=4)
    qw = compressed_tensors.load(t)
    assert qw.shape == (64, 100) and torch.equal(qw.dequantize(), w)


def nvfp4(n=32, k=64, seed=0, with_input=True):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, size=(n, k))
    scale_t, scale_v = random_e4m3_scales(rng, (n, k // 16))
    gdiv = np.float32(rng.uniform(100, 5000))
    t = {"weight_packed": torch.from_numpy(pack_nibbles(codes)), "weight_scale": scale_t,
         "weight_global_scale": torch.tensor([gdiv], dtype=torch.float32)}
    if with_input:
        t["input_global_scale"] = torch.tensor([np.float32(700.0)])
    vals = np.array(FP4_VALUES)[codes] * np.repeat(scale_v, 16, axis=1)
    w = (vals.astype(np.float32) / gdiv).astype(np.float32)  # W = e2m1 * scale / global (divisor)
    return t, torch.from_numpy(w)


def test_nvfp4_global_scale_is_a_divisor():
    t, w = nvfp4()
    qw = compressed_tensors.load(t)
    assert qw.scheme.name == "w4a16-nvfp4" and qw.scheme.act == "e2m1"  # W4A4 when input_global_scale is present
    assert qw.global_scale.item() == pytest.approx(1 / t["weight_global_scale"].item(), rel=1e-7)
    assert qw.input_scale.item() == pytest.approx(1 / 700.0, rel=1e-7)
    # one float32 rounding apart: the divisor is stored as its reciprocal
    assert torch.allclose(qw.dequantize(), w, rtol=2.5e-7, atol=0)
    wo, _ = nvfp4(with_input=False)
    assert compressed_tensors.load(wo).scheme.act is None


def test_float_quantized_fp8():
    rng = np.random.default_rng(9)
    wt = torch.from_numpy(rng.normal(size=(256, 128)).astype(np.float32)).to(torch.float8_e4m3fn)
    chan = torch.from_numpy(rng.uniform(0.01, 1, size=(256, 1)).astype(np.float32))
    qw = compressed_tensors.load({"weight": wt, "weight_scale": chan, "input_scale": torch.tensor([0.5])})
    assert qw.scheme.weight_scale.granularity == "channel" and qw.scheme.act_scale.mode == "static_tensor"
    assert torch.equal(qw.dequantize(), wt.float() * chan)
    blk = torch.from_numpy(rng.uniform(0.01, 1, size=(2, 1)).astype(np.float32))
    qb = compressed_tensors.load({"weight": wt, "weight_scale": blk})
    assert qb.scheme.weight_scale.block == (128, 128)
    assert torch.equal(qb.dequantize(), wt.float() * blk.repeat_interleave(128, 0))
    qt = compressed_tensors.load({"weight": wt, "weight_scale": torch.tensor([0.25])})
    assert qt.scheme.weight_scale.granularity == "tensor" and torch.equal(qt.dequantize(), wt.float() * 0.25)


def test_int_quantized_int8():
    wt = torch.randint(-128, 128, (16, 64), dtype=torch.int8)
    s = torch.rand(16, 1, dtype=torch.bfloat16) + 0.1
    qw = compressed_tensors.load({"weight": wt, "weight_scale": s})
    assert qw.scheme.weight == "int8" and torch.equal(qw.dequantize(), wt.float() * s.float())


def test_malformed_compressed_tensors():
    t, _ = pack_quantized(4, seed=5)
    bad = dict(t, weight_scale=t["weight_scale"][:10])
    with pytest.raises(ShapeError, match=r"weight_scale must be \[N=64, groups\]"):
        compressed_tensors.load(bad)
    with pytest.raises(ShapeError, match="weight_packed must be int32"):
        compressed_tensors.load(dict(t, weight_packed=t["weight_packed"].to(torch.int64)))
    no_shape = {k: v for k, v in t.items() if k != "weight_shape"}
    with pytest.raises(SchemeError, match="num_bits"):
        compressed_tensors.load(no_shape)
    assert compressed_tensors.load(no_shape, num_bits=4).shape == (64, 256)
    with pytest.raises(ShapeError, match="weight_zero_point must be int32"):
        compressed_tensors.load(dict(t, weight_zero_point=torch.zeros(3, 3, dtype=torch.int32)))
    nv, _ = nvfp4()
    with pytest.raises(ShapeError, match="weight_scale must have shape"):
        compressed_tensors.load(dict(nv, weight_scale=nv["weight_scale"][:, :2]))
    with pytest.raises(SchemeError, match="weight_global_scale' is missing"):
        compressed_tensors.load({k: v for k, v in nv.items() if k != "weight_global_scale"})
    with pytest.raises(SchemeError, match="not quantized"):
        compressed_tensors.load({"weight": torch.randn(4, 4)})
    with pytest.raises(SchemeError, match="weight_packed' is missing"):
        compressed_tensors.load({"something": torch.randn(4, 4)})


@pytest.mark.parametrize("bits", [3, 5, 6, 7])
def test_older_whole_codes_per_word_layout_is_named(bits):
    """Older compressed-tensors releases put 32 // bits whole codes in each int32 word; the current layout packs the
    bits across word boundaries. A 3-bit weight of the old layout gets an error that says which layout it found."""
    n, k = 64, 640
    old_words = -(-k // (32 // bits))
    with pytest.raises(ShapeError, match=f"{old_words} words is the older layout of {32 // bits} whole codes per word"):
        compressed_tensors.from_pack_quantized(torch.zeros(n, old_words, dtype=torch.int32),
                                               torch.ones(n, k // 128, dtype=torch.float16), num_bits=bits,
                                               weight_shape=torch.tensor([n, k]))
