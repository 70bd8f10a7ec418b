"""Weights padded to whole 64 x 64 atoms (humming.core.quant.padding) for every preset scheme: the real block of the
padded weight dequantizes to exactly the original, the padding is finite, and with x's padded columns zero (what the
tile kernel reads past the real K) the product's real columns are the original product. Layers prepared for a GPU
profile (on the CPU: planning and packing only) pad once and pack the padded weight."""
from __future__ import annotations

import pytest
import torch

import humming
from humming import api
from humming.core.quant.padding import padded_dims, padded_weight
from humming.errors import ShapeError

# (N, K): odd multiples of 16 in each dimension and both
SHAPES = [(208, 256), (256, 160), (80, 96)]


def _scheme(name: str, k: int) -> str | None:
    sch = humming.schemes.get(name)
    ws = sch.weight_scale
    if ws.granularity == "block":
        return None  # 128x128 blocks: N and K whole blocks (no padded kernel)
    if ws.group_size and k % ws.group_size:
        return f"{name}[group_size=32]" if ws.group_size not in (16, 32) and k % 32 == 0 else None
    return name


@pytest.mark.parametrize("n, k", SHAPES)
@pytest.mark.parametrize("name", humming.schemes.names())
def test_padded_weight_keeps_the_real_block(name, n, k):
    scheme = _scheme(name, k)
    if scheme is None:
        pytest.skip(f"{name}: 128x128 weight blocks, or no group size of its format divides K={k}")
    torch.manual_seed(n + k)
    qw = humming.quantize(torch.randn(n, k) * 0.05, scheme, bias=torch.randn(n))
    n_pad, k_pad = padded_dims(n, k)
    big = padded_weight(qw, n_pad, k_pad)
    assert big.shape == (n_pad, k_pad) and big.scheme == qw.scheme
    full = big.dequantize(torch.float32)
    assert torch.equal(full[:n, :k], qw.dequantize(torch.float32)), "the real block changed"
    assert torch.isfinite(full).all() and torch.equal(big.bias[:n], qw.bias) and not big.bias[n:].any()
    x = torch.randn(3, k)
    x_pad = torch.nn.functional.pad(x, (0, k_pad - k))
    want = humming.reference_gemm(x, qw.with_scheme(qw.scheme.with_(act=None)), out_dtype=torch.float32)
    got = humming.reference_gemm(x_pad, big.with_scheme(big.scheme.with_(act=None)), out_dtype=torch.float32)
    assert torch.allclose(got[:, :n], want, rtol=1e-5, atol=1e-5)


def test_prepared_layer_pads_once_and_packs_the_padded_weight():
    qw = humming.quantize(torch.randn(208, 160) * 0.05, "w4a16[group_size=32]")
    handle = api.prepared(qw, torch.float16, "cpu", profile="nvidia-h100")
    lay = api._registry[handle]
    assert (lay.n, lay.k) == (208, 160) and lay.qw.shape == (256, 192)
    for m in (1, 16, 300):
        plan = lay.plan_for(m)
        assert (plan.n, plan.k, plan.n_out, plan.k_act) == (256, 192, 208, 160) and plan.path != "stream"
    packed = lay.packed_for(lay.plan_for(1), "x")
    assert packed.layout.n == 256 and packed.layout.k == 192
    assert api.prepared(qw, torch.float16, "cpu", profile="nvidia-h100") == handle  # prepared once


@pytest.mark.parametrize("n, k, bad", [(100, 256, "N=100"), (256, 200, "K=200"), (100, 200, "N=100 and K=200 are")])
def test_sizes_not_multiples_of_16_are_named(n, k, bad):
    with pytest.raises(ShapeError, match=bad):
        padded_dims(n, k)


def test_act_order_weights_are_not_padded():
    qw = humming.quantize(torch.randn(208, 256) * 0.05, "w4a16", act_order=True)
    with pytest.raises(ShapeError, match="act-order"):
        padded_weight(qw, 256, 256)
    with pytest.raises(ShapeError, match="act-order"):
        api.prepared(qw, torch.float16, "cpu", profile="nvidia-h100")


def test_static_activation_scale_and_global_scale_are_kept():
    """A static per-tensor activation scale (FP8 checkpoints' input_scale) and NVFP4's global scale survive padding."""
    qw = humming.quantize(torch.randn(208, 256) * 0.05, "w8a8-fp8-tensor")
    qw.input_scale = torch.tensor(0.02)
    big = padded_weight(qw, 256, 256)
    assert big.input_scale is not None and float(big.input_scale) == float(qw.input_scale)
    nv = humming.quantize(torch.randn(208, 256) * 0.05, "w4a16-nvfp4")
    assert nv.global_scale is not None and torch.equal(padded_weight(nv, 256, 256).global_scale, nv.global_scale)
