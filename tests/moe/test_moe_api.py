"""CPU: the public MoE GEMMs' checks (named errors for bad input) and their CPU path (the reference), including the
expert map of expert parallelism."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.errors import ShapeError


@pytest.fixture(scope="module")
def qw():
    torch.manual_seed(0)
    return humming.quantize(torch.randn(4, 64, 128) * 0.05, "w4a16", group_size=32)


def test_bad_inputs(qw):
    x = torch.randn(3, 128, dtype=torch.bfloat16)
    ids = torch.randint(0, 4, (3, 2))
    with pytest.raises(ShapeError, match="expert-stacked"):
        humming.moe.prepared(humming.quantize(torch.randn(64, 128), "w4a16"), torch.float16, "cpu")
    with pytest.raises(ShapeError, match="K=128"):
        humming.moe_gemm(torch.randn(3, 64, dtype=torch.bfloat16), qw, ids)
    with pytest.raises(ShapeError, match="float16 or bfloat16"):
        humming.moe_gemm(x.int(), qw, ids)
    assert humming.moe_gemm(x.float(), qw, ids).dtype == torch.float32  # (the CPU reference takes any float)
    with pytest.raises(ShapeError, match="topk_ids"):
        humming.moe_gemm(x, qw, ids.reshape(-1))
    with pytest.raises(ShapeError, match=r"\[6, 128\]"):
        humming.moe_gemm(x, qw, ids, gather=False)
    with pytest.raises(ShapeError, match="topk_weights"):
        humming.moe_gemm(x, qw, ids, torch.rand(3, 3))
    meta = torch.device("meta")
    with pytest.raises(ShapeError, match="x's device"):
        humming.moe_gemm(x, qw, ids.to(meta))
    with pytest.raises(ShapeError, match="x's device"):
        humming.moe_gemm(x, qw, ids, torch.rand(3, 2, device=meta))
    with pytest.raises(ShapeError, match="x's device"):
        humming.moe_gemm(x, qw, ids, expert_map=torch.arange(4, device=meta))
    with pytest.raises(ShapeError, match="int32 or int64"):
        humming.moe_gemm(x, qw, ids.float())
    with pytest.raises(ShapeError, match="float tensor"):
        humming.moe_gemm(x, qw, ids, torch.ones(3, 2, dtype=torch.int32))
    with pytest.raises(ShapeError, match="x's device"):
        humming.grouped_gemm(x, qw, torch.tensor([0, 1, 2, 3, 3], device=meta))
    with pytest.raises(ShapeError, match="expert_offsets"):
        humming.grouped_gemm(x, qw, torch.tensor([0, 3]))
    with pytest.raises(ShapeError, match="one slab per expert"):
        humming.masked_gemm(torch.randn(3, 5, 128, dtype=torch.bfloat16), qw, torch.tensor([1, 2, 3]))
    with pytest.raises(ShapeError, match="counts"):
        humming.masked_gemm(torch.randn(4, 5, 128, dtype=torch.bfloat16), qw, torch.tensor([1, 2, 3]))


def test_cpu_path_and_expert_map(qw):
    """On the CPU the reference runs; an expert map turns global ids into the local experts, others give zero rows."""
    x = torch.randn(6, 128, dtype=torch.bfloat16)
    ids = torch.tensor([[0, 5], [7, 2], [1, 1], [6, 4], [3, -1], [2, 6]])  # -1: no expert (zero row)
    expert_map = torch.tensor([-1, 0, -1, 1, -1, 2, -1, 3])  # global experts 1, 3, 5, 7 live here
    y = humming.moe_gemm(x, qw, ids, expert_map=expert_map)
    w = qw.dequantize()
    for t in range(6):
        for j in range(2):
            local = int(expert_map[ids[t, j]]) if ids[t, j] >= 0 else -1
            want = torch.zeros(64) if local < 0 else x[t].float() @ w[local].T
            torch.testing.assert_close(y[t, j].float(), want, atol=2e-2, rtol=2e-2)


def test_quant_moe_cpu_and_errors():
    torch.manual_seed(1)
    e, hidden, inter = 4, 128, 64
    w1, w3 = torch.randn(e, inter, hidden) * 0.05, torch.randn(e, inter, hidden) * 0.05
    w2 = torch.randn(e, hidden, inter) * 0.05
    layer = humming.nn.QuantMoE.from_experts(w1, w2, w3, "w8a16")
    x = torch.randn(5, hidden, dtype=torch.bfloat16)
    ids, tw = torch.randint(0, e, (5, 2)), torch.rand(5, 2)
    y = layer(x, ids, tw)
    # the float computation with the dequantized experts
    g = torch.einsum("th,tjih->tji", x.float(), layer.w13.dequantize()[ids][:, :, :inter])
    u = torch.einsum("th,tjih->tji", x.float(), layer.w13.dequantize()[ids][:, :, inter:])
    o = torch.einsum("tji,tjhi->tjh", torch.nn.functional.silu(g) * u, layer.w2.dequantize()[ids])
    torch.testing.assert_close(y.float(), (o * tw[..., None]).sum(1), atol=3e-2, rtol=3e-2)
    with pytest.raises(ShapeError, match="w2"):
        humming.nn.QuantMoE(layer.w13, layer.w13)
    with pytest.raises(ShapeError, match="expert-stacked"):
        humming.nn.QuantMoE(humming.quantize(w2[0], "w8a16"), layer.w2)
    with pytest.raises(ShapeError, match="w13_bias"):
        humming.nn.QuantMoE(layer.w13, layer.w2, w13_bias=torch.zeros(e, 3))
    with pytest.raises(humming.SchemeError, match="activation"):
        humming.nn.QuantMoE(layer.w13, layer.w2, activation="gelu")


def test_quant_moe_compiles_fullgraph():
    """torch.compile(fullgraph=True) traces the layer through the humming::moe_gemm custom op (its fake gives the
    shapes); the compiled layer matches the eager one."""
    torch.manual_seed(2)
    e, hidden, inter = 4, 128, 64
    layer = humming.nn.QuantMoE.from_experts(torch.randn(e, inter, hidden) * 0.05, torch.randn(e, hidden, inter) * 0.05,
                                             torch.randn(e, inter, hidden) * 0.05, "w4a16", group_size=32).prepare()
    x = torch.randn(5, hidden, dtype=torch.bfloat16)
    ids, tw = torch.randint(0, e, (5, 2)), torch.rand(5, 2)
    compiled = torch.compile(layer, fullgraph=True)
    torch.testing.assert_close(compiled(x, ids, tw).float(), layer(x, ids, tw).float(), atol=1e-2, rtol=1e-2)
    unprepared = humming.quantize(torch.randn(4, 64, 128), "w4a16")
    with pytest.raises(Exception, match="prepare the weight first"):
        torch.compile(lambda a: humming.moe_gemm(a, unprepared, ids), fullgraph=True)(x)


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-a100", "nvidia-b200"])
@pytest.mark.parametrize("scheme", ["w4a16", "w4a8-fp8", "w8a8-fp8"])
def test_zero_tokens_plan_like_one(profile, scheme):
    """An MoE problem of no tokens (an empty batch) plans as one token's does: no tuned-bucket lookup of M=0 (the
    launch is skipped, but moe_gemm, grouped_gemm and masked_gemm plan before they look at the row count)."""
    from humming.core.problem import Problem, scheme_of
    from humming.core.registry import select
    from humming.devices.current import resolve_profile
    from humming.options import resolve

    caps = resolve_profile(profile)
    if scheme == "w4a8-fp8" and profile == "nvidia-a100":
        scheme = "w4a8-int8"
    plans = [select(Problem(scheme_of(scheme), tokens, 768, 2048, "bf16", resolve(None), form="indexed", experts=128,
                            top_k=8), caps).plan for tokens in (0, 1)]
    assert plans[0].kernel_name == plans[1].kernel_name


def test_act_order_slots_keep_their_token_scale():
    """Act-order experts give every slot its own permuted row, so per-token activation scales are repeated per slot,
    also for a single token (whose per-token scales are one value, like a per-tensor scale: the plan tells them
    apart); a 16-bit plan's GS operand is left as it is."""
    from humming.core.problem import Problem, scheme_of
    from humming.core.registry import select
    from humming.core.runtime.moe_layer import per_slot_scales
    from humming.devices.current import resolve_profile
    from humming.options import resolve

    caps = resolve_profile("nvidia-h200")

    def plan(scheme):
        return select(Problem(scheme_of(scheme), 1, 256, 1024, "bf16", resolve(None), form="indexed", experts=8,
                              top_k=2, act_order=True), caps).plan

    one_token = torch.tensor([3.0])
    assert per_slot_scales(one_token, plan("w4a8-fp8"), 2).tolist() == [3.0, 3.0]
    assert per_slot_scales(torch.tensor([1.0, 2.0]), plan("w4a8-fp8"), 2).tolist() == [1.0, 1.0, 2.0, 2.0]
    assert per_slot_scales(one_token, plan("w4a16"), 2) is one_token
    assert per_slot_scales(None, plan("w4a8-fp8"), 2) is None
