"""CPU: QuantMoE.shard_tensor_parallel / shard_expert_parallel (humming.core.moe.sharding): the ranks' outputs sum
to the unsharded layer's output (the reference path), for plain, interleaved, biased, act-order and block-scaled
weights; named errors for splits that do not fit."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.errors import SchemeError, ShapeError

E, H, INTER, T, TOP_K = 4, 128, 256, 7, 2


def _layer(scheme="w4a16", *, experts=E, hidden=H, inter=INTER, bias=False, act_order=False, **kw):
    torch.manual_seed(0)
    w13 = humming.quantize(torch.randn(experts, 2 * inter, hidden) * 0.05, scheme, group_size=kw.pop("group", None),
                           act_order=act_order or None)
    w2 = humming.quantize(torch.randn(experts, hidden, inter) * 0.05, scheme, group_size=kw.pop("group2", None),
                          act_order=act_order or None)
    if bias:
        kw.update(w13_bias=torch.randn(experts, 2 * inter) * 0.1, w2_bias=torch.randn(experts, hidden) * 0.1)
    return humming.nn.QuantMoE(w13, w2, **kw)


def _inputs(experts=E, hidden=H, *, empty_slot=True):
    torch.manual_seed(1)
    x = torch.randn(T, hidden)
    ids = torch.stack([torch.randperm(experts)[:TOP_K] for _ in range(T)])
    if empty_slot:
        ids[0, 1] = -1  # a slot that goes nowhere
    return x, ids, torch.rand(T, TOP_K)


def _sum(shards, x, ids, tw):
    return sum(s(x, ids, tw) for s in shards)


TP_CASES = {
    "plain": dict(group=32, group2=32),
    "interleaved-swiglu-bias": dict(group=32, group2=32, interleaved=True, activation="swiglu_clamped", bias=True),
    "bias": dict(group=32, group2=32, bias=True),
    "act-order": dict(group=32, group2=32, act_order=True, bias=True),
    "act-order-interleaved": dict(group=32, group2=32, act_order=True, interleaved=True),
}


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("case", list(TP_CASES))
def test_tensor_parallel_sums_to_the_layer(case, world):
    layer = _layer(**TP_CASES[case])
    x, ids, tw = _inputs()
    shards = [layer.shard_tensor_parallel(r, world) for r in range(world)]
    assert all(s.intermediate == INTER // world and s.hidden == H for s in shards)
    assert all(s.w2.bias is None for s in shards[1:])
    torch.testing.assert_close(_sum(shards, x, ids, tw), layer(x, ids, tw), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scheme", ["w8a16", "w4a16-nvfp4", "w8a8-fp8-block", "w8a8-fp8-tensor"])
def test_tensor_parallel_scale_layouts(scheme):
    """Channel, two-level (global scale), block scales with group-wise activations inside each slice, static
    per-tensor activation scales: exact splits."""
    layer = _layer(scheme, experts=2, hidden=256, inter=512, bias=True)
    if layer.w2.scheme.act_scale.mode == "static_tensor":  # calibrated scales (else each rank calibrates its slice)
        layer.w13.input_scale, layer.w2.input_scale = torch.full((2,), 0.02), torch.full((2,), 0.01)
    x, ids, tw = _inputs(experts=2, hidden=256)
    shards = [layer.shard_tensor_parallel(r, 2) for r in range(2)]
    torch.testing.assert_close(_sum(shards, x, ids, tw), layer(x, ids, tw), atol=1e-5, rtol=1e-5)


def test_tensor_parallel_errors():
    layer = _layer(group=32, group2=32)
    with pytest.raises(ShapeError, match="multiple of the world size"):
        layer.shard_tensor_parallel(0, 3)
    with pytest.raises(ShapeError, match="group_size 32"):
        layer.shard_tensor_parallel(1, 16)  # 16-channel slices of w2 split its 32-column groups
    with pytest.raises(ShapeError, match="rank"):
        layer.shard_tensor_parallel(2, 2)
    assert layer.shard_tensor_parallel(0, 1).w2 is layer.w2
    block = _layer("w8a8-fp8-block", experts=2, hidden=256, inter=256)
    assert block.shard_tensor_parallel(1, 2).w2.scales.shape == (2, 2, 1)
    with pytest.raises(ShapeError, match="multiples of 128"):
        block.shard_tensor_parallel(0, 4)  # 64-row slices split w13's 128x128 scale blocks
    w2 = humming.quantize(torch.randn(2, 256, 256) * 0.05, "w4a16", group_size=32, act_order=True)
    with pytest.raises(SchemeError, match="reordered"):
        humming.nn.QuantMoE(block.w13, w2).shard_tensor_parallel(0, 2)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_expert_parallel_sums_to_the_layer(world):
    layer = _layer(group=32, group2=32, bias=True)
    x, ids, tw = _inputs(empty_slot=False)
    shards = [layer.shard_expert_parallel(r, world) for r in range(world)]
    assert all(s.num_experts == E // world for s in shards)
    assert torch.equal(shards[-1].expert_map, torch.tensor([-1] * (E - E // world) + list(range(E // world)),
                                                           dtype=torch.int32))
    torch.testing.assert_close(_sum(shards, x, ids, tw), layer(x, ids, tw), atol=1e-6, rtol=1e-6)


def test_expert_then_tensor_parallel():
    """Expert parallelism over 2 ranks, each split 2 ways by tensor parallelism, and a second expert split of a
    layer that already has an expert map: the maps compose, and all parts still sum to the layer."""
    layer = _layer(group=32, group2=32, bias=True)
    x, ids, tw = _inputs(empty_slot=False)
    ep = [layer.shard_expert_parallel(r, 2) for r in range(2)]
    parts = [s.shard_tensor_parallel(t, 2) for s in ep for t in range(2)]
    torch.testing.assert_close(_sum(parts, x, ids, tw), layer(x, ids, tw), atol=1e-5, rtol=1e-5)
    nested = [s.shard_expert_parallel(r, 2) for s in ep for r in range(2)]
    assert torch.equal(nested[3].expert_map, torch.tensor([-1, -1, -1, 0], dtype=torch.int32))
    torch.testing.assert_close(_sum(nested, x, ids, tw), layer(x, ids, tw), atol=1e-6, rtol=1e-6)


def test_expert_parallel_errors():
    layer = _layer(group=32, group2=32)
    with pytest.raises(ShapeError, match="multiple of the world size"):
        layer.shard_expert_parallel(0, 3)
    with pytest.raises(ShapeError, match="rank"):
        layer.shard_expert_parallel(-1, 2)


def test_act_order_down_projection_is_folded():
    """An act-order w2 (GPTQ desc_act): QuantMoE orders every expert's intermediate channels by w2's groups, so w2
    reaches the MoE kernels in natural group order (no g_idx) and the layer's output is that of the given weights."""
    from humming.core.families.moe_wna16.layout import prepare_experts
    from humming.core.moe.reference import reference_moe_layer

    torch.manual_seed(3)
    w13 = humming.quantize(torch.randn(E, 2 * INTER, H) * 0.05, "w4a16", group_size=32)
    w2 = humming.quantize(torch.randn(E, H, INTER) * 0.05, "w4a16", group_size=32, act_order=True)
    b13, b2 = torch.randn(E, 2 * INTER) * 0.1, torch.randn(E, H) * 0.1
    for interleaved in (False, True):
        layer = humming.nn.QuantMoE(w13, w2, w13_bias=b13, w2_bias=b2, interleaved=interleaved)
        assert w2.g_idx is not None and layer.w2.g_idx is None
        x, ids, tw = _inputs()
        want = reference_moe_layer(x, w13, w2, ids, tw, interleaved=interleaved, w13_bias=b13, w2_bias=b2)
        torch.testing.assert_close(layer(x, ids, tw), want, atol=1e-5, rtol=1e-5)
        prepare_experts(layer.w2, torch.float16)  # the MoE kernels' packing takes it


def test_act_order_experts_are_sorted_by_group_when_prepared():
    """Every expert's columns sorted by its own g_idx: the sorted weight, read through ExpertWeights.perm, is the
    given weight; padding (K 2880 -> 2944 atoms) follows the sort."""
    from humming.core.families.moe_wna16.layout import prepare_experts, sorted_by_group

    torch.manual_seed(5)
    qw = humming.quantize(torch.randn(3, 64, 2880) * 0.05, "w4a16", group_size=64, act_order=True)
    ordered, perm = sorted_by_group(qw)
    assert ordered.g_idx is None and perm.dtype == torch.int32 and perm.shape == (3, 2880)
    assert not torch.equal(perm[0], perm[1])  # each expert its own order
    given, sorted_w = qw.dequantize(), ordered.dequantize()
    for e in range(3):
        assert torch.equal(sorted_w[e], given[e][:, perm[e].long()])
    ew = prepare_experts(qw, torch.bfloat16)
    assert torch.equal(ew.perm, perm) and ew.layout.k == 2944
    plain = humming.quantize(torch.randn(2, 64, 256) * 0.05, "w4a16", group_size=64)
    assert sorted_by_group(plain) == (plain, None)
