"""The MoE oracle (humming.core.moe.reference) against direct computations: float experts, quantized experts through
humming.reference_gemm, the grouped and masked forms, and the full expert MLP with SiLU and gpt-oss's SwiGLU."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.moe.reference import (
    reference_activation,
    reference_grouped_gemm,
    reference_masked_gemm,
    reference_moe_gemm,
    reference_moe_layer,
)
from humming.errors import SchemeError, ShapeError


def gen(seed: int = 0):
    return torch.Generator().manual_seed(seed)


def random_ids(t: int, k: int, e: int, seed: int = 0, holes: bool = True) -> torch.Tensor:
    ids = torch.randint(0, e, (t, k), generator=gen(seed))
    if holes:
        ids[1, 0] = -1  # a slot with no expert
    ids[2, :] = ids[2, 0]  # a token naming one expert for every choice
    return ids


class Stacked:
    """A stacked quantized weight, by duck typing: num_experts and expert(e)."""

    def __init__(self, experts):
        self.experts = experts
        self.num_experts = len(experts)

    def expert(self, e):
        return self.experts[e]


# ------------------------------------------------------------------------------------------------- indexed form
@pytest.mark.parametrize("gather", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float_experts_equal_a_direct_product(gather, dtype):
    t, k, e, n, kk = 9, 3, 5, 24, 32
    rows = t if gather else t * k
    x = torch.randn(rows, kk, generator=gen(1)).to(dtype)
    w = torch.randn(e, n, kk, generator=gen(2)).to(dtype)
    ids = random_ids(t, k, e)
    tw = torch.rand(t, k, generator=gen(3))
    out = reference_moe_gemm(x, w, ids, tw, gather=gather)
    assert out.shape == (t, k, n) and out.dtype == dtype
    want = torch.zeros(t, k, n)
    for i in range(t):
        for j in range(k):
            if ids[i, j] >= 0:
                row = x[i] if gather else x[i * k + j]
                want[i, j] = tw[i, j] * (w[ids[i, j]].float() @ row.float())
    assert torch.allclose(out.float(), want.to(dtype).float(), rtol=1e-5, atol=1e-5)
    assert torch.equal(out[1, 0], torch.zeros(n, dtype=dtype))
    # no topk_weights: unscaled; ids may be int32
    plain = reference_moe_gemm(x, w, ids.int(), gather=gather)
    assert torch.allclose((plain.float() * tw[..., None]), out.float(), rtol=2e-2 if dtype == torch.bfloat16 else 1e-5)


@pytest.mark.parametrize("scheme", ["w4a16", "w8a8-int8", "w4a8-fp8"])
def test_quantized_experts_equal_reference_gemm_per_expert(scheme):
    t, k, e, n, kk = 7, 2, 3, 16, 128
    x = torch.randn(t, kk, generator=gen(4)).to(torch.bfloat16)
    qws = [humming.quantize(torch.randn(n, kk, generator=gen(10 + i)), scheme) for i in range(e)]
    ids = random_ids(t, k, e, seed=5)
    for weights in (qws, tuple(qws), Stacked(qws)):
        out = reference_moe_gemm(x, weights, ids)
        assert out.dtype == torch.bfloat16
        for i in range(t):
            for j in range(k):
                if ids[i, j] < 0:
                    assert not out[i, j].any()
                    continue
                want = humming.reference_gemm(x[i:i + 1], qws[ids[i, j]])[0]  # per-token activation scales
                assert torch.equal(out[i, j], want)


def test_a_static_activation_scale_is_calibrated_once_over_all_rows():
    """w8a8-fp8-tensor without a calibrated input_scale: every expert sees the scale of all of x, as a kernel that
    quantizes x once does (not a scale of its own rows)."""
    t, k, e, n, kk = 6, 2, 3, 8, 64
    x = torch.randn(t, kk, generator=gen(6))
    x[4] *= 10  # the largest row decides the tensor scale
    qws = [humming.quantize(torch.randn(n, kk, generator=gen(20 + i)), "w8a8-fp8-tensor") for i in range(e)]
    ids = torch.tensor([[0, 1], [1, 2], [2, 0], [0, 0], [1, 1], [2, 2]])
    out = reference_moe_gemm(x, qws, ids)
    for i in range(t):
        for j in range(k):
            assert torch.equal(out[i, j], humming.reference_gemm(x, qws[ids[i, j]])[i])


def test_minus_one_everywhere_gives_zeros():
    x = torch.randn(3, 16)
    out = reference_moe_gemm(x, torch.randn(2, 4, 16), torch.full((3, 2), -1))
    assert out.shape == (3, 2, 4) and not out.any()


# ------------------------------------------------------------------------------------------------- grouped forms
def test_grouped_gemm():
    e, n, kk, rows = 4, 8, 32, 13
    x = torch.randn(rows, kk, generator=gen(7))
    w = torch.randn(e, n, kk, generator=gen(8))
    offsets = torch.tensor([1, 5, 5, 11, 12])  # row 0 and row 12 in no expert; expert 1 empty
    out = reference_grouped_gemm(x, w, offsets)
    assert out.shape == (rows, n)
    want = torch.zeros(rows, n)
    for ex, (a, b) in enumerate(zip(offsets.tolist(), offsets.tolist()[1:])):
        want[a:b] = x[a:b] @ w[ex].t()
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-5)
    qws = [humming.quantize(w[i], "w4a16", group_size=32) for i in range(e)]
    q = reference_grouped_gemm(x, qws, offsets)
    assert torch.equal(q[5:11], humming.reference_gemm(x[5:11], qws[2]))


def test_masked_gemm():
    e, cap, n, kk = 3, 5, 8, 32
    x = torch.randn(e, cap, kk, generator=gen(9))
    w = torch.randn(e, n, kk, generator=gen(10))
    counts = torch.tensor([2, 0, 9], dtype=torch.int32)  # 9 > cap: clamped to 5
    out = reference_masked_gemm(x, w, counts)
    assert out.shape == (e, cap, n)
    want = torch.zeros(e, cap, n)
    want[0, :2] = x[0, :2] @ w[0].t()
    want[2] = x[2] @ w[2].t()
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------- the expert MLP
def test_swiglu_clamped_is_gpt_oss_definition():
    # gate, up = 10, -9: gate clamped to 7, up clamped to -7: 7 * sigmoid(1.702 * 7) * (-7 + 1)
    h = torch.tensor([10.0, -9.0])
    got = reference_activation(h, "swiglu_clamped", interleaved=True)
    assert torch.allclose(got, torch.tensor([7 * torch.sigmoid(torch.tensor(1.702 * 7)).item() * -6]))
    g, u = torch.randn(2, 4, 6, generator=gen(11)) * 5
    want = g.clamp(max=7) * torch.sigmoid(1.702 * g.clamp(max=7)) * (u.clamp(-7, 7) + 1)
    assert torch.allclose(reference_activation(torch.cat([g, u], -1), "swiglu_clamped"), want)
    inter = torch.stack([g, u], -1).flatten(-2)  # g0 u0 g1 u1 ...
    assert torch.allclose(reference_activation(inter, "swiglu_clamped", interleaved=True), want)
    assert torch.allclose(reference_activation(torch.cat([g, u], -1), "silu"), torch.nn.functional.silu(g) * u)
    assert torch.allclose(reference_activation(torch.cat([g, u], -1), "swiglu_clamped", alpha=1.0, limit=2.0),
                          g.clamp(max=2) * torch.sigmoid(g.clamp(max=2)) * (u.clamp(-2, 2) + 1))


def layer_by_hand(x, w13, w2, ids, tw, act, b13=None, b2=None):
    t, k = ids.shape
    inter = w13.shape[1] // 2
    y = torch.zeros(t, w2.shape[1], dtype=torch.float64)
    for i in range(t):
        for j in range(k):
            e = int(ids[i, j])
            if e < 0:
                continue
            h = w13[e].double() @ x[i].double() + (0 if b13 is None else b13[e].double())
            gate, up = h[:inter], h[inter:]
            if act == "silu":
                a = gate * torch.sigmoid(gate) * up
            else:
                gate, up = gate.clamp(max=7.0), up.clamp(-7.0, 7.0)
                a = gate * torch.sigmoid(1.702 * gate) * (up + 1)
            o = w2[e].double() @ a + (0 if b2 is None else b2[e].double())
            y[i] += tw[i, j].double() * o
    return y.float()


@pytest.mark.parametrize("act", ["silu", "swiglu_clamped"])
def test_layer_equals_the_formula(act):
    t, k, e, hid, inter = 8, 2, 4, 32, 16
    x = torch.randn(t, hid, generator=gen(12))
    w13 = torch.randn(e, 2 * inter, hid, generator=gen(13)) * 0.3
    w2 = torch.randn(e, hid, inter, generator=gen(14)) * 0.3
    ids = random_ids(t, k, e, seed=15)
    tw = torch.softmax(torch.randn(t, k, generator=gen(16)), -1)
    b13, b2 = torch.randn(e, 2 * inter, generator=gen(17)), torch.randn(e, hid, generator=gen(18))
    got = reference_moe_layer(x, w13, w2, ids, tw, activation=act)
    assert got.shape == (t, hid) and got.dtype == torch.float32
    assert torch.allclose(got, layer_by_hand(x, w13, w2, ids, tw, act), rtol=1e-4, atol=1e-4)
    got = reference_moe_layer(x, w13, w2, ids, tw, activation=act, w13_bias=b13, w2_bias=b2)
    assert torch.allclose(got, layer_by_hand(x, w13, w2, ids, tw, act, b13, b2), rtol=1e-4, atol=1e-4)
    # the gpt-oss checkpoint layout: gate/up rows interleaved; same layer once the rows are permuted
    perm = torch.stack([torch.arange(inter), torch.arange(inter) + inter], -1).flatten()
    inter_got = reference_moe_layer(x, w13[:, perm], w2, ids, tw, activation=act, interleaved=True,
                                    w13_bias=b13[:, perm], w2_bias=b2)
    assert torch.allclose(inter_got, got, rtol=1e-5, atol=1e-5)


def test_layer_with_quantized_experts():
    t, k, e, hid, inter = 5, 2, 3, 128, 128
    x = torch.randn(t, hid, generator=gen(19)).to(torch.bfloat16)
    w13 = torch.randn(e, 2 * inter, hid, generator=gen(20)) * 0.1
    w2 = torch.randn(e, hid, inter, generator=gen(21)) * 0.1
    q13 = [humming.quantize(w13[i], "w4a16") for i in range(e)]
    q2 = [humming.quantize(w2[i], "w4a16") for i in range(e)]
    ids = random_ids(t, k, e, seed=22)
    tw = torch.rand(t, k, generator=gen(23))
    got = reference_moe_layer(x, q13, Stacked(q2), ids, tw)
    d13 = torch.stack([q.dequantize() for q in q13])
    d2 = torch.stack([q.dequantize() for q in q2])
    assert got.dtype == torch.bfloat16
    want = layer_by_hand(x.float(), d13, d2, ids, tw, "silu").to(torch.bfloat16)
    assert torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------------------------------------------- errors
def test_bad_input_is_named():
    x, w, ids = torch.randn(4, 16), torch.randn(3, 8, 16), torch.zeros(4, 2, dtype=torch.int64)
    with pytest.raises(ShapeError, match=r"topk_ids\[0, 1\] = 3 is not an expert id"):
        reference_moe_gemm(x, w, torch.tensor([[0, 3], [0, 0], [0, 0], [0, 0]]))
    with pytest.raises(ShapeError, match="K=12 features, weights expects K=16"):
        reference_moe_gemm(torch.randn(4, 12), w, ids)
    with pytest.raises(ShapeError, match=r"x must be \[T \* top_k, K\].*8 rows"):
        reference_moe_gemm(x, w, ids, gather=False)
    with pytest.raises(ShapeError, match="x must be a float tensor"):
        reference_moe_gemm(x.int(), w, ids)
    with pytest.raises(ShapeError, match="topk_weights must be"):
        reference_moe_gemm(x, w, ids, torch.ones(4, 3))
    with pytest.raises(ShapeError, match="topk_ids must be an int32/int64 2-D tensor"):
        reference_moe_gemm(x, w, ids.float())
    with pytest.raises(ShapeError, match=r"weights as a tensor must be float \[E, N, K\]"):
        reference_moe_gemm(x, w[0], ids)
    with pytest.raises(ShapeError, match="must be a float tensor \\[E, N, K\\], a list"):
        reference_moe_gemm(x, "w4a16", ids)
    with pytest.raises(ShapeError, match="experts have different shapes"):
        reference_moe_gemm(x, [w[0], w[1, :4]], ids)
    with pytest.raises(ShapeError, match="has no experts"):
        reference_moe_gemm(x, [], ids)
    with pytest.raises(ShapeError, match="non-decreasing"):
        reference_grouped_gemm(x, w, torch.tensor([0, 3, 2, 4]))
    with pytest.raises(ShapeError, match=r"expert_offsets must be \[4\]"):
        reference_grouped_gemm(x, w, torch.tensor([0, 4]))
    with pytest.raises(ShapeError, match="counts must be non-negative"):
        reference_masked_gemm(torch.randn(3, 2, 16), w, torch.tensor([1, -1, 0]))
    with pytest.raises(ShapeError, match=r"x must be \[E=3, cap, K\]"):
        reference_masked_gemm(torch.randn(2, 2, 16), w, torch.tensor([1, 1, 0]))
    with pytest.raises(SchemeError, match="activation 'gelu' is unknown"):
        reference_activation(torch.randn(4), "gelu")
    with pytest.raises(ShapeError, match="even last dimension"):
        reference_activation(torch.randn(5))
    w13, w2 = torch.randn(3, 8, 16), torch.randn(3, 16, 4)
    tw = torch.ones(4, 2)
    with pytest.raises(ShapeError, match=r"w2 must be \[E, H=16, I=4\]"):
        reference_moe_layer(x, w13, torch.randn(3, 16, 5), ids, tw)
    with pytest.raises(ShapeError, match="w13 has 3 experts, w2 has 2"):
        reference_moe_layer(x, w13, w2[:2], ids, tw)
    with pytest.raises(ShapeError, match="its N=7 is odd"):
        reference_moe_layer(x, w13[:, :7], w2, ids, tw)
    with pytest.raises(ShapeError, match=r"w13_bias must be a float tensor \[3, 8\]"):
        reference_moe_layer(x, w13, w2, ids, tw, w13_bias=torch.zeros(3, 4))
