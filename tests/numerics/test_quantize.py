"""quantize / dequantize / quantize_activation: layout contract, error bounds, act-order, errors."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import humming
from humming import formats, schemes
from humming.core.quant.quantize import QuantizedActivation, QuantizedWeight, encode_scales
from humming.errors import SchemeError, ShapeError

SCALE_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "ue4m3": torch.float8_e4m3fn,
                "ue8m0": torch.uint8}
# relative rounding error of a scale format (how far amax / scale can exceed the element max)
SCALE_REL = {"f16": 0.0, "bf16": 0.0, "f32": 2.0**-23, "ue4m3": 2.0**-4, "ue8m0": 0.0}


def round_up_f16(s: torch.Tensor) -> torch.Tensor:
    """The smallest float16 >= s, found in the table of every non-negative finite float16."""
    table = torch.arange(0, 0x7C00, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    idx = torch.searchsorted(table, s.float().contiguous())
    return table[idx.clamp(max=table.numel() - 1)].to(torch.float16)


def weights(n=64, k=256, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    rows = torch.exp(torch.randn(n, 1, generator=g))  # rows of different magnitude
    return (torch.randn(n, k, generator=g) * rows).to(dtype)


def half_gap(fmt, a: torch.Tensor) -> torch.Tensor:
    """Half the distance between the representable magnitudes around |a| (clamped into the range)."""
    vals = fmt.values().to(torch.float64)
    vals = torch.unique(vals[torch.isfinite(vals)].abs())
    a = a.to(torch.float64).abs().clamp(max=vals[-1].item())
    idx = (torch.searchsorted(vals, a, right=True) - 1).clamp(0, len(vals) - 2)
    return (vals[idx + 1] - vals[idx]) / 2


def check_error_bound(w: torch.Tensor, qw: QuantizedWeight):
    """|w - dequant(w)| <= half a step of the format x the scale (+ the clip allowed by scale rounding)."""
    s = qw.scheme
    fmt = s.weight_format
    scale = qw.expand(qw.scale_values()).to(torch.float64)
    if qw.global_scale is not None:
        scale = scale * qw.global_scale.item()
    w64 = w.to(torch.float64)
    err = (w64 - qw.dequantize().to(torch.float64)).abs()
    rel = SCALE_REL[s.weight_scale.format]
    if s.zero_point is not None or fmt.kind == "int":
        bound = 0.5 * scale * (1 + 1e-3)
    else:
        x = w64 / scale
        assert float((x.abs() - fmt.max).max()) <= fmt.max * rel + 1e-3, "a value clipped beyond scale rounding"
        bound = half_gap(fmt, x) * scale * (1 + 1e-6) + (x.abs() - fmt.max).clamp(min=0) * scale
    bad = err > bound + 1e-6 * w64.abs().max()
    assert not bool(bad.any()), f"{s}: {int(bad.sum())} values exceed the bound, worst {float((err - bound).max())}"


# ----------------------------------------------------------------------------------------- contract
@pytest.mark.parametrize("name", schemes.names())
def test_every_preset_quantizes_with_the_documented_layout(name):
    s = schemes.get(name)
    n, k = 48, 256
    w = weights(n, k, seed=1)
    qw = humming.quantize(w, name)
    assert isinstance(qw, QuantizedWeight) and qw.scheme == s and qw.shape == (n, k)
    assert qw.packed.dtype == torch.int32 and tuple(qw.packed.shape) == (n, math.ceil(k * s.bits / 32))
    codes = qw.codes()
    assert codes.dtype == torch.uint8 and codes.shape == (n, k) and int(codes.max()) < 2**s.bits
    ws = s.weight_scale
    want = {"group": (n, k // (ws.group_size or 1)), "channel": (n, 1), "tensor": (1, 1),
            "block": (math.ceil(n / ws.block[0]), math.ceil(k / ws.block[1])) if ws.block else None}[ws.granularity]
    assert tuple(qw.scales.shape) == want and qw.scales.dtype == SCALE_DTYPES[ws.format]
    assert qw.scale_values().dtype == torch.float32 and qw.scale_values().shape == qw.scales.shape
    if s.zero_point == "int":
        assert qw.zeros.dtype == torch.uint8 and qw.zeros.shape == want
    elif s.zero_point == "float":
        assert qw.zeros.dtype == torch.float32 and qw.zeros.shape == want
    else:
        assert qw.zeros is None
    assert (qw.global_scale is not None) == s.weight_global_scale
    if qw.global_scale is not None:
        assert qw.global_scale.dtype == torch.float32 and qw.global_scale.dim() == 0
    assert qw.g_idx is None and qw.bias is None
    d = qw.dequantize()
    assert d.dtype == torch.float32 and d.shape == (n, k) and bool(torch.isfinite(d).all())
    assert qw.dequantize(torch.bfloat16).dtype == torch.bfloat16
    rel = float((d - w).norm() / w.norm())
    assert rel < {1: 0.7, 2: 0.8, 3: 0.35, 4: 0.2}.get(s.bits, 0.06), rel
    text = repr(qw)
    assert "\n" not in text and str(s) in text and f"{n}x{k}" in text
    if s.zero_point is None or s.bits > 1:
        check_error_bound(w, qw)


def test_w4a16_codes_are_twos_complement_and_scales_absmax_over_7():
    w = weights(8, 128, seed=2)
    qw = humming.quantize(w, "w4a16")
    s = round_up_f16(w.abs().amax(dim=1, keepdim=True) / 7)
    assert torch.equal(qw.scales, s)
    q = torch.round(w / s.float()).clamp(-8, 7)
    assert torch.equal(qw.codes(), (q.to(torch.int32) & 15).to(torch.uint8))
    assert torch.equal(qw.dequantize(), q * s.float())


def test_zero_point_rules():
    w = weights(8, 256, seed=3) + 0.7
    qw = humming.quantize(w, "w4a16-zp")
    g = w.reshape(8, 2, 128)
    lo, hi = g.amin(-1).clamp(max=0), g.amax(-1).clamp(min=0)
    s = round_up_f16((hi - lo) / 15)
    z = torch.round(-lo / s.float()).clamp(0, 15)
    assert torch.equal(qw.scales, s) and torch.equal(qw.zeros, z.to(torch.uint8))
    codes = qw.codes().reshape(8, 2, 128).float()
    assert torch.equal(qw.dequantize(), ((codes - z[..., None]) * s.float()[..., None]).reshape(8, 256))


def test_one_bit_takes_mean_plus_minus_mad():
    w = weights(4, 128, seed=4)
    qw = humming.quantize(w, "w1a16", group_size=128)
    mu = w.mean(1, keepdim=True)
    assert torch.equal(qw.codes(), (w > mu).to(torch.uint8))
    mad = (w - mu).abs().mean(1, keepdim=True)
    d = qw.dequantize()
    assert torch.allclose(d, torch.where(w > mu, mu + mad, mu - mad), atol=2e-3 * float(mad.max()))


def test_mx_scales_round_up_so_nothing_clips():
    w = weights(16, 256, seed=5)
    qw = humming.quantize(w, "w4a16-mxfp4")
    amax = w.reshape(16, 8, 32).abs().amax(-1)
    e = torch.ceil(torch.log2(amax / 6)).to(torch.int32)
    assert torch.equal(qw.scales.to(torch.int32), e + 127)
    assert float((w.reshape(16, 8, 32).abs() / 2.0 ** e[..., None].float()).max()) <= 6.0


def test_nvfp4_follows_the_two_level_recipe():
    w = weights(32, 64, seed=6)
    qw = humming.quantize(w, "w4a4-nvfp4")
    gs = w.abs().max() / (6 * 448)
    assert qw.global_scale.item() == pytest.approx(gs.item(), rel=1e-7)
    blk = (w.reshape(32, 4, 16).abs().amax(-1) / 6) / qw.global_scale
    assert torch.equal(qw.scales, blk.to(torch.float8_e4m3fn))  # torch's cast is RNE, saturating
    x = w.reshape(32, 4, 16) / (qw.scales.float()[..., None] * qw.global_scale)
    assert torch.equal(qw.codes(), formats.get("e2m1").encode(x).reshape(32, 64))


def test_block_scales_with_ragged_edges():
    w = weights(200, 300, seed=7)
    qw = humming.quantize(w, "w8a8-fp8-block")
    assert qw.scales.shape == (2, 3)
    assert qw.scale_values()[1, 2].item() == pytest.approx(w[128:, 256:].abs().max().item() / 448, rel=1e-6)
    check_error_bound(w, qw)


def test_zero_groups_get_scale_one():
    w = torch.zeros(4, 64)
    w[0, :32] = 1.0
    for name in ("w4a16", "w4a16-zp", "w4a16-mxfp4", "w4a16-nvfp4", "w8a16-fp8", "w1a16"):
        s = schemes.get(name)
        if s.weight_scale.format in ("f16", "bf16") and s.weight_scale.granularity == "group":
            s = s.with_(group_size=32)
        qw = humming.quantize(w, s)
        assert torch.equal(qw.dequantize()[1:], torch.zeros(3, 64)), name
        assert bool(torch.isfinite(qw.scale_values()).all())


# -------------------------------------------------------------------------------------- act-order
def test_act_order_groups_follow_the_permutation():
    w = weights(16, 256, seed=8)
    perm = torch.randperm(256, generator=torch.Generator().manual_seed(0))
    qa = humming.quantize(w, "w4a16", act_order=perm)
    assert qa.scheme.act_order and qa.g_idx.dtype == torch.int32
    assert torch.equal(qa.g_idx[perm], (torch.arange(256) // 128).to(torch.int32))
    ref = humming.quantize(w[:, perm], "w4a16")
    assert torch.equal(qa.dequantize()[:, perm], ref.dequantize())
    assert torch.equal(qa.codes()[:, perm], ref.codes())
    auto = humming.quantize(w, "w4a16", act_order=True)
    assert auto.g_idx is not None and auto.scheme == schemes.get("w4a16").with_(act_order=True)
    assert humming.quantize(w, auto.scheme, act_order=False).g_idx is None
    check_error_bound(w, qa)


def test_group_size_override_and_bias():
    w = weights(8, 256, seed=9)
    b = torch.randn(8)
    qw = humming.quantize(w, "w4a16", group_size=64, bias=b)
    assert qw.scheme.weight_scale.group_size == 64 and qw.scales.shape == (8, 4)
    assert torch.equal(qw.bias, b)
    assert str(qw.scheme) == "w4a16[group_size=64]"


def test_fp16_and_bf16_inputs():
    w = weights(8, 128, seed=10)
    for dt in (torch.float16, torch.bfloat16):
        qw = humming.quantize(w.to(dt), "w4a16")
        assert torch.equal(qw.codes(), humming.quantize(w.to(dt).float(), "w4a16").codes())


# ------------------------------------------------------------------------------------------ errors
def test_quantize_errors():
    with pytest.raises(ShapeError, match=r"does not divide K=192; pass group_size=64 \(sizes that divide K=192: 16, 32, 64, 192\)"):
        humming.quantize(torch.randn(8, 192), "w4a16")
    with pytest.raises(ShapeError, match="pad K to a multiple of 16"):
        humming.quantize(torch.randn(8, 200), "w4a16")
    with pytest.raises(SchemeError, match="exceeds the largest f16 value 65504.*bf16"):
        humming.quantize(torch.full((4, 128), 1e6), "w4a16")
    with pytest.raises(ShapeError, match="2-D"):
        humming.quantize(torch.randn(8), "w4a16")
    with pytest.raises(ShapeError, match="NaN"):
        humming.quantize(torch.full((4, 128), float("nan")), "w4a16")
    with pytest.raises(ShapeError, match="permutation"):
        humming.quantize(torch.randn(4, 128), "w4a16", act_order=torch.zeros(128, dtype=torch.int64))
    with pytest.raises(SchemeError, match="act_order"):
        humming.quantize(torch.randn(4, 128), "w8a16", act_order=True)
    with pytest.raises(SchemeError, match="unknown scheme"):
        humming.quantize(torch.randn(4, 128), "w5a16")
    with pytest.raises(ShapeError, match="float"):
        humming.quantize(torch.ones(4, 128, dtype=torch.int32), "w4a16")


def test_from_codes_validates():
    s = schemes.get("w4a16")
    codes = torch.randint(0, 16, (8, 128), dtype=torch.uint8)
    ok = QuantizedWeight.from_codes(codes, s, torch.ones(8, 1, dtype=torch.float16))
    assert torch.equal(ok.codes(), codes)
    with pytest.raises(ShapeError, match=r"scales must be \[8, 1\]"):
        QuantizedWeight.from_codes(codes, s, torch.ones(8, 2, dtype=torch.float16))
    with pytest.raises(ShapeError, match="float16"):
        QuantizedWeight.from_codes(codes, s, torch.ones(8, 1))
    with pytest.raises(ShapeError, match=r"\[0, 16\)"):
        QuantizedWeight.from_codes(codes + 16, s, torch.ones(8, 1, dtype=torch.float16))
    with pytest.raises(ShapeError, match="zeros are missing"):
        QuantizedWeight.from_codes(codes, "w4a16-zp", torch.ones(8, 1, dtype=torch.float16))
    with pytest.raises(ShapeError, match="global scale"):
        QuantizedWeight.from_codes(codes, "w4a16-nvfp4", torch.ones(8, 8, dtype=torch.float8_e4m3fn))
    with pytest.raises(ShapeError, match="non-negative"):
        QuantizedWeight.from_codes(codes, "w4a16-nvfp4", (-torch.ones(8, 8)).to(torch.float8_e4m3fn),
                                   global_scale=1.0)


def test_to_and_with_activations():
    qw = humming.quantize(weights(8, 128), "w4a16-mxfp4")
    moved = qw.to("cpu")
    assert torch.equal(moved.dequantize(), qw.dequantize())
    a = qw.with_activations("w4a4-mxfp4")
    assert a.scheme.act == "e2m1" and a.scheme.act_scale.group_size == 32 and a.packed is qw.packed
    with pytest.raises(SchemeError, match="weight side"):
        qw.with_scheme("w4a16")


# ------------------------------------------------------------------------------------- properties
_BOUND_SCHEMES = ["w4a16", "w4a16-zp", "w8a16", "w3a16", "w2a16", "w2a16-zp", "w1a16-ternary", "w4a16-fp4",
                  "w8a16-fp8", "w4a16-nvfp4", "w4a16-mxfp4", "mxint4", "mxfp6", "mxfp6-e3m2", "mxfp8",
                  "w8a8-fp8-tensor"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(_BOUND_SCHEMES), seed=st.integers(0, 2**31 - 1), log_mag=st.floats(-6, 6),
       n=st.integers(1, 20), kg=st.integers(1, 3), scale_fmt=st.sampled_from([None, "bf16", "f32"]))
def test_quantization_error_is_at_most_half_a_step(name, seed, log_mag, n, kg, scale_fmt):
    s = schemes.get(name)
    if scale_fmt and s.weight_scale.format in ("f16", "bf16", "f32"):
        s = s.with_(scale_format=scale_fmt)
    k = 128 * kg
    g = torch.Generator().manual_seed(seed)
    if s.weight_scale.format == "f16":
        log_mag = min(log_mag, 4.0)  # f16 scales top out at 65504 (larger weights raise, see test_quantize_errors)
    w = torch.randn(n, k, generator=g) * 10.0**log_mag
    w[0, 0] = 0.0
    qw = humming.quantize(w, s)
    check_error_bound(w, qw)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), log_mag=st.floats(-4, 4), name=st.sampled_from(
    ["w8a8-int8", "w8a8-fp8", "w8a8-fp8-block", "w4a4-nvfp4", "w4a4-mxfp4", "mxfp6", "w8a8-fp8-tensor"]))
def test_activation_error_is_at_most_half_a_step(seed, log_mag, name):
    s = schemes.get(name)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, 256, generator=g) * 10.0**log_mag
    xa = humming.quantize_activation(x, s)
    fmt = s.act_format
    scale = xa.scale_values()
    if s.act_scale.mode == "dynamic_group":
        scale = scale.repeat_interleave(s.act_scale.group_size, dim=-1)
    if xa.global_scale is not None:
        scale = scale * xa.global_scale
    d = xa.dequantize()
    assert d.shape == x.shape
    y = (x / scale).to(torch.float64)
    rel = SCALE_REL[s.act_scale.format]
    assert float((y.abs() - fmt.max).max()) <= fmt.max * rel + 1e-3
    bound = (half_gap(fmt, y) * (1 + 1e-6) + (y.abs() - fmt.max).clamp(min=0)) * scale
    assert bool(((x - d).abs() <= bound + 1e-6 * float(x.abs().max())).all())


# ------------------------------------------------------------------------------------- activations
def test_quantize_activation_contract():
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    assert humming.quantize_activation(x, "w4a16") is x  # 16-bit activations pass through
    xa = humming.quantize_activation(x, "w8a8-int8")
    assert isinstance(xa, QuantizedActivation) and xa.codes.dtype == torch.uint8 and xa.codes.shape == (2, 3, 64)
    assert xa.scales.shape == (2, 3, 1) and xa.scales.dtype == torch.float32 and xa.dtype == torch.bfloat16
    s = x.float().abs().amax(-1, keepdim=True) / 127
    assert torch.equal(xa.scales, s)
    assert torch.equal(xa.codes.view(torch.int8).float(), torch.round(x.float() / s))
    g = humming.quantize_activation(x, "w4a4-mxfp4")
    assert g.scales.shape == (2, 3, 2) and g.scales.dtype == torch.uint8 and g.global_scale is None
    nv = humming.quantize_activation(x, "w4a4-nvfp4")
    assert nv.scales.shape == (2, 3, 4) and nv.scales.dtype == torch.float8_e4m3fn
    assert nv.global_scale.item() == pytest.approx(x.float().abs().max().item() / (6 * 448), rel=1e-6)
    fixed = humming.quantize_activation(x, "w4a4-nvfp4", global_scale=0.01)
    assert fixed.global_scale.item() == pytest.approx(0.01)
    st_ = humming.quantize_activation(x, "w8a8-fp8-tensor", scale=0.05)
    assert st_.scales.dim() == 0 and st_.scales.item() == pytest.approx(0.05)
    assert torch.equal(st_.codes, formats.get("e4m3").encode(x.float() / st_.scales))
    assert "QuantizedActivation(" in repr(nv) and nv.to("cpu").codes is not None
    with pytest.raises(ShapeError, match="multiple of the activation group size"):
        humming.quantize_activation(torch.randn(2, 40), "w4a4-mxfp4")


def test_encode_scales_guards():
    stored, vals = encode_scales(torch.tensor([0.0, 1e-30, 3.0, float("nan")]), "f16")
    assert vals.tolist()[0] == 1.0 and vals[1] > 0 and vals[2] == 3.0 and vals[3] == 1.0
    stored, vals = encode_scales(torch.tensor([1e-9]), "ue4m3")
    assert vals.item() == 2.0**-9


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["w4a16", "w4a16-zp", "w3a16", "w1a16", "w8a8-int8", "w4a4-nvfp4", "w4a16-mxfp4",
                                  "w8a8-fp8-block", "mxfp6"])
def test_device_results_equal_cpu(name):
    """The oracle is device independent: codes, scales and activations agree bit for bit."""
    w = weights(256, 512, seed=11)
    cpu = humming.quantize(w, name)
    dev = humming.quantize(w.cuda(), name)
    assert torch.equal(dev.packed.cpu(), cpu.packed)
    assert torch.equal(dev.scales.cpu().view(torch.uint8), cpu.scales.view(torch.uint8))
    assert torch.equal(dev.dequantize().cpu(), cpu.dequantize())
    if cpu.scheme.act is not None:
        x = torch.randn(4, 512, dtype=torch.bfloat16)
        xc, xg = humming.quantize_activation(x, name), humming.quantize_activation(x.cuda(), name)
        assert torch.equal(xg.codes.cpu(), xc.codes) and torch.equal(xg.dequantize().cpu(), xc.dequantize())
