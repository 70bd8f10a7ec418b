"""Expert-stacked QuantizedWeight: quantize([E, N, K]) is each expert's dense quantize stacked, bit for bit, for every
preset; expert(e) / stack() round trips; the stacked layout's checks and errors."""
from __future__ import annotations

import pytest
import torch

import humming
from humming import schemes
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError, ShapeError

E, N, K = 3, 96, 256  # N = 96: a partial 128-row block for block scales
TENSORS = ("packed", "scales", "zeros", "global_scale", "g_idx", "bias", "input_scale")


def experts_weight(e=E, n=N, k=K, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp(torch.randn(e, n, 1, generator=g))  # experts and rows of different magnitude
    return torch.randn(e, n, k, generator=g) * mag


def bits_of(t: torch.Tensor) -> torch.Tensor:
    """The bytes of a tensor (NaN-safe, dtype-exact comparison)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits_of(a), bits_of(b))


def assert_same_weight(a: QuantizedWeight, b: QuantizedWeight) -> None:
    assert a.scheme == b.scheme and a.shape == b.shape and a.num_experts == b.num_experts
    for name in TENSORS:
        assert same(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize("name", schemes.names())
def test_stacked_quantize_is_each_experts_dense_quantize(name):
    w = experts_weight(seed=len(name))
    qw = humming.quantize(w, name)
    dense = [humming.quantize(w[e], name) for e in range(E)]
    assert qw.num_experts == E and qw.shape == (N, K) and dense[0].num_experts is None
    assert tuple(qw.packed.shape) == (E, *dense[0].packed.shape)
    assert tuple(qw.scales.shape) == (E, *dense[0].scales.shape)
    if dense[0].zeros is not None:
        assert tuple(qw.zeros.shape) == (E, *dense[0].zeros.shape)
    if dense[0].global_scale is not None:
        assert qw.global_scale.dtype == torch.float32 and tuple(qw.global_scale.shape) == (E,)
    for e in range(E):
        assert_same_weight(qw.expert(e), dense[e])
    deq = qw.dequantize(torch.bfloat16)
    assert deq.shape == (E, N, K) and deq.dtype == torch.bfloat16
    assert torch.equal(deq, torch.stack([d.dequantize(torch.bfloat16) for d in dense]))
    assert torch.equal(qw.codes(), torch.stack([d.codes() for d in dense]))
    assert torch.equal(qw.scale_values(), torch.stack([d.scale_values() for d in dense]))
    assert_same_weight(QuantizedWeight.stack(dense), qw)
    assert_same_weight(QuantizedWeight.stack(qw.experts()), qw)


def test_expert_is_a_view():
    qw = humming.quantize(experts_weight(), "w4a16-nvfp4")
    one = qw.expert(2)
    assert one.num_experts is None and one.shape == (N, K)
    assert one.packed.data_ptr() == qw.packed[2].data_ptr()
    assert one.scales.data_ptr() == qw.scales[2].data_ptr()
    assert one.global_scale.data_ptr() == qw.global_scale[2].data_ptr() and one.global_scale.dim() == 0
    with pytest.raises(ShapeError, match=r"expert 3 is out of range \[0, 3\)"):
        qw.expert(3)
    with pytest.raises(ShapeError, match="this one is dense"):
        one.expert(0)
    with pytest.raises(ShapeError, match="this one is dense"):
        one.experts()


def test_act_order_g_idx_is_stacked():
    w = experts_weight(seed=5)
    qw = humming.quantize(w, "w4a16", act_order=True)
    assert qw.scheme.act_order and qw.g_idx.dtype == torch.int32 and tuple(qw.g_idx.shape) == (E, K)
    for e in range(E):
        assert_same_weight(qw.expert(e), humming.quantize(w[e], "w4a16", act_order=True))
    assert not torch.equal(qw.g_idx[0], qw.g_idx[1])  # each expert has its own order
    perms = torch.stack([torch.randperm(K, generator=torch.Generator().manual_seed(e)) for e in range(E)])
    own = humming.quantize(w, "w4a16", act_order=perms)
    for e in range(E):
        assert_same_weight(own.expert(e), humming.quantize(w[e], "w4a16", act_order=perms[e]))
    shared = humming.quantize(w, "w4a16", act_order=perms[0])
    assert torch.equal(shared.g_idx[1], humming.quantize(w[1], "w4a16", act_order=perms[0]).g_idx)
    with pytest.raises(ShapeError, match="act_order of 3 experts"):
        humming.quantize(w, "w4a16", act_order=perms[:2])


def test_bias_and_group_size_options():
    w = experts_weight(seed=6)
    bias = torch.randn(E, N, dtype=torch.bfloat16)
    qw = humming.quantize(w, "w4a16", group_size=64, bias=bias)
    assert qw.scheme.weight_scale.group_size == 64 and torch.equal(qw.bias, bias)
    assert_same_weight(qw.expert(1), humming.quantize(w[1], "w4a16", group_size=64, bias=bias[1]))
    shared = humming.quantize(w, "w4a16", bias=bias[0])
    assert tuple(shared.bias.shape) == (E, N) and torch.equal(shared.bias[2], bias[0])
    with pytest.raises(ShapeError, match="bias of 3 experts"):
        humming.quantize(w, "w4a16", bias=torch.zeros(2, N))
    with pytest.raises(ShapeError, match=r"or \[E, N, K\]"):
        humming.quantize(torch.zeros(2, 2, 3, 4), "w4a16")
    with pytest.raises(ShapeError, match="has no experts"):
        humming.quantize(torch.zeros(0, N, K), "w4a16")


def test_stack_errors():
    w = experts_weight(seed=7)
    a, b = humming.quantize(w[0], "w4a16"), humming.quantize(w[1], "w4a16")
    with pytest.raises(ShapeError, match="at least one"):
        QuantizedWeight.stack([])
    with pytest.raises(ShapeError, match="share one shape"):
        QuantizedWeight.stack([a, humming.quantize(w[1, :64], "w4a16")])
    with pytest.raises(SchemeError, match="differ on weight, zero_point"):
        QuantizedWeight.stack([a, humming.quantize(w[1], "w4a16-zp")])
    with pytest.raises(SchemeError, match="differ on group_size"):
        QuantizedWeight.stack([a, humming.quantize(w[1], "w4a16", group_size=64)])
    with pytest.raises(ShapeError, match="already expert-stacked"):
        QuantizedWeight.stack([a, QuantizedWeight.stack([b])])
    with pytest.raises(ShapeError, match="bias is given for experts 1 but not for experts 0"):
        QuantizedWeight.stack([a, humming.quantize(w[1], "w4a16", bias=torch.zeros(N))])
    with pytest.raises(ShapeError, match="bias has different dtypes"):
        QuantizedWeight.stack([humming.quantize(w[0], "w4a16", bias=torch.zeros(N)),
                               humming.quantize(w[1], "w4a16", bias=torch.zeros(N, dtype=torch.float16))])
    with pytest.raises(ShapeError, match="on meta, expert 0 on cpu"):
        QuantizedWeight.stack([a, b.to("meta")])
    with pytest.raises(ShapeError, match="item 1 is a Tensor"):
        QuantizedWeight.stack([a, w[1]])


def test_stacked_shapes_are_checked():
    qw = humming.quantize(experts_weight(seed=8), "w4a16-nvfp4")
    parts = dict(zeros=qw.zeros, global_scale=qw.global_scale, g_idx=qw.g_idx, bias=qw.bias)
    with pytest.raises(ShapeError, match=r"scales must be \[3, 96, 16\] for .* of 3 experts' 96x256 weights"):
        QuantizedWeight(qw.scheme, qw.shape, qw.packed, qw.scales[:2], **parts)
    assert QuantizedWeight(qw.scheme, qw.shape, qw.packed, qw.scales, num_experts=3, **parts).num_experts == 3
    with pytest.raises(ShapeError, match=r"packed must be int32 \[3, 96, 32\]"):
        QuantizedWeight(qw.scheme, qw.shape, qw.packed[0], qw.scales, num_experts=3, **parts)
    with pytest.raises(ShapeError, match=r"global_scale must hold one value per expert \(3\)"):
        QuantizedWeight(qw.scheme, qw.shape, qw.packed, qw.scales, global_scale=qw.global_scale[:2])
    with pytest.raises(ShapeError, match=r"bias must be \[3, 96\]"):
        QuantizedWeight(qw.scheme, qw.shape, qw.packed, qw.scales, global_scale=qw.global_scale,
                        bias=torch.zeros(N))
    ao = humming.quantize(experts_weight(seed=9), "w4a16", act_order=True)
    with pytest.raises(ShapeError, match=r"g_idx must be int32 \[3, 256\]"):
        QuantizedWeight(ao.scheme, ao.shape, ao.packed, ao.scales, g_idx=ao.g_idx[0])
    zp = humming.quantize(experts_weight(seed=10), "w4a16-zp")
    with pytest.raises(ShapeError, match=r"zeros must be \[3, 96, 2\]"):
        QuantizedWeight(zp.scheme, zp.shape, zp.packed, zp.scales, zeros=zp.zeros[0])
    with pytest.raises(ShapeError, match="expand"):
        zp.expand(zp.scales)
    with pytest.raises(ShapeError, match="group_index"):
        zp.group_index()


def test_from_codes_to_nbytes_repr_and_schemes_keep_the_experts():
    w = experts_weight(seed=11)
    qw = humming.quantize(w, "w4a16-mxfp4")
    again = QuantizedWeight.from_codes(qw.codes(), qw.scheme, qw.scales)
    assert_same_weight(again, qw)
    moved = qw.to("meta")
    assert moved.num_experts == E and moved.packed.device.type == "meta" and moved.packed.shape == qw.packed.shape
    assert_same_weight(qw.to("cpu"), qw)
    assert qw.nbytes == sum(d.nbytes for d in qw.experts())
    text = repr(qw)
    assert "3 experts x 96x256" in text and "4.25 bits/weight" in text
    a4 = qw.with_activations("w4a4-mxfp4")
    assert a4.num_experts == E and a4.scheme.act == "e2m1" and a4.packed is qw.packed
    assert qw.with_scheme(qw.scheme.with_(act="e4m3", act_scale="dynamic_token")).num_experts == E
    nv = humming.quantize(w, "w4a16-nvfp4")
    assert "global_scale[E]" in repr(nv)


def test_stacked_weight_is_not_a_dense_gemm_operand():
    qw = humming.quantize(experts_weight(seed=12), "w4a16")
    x = torch.randn(4, K)
    with pytest.raises(ShapeError, match="reference_gemm .* stacks 3 experts .* humming.moe_gemm"):
        humming.reference_gemm(x, qw)
    with pytest.raises(ShapeError, match="humming.gemm .* grouped_gemm / masked_gemm"):
        humming.gemm(x, qw)
    y = humming.reference_gemm(x, qw.expert(1))
    assert torch.equal(y, humming.reference_gemm(x, humming.quantize(experts_weight(seed=12)[1], "w4a16")))
