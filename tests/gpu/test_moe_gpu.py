"""The MoE GEMMs on the GPU against the reference (humming.core.moe.reference) on fresh random data, outputs poisoned
(NaN) before every launch: every WnA16 scheme, the indexed / grouped / masked forms, skewed routings, expert
parallelism, router weights, real models' shapes (N and K multiples of 16, padded inside) and CUDA-graph capture."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.moe.reference import reference_grouped_gemm, reference_masked_gemm, reference_moe_gemm
from humming.core.runtime import layer as dense_layer

pytestmark = pytest.mark.gpu

WNA16 = ["w4a16", "w4a16-zp", "w8a16", "w8a16-zp", "w3a16", "w2a16", "w1a16-ternary", "w4a16-fp4", "w8a16-fp8",
         "w4a16-nvfp4", "w4a16-mxfp4", "mxint4"]


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(dense_layer, "POISON_OUTPUTS", True)


def stacked(scheme, e: int, n: int, k: int, seed: int, group_size=None, bias: bool = False):
    torch.manual_seed(seed)
    w = torch.randn(e, n, k, device="cuda") * 0.05
    b = torch.randn(e, n, device="cuda", dtype=torch.float16) if bias else None
    return humming.quantize(w, scheme, group_size=group_size, bias=b)


def close(y: torch.Tensor, ref: torch.Tensor, what: str, rel: float = 2e-2) -> None:
    assert y.shape == ref.shape, f"{what}: shape {tuple(y.shape)}, want {tuple(ref.shape)}"
    if not ref.numel():
        return
    assert not torch.isnan(y).any(), f"{what}: NaN in the output (a row left unwritten)"
    err = (y.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    assert err <= rel * scale + 1e-3, f"{what}: max error {err:.3g} vs output scale {scale:.3g}"


def random_ids(tokens: int, top_k: int, experts: int, skew: str = "uniform") -> torch.Tensor:
    if skew == "uniform":  # distinct experts per token
        return torch.rand(tokens, experts, device="cuda").argsort(dim=1)[:, :top_k].to(torch.int32)
    if skew == "one":  # every slot to expert 1
        return torch.ones(tokens, top_k, device="cuda", dtype=torch.int32)
    if skew == "repeat":  # experts repeated within a token, half the experts never used
        return torch.randint(0, max(1, experts // 2), (tokens, top_k), device="cuda", dtype=torch.int32)
    raise ValueError(skew)


@pytest.mark.parametrize("scheme", WNA16)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_moe_gemm_every_scheme(scheme, dtype):
    e, n, k = 8, 192, 512
    group = 32 if scheme in ("w4a16", "w4a16-zp", "w8a16", "w3a16", "w2a16") else None
    qw = stacked(scheme, e, n, k, seed=hash(scheme) % 1000, group_size=group)
    for tokens in (1, 7, 64, 300):
        ids = random_ids(tokens, 2, e)
        tw = torch.rand(tokens, 2, device="cuda")
        x = torch.randn(tokens, k, device="cuda", dtype=dtype)
        y = humming.moe_gemm(x, qw, ids, tw)
        close(y, reference_moe_gemm(x, qw, ids, tw), f"{scheme} {dtype} T={tokens}")


QUANTIZED_ACTIVATIONS = ["w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w4a8-int8", "w4a8-fp8", "w4a8-mxfp4", "mxfp8",
                         "mxfp6", "w4a4-nvfp4", "w4a4-mxfp4", "w8a8-fp8-block"]


@pytest.mark.parametrize("scheme", QUANTIZED_ACTIVATIONS)
def test_moe_gemm_quantized_activations(scheme):
    """W8A8 / W4A8 / W4A4 experts: activations quantized once per token before the gather, as the reference does."""
    e, n, k = 8, 256, 512
    qw = stacked(scheme, e, n, k, seed=hash(scheme) % 1000)
    for tokens, gather in ((1, True), (33, True), (300, True), (40, False)):
        ids = random_ids(tokens, 2, e)
        x = torch.randn(tokens if gather else tokens * 2, k, device="cuda", dtype=torch.bfloat16)
        y = humming.moe_gemm(x, qw, ids, gather=gather)
        close(y, reference_moe_gemm(x, qw, ids, gather=gather), f"{scheme} T={tokens} gather={gather}")


@pytest.mark.parametrize("skew", ["uniform", "one", "repeat"])
@pytest.mark.parametrize("gather", [True, False])
def test_moe_gemm_routings(skew, gather):
    e, n, k, top_k = 16, 256, 256, 4
    qw = stacked("w4a16", e, n, k, seed=3, group_size=64, bias=True)
    for tokens in (0, 1, 5, 129, 1000):
        ids = random_ids(tokens, top_k, e, skew)
        x = torch.randn(tokens if gather else tokens * top_k, k, device="cuda", dtype=torch.bfloat16)
        y = humming.moe_gemm(x, qw, ids, gather=gather)
        assert y.shape == (tokens, top_k, n)
        close(y, reference_moe_gemm(x, qw, ids, gather=gather), f"{skew} gather={gather} T={tokens}")


def test_expert_map():
    """Expert parallelism: 8 of 16 global experts here; slots of the others are zero."""
    e_local, e_global, n, k = 8, 16, 128, 256
    qw = stacked("w4a16", e_local, n, k, seed=5, group_size=128)
    expert_map = torch.full((e_global,), -1, device="cuda", dtype=torch.int32)
    expert_map[1::2] = torch.arange(e_local, device="cuda", dtype=torch.int32)  # odd global experts live here
    ids = random_ids(200, 4, e_global)
    x = torch.randn(200, k, device="cuda", dtype=torch.float16)
    y = humming.moe_gemm(x, qw, ids, expert_map=expert_map)
    close(y, reference_moe_gemm(x, qw, expert_map[ids.long()], None), "expert_map")
    assert (y[expert_map[ids.long()] < 0] == 0).all()


def test_grouped_and_masked():
    e, n, k = 8, 320, 384
    qw = stacked("w4a16-mxfp4", e, n, k, seed=7)
    counts = torch.tensor([0, 5, 17, 1, 64, 0, 33, 2], device="cuda")
    offsets = torch.cat([torch.zeros(1, device="cuda", dtype=torch.int64), counts.cumsum(0)])
    x = torch.randn(int(counts.sum()), k, device="cuda", dtype=torch.bfloat16)
    close(humming.grouped_gemm(x, qw, offsets), reference_grouped_gemm(x, qw, offsets), "grouped")
    xm = torch.randn(e, 40, k, device="cuda", dtype=torch.bfloat16)
    ym = humming.masked_gemm(xm, qw, counts)
    close(ym, reference_masked_gemm(xm, qw, counts), "masked (counts above the capacity clamped)")


# (E, top_k, N, K) of the gate+up and down GEMMs of real models (tensor-parallel slices where named)
MODEL_SHAPES = {
    "deepseek-v3-tp8-gate-up": (256, 8, 512, 7168), "deepseek-v3-tp8-down": (256, 8, 7168, 256),
    "qwen3-30b-a3b-tp8-gate-up": (128, 8, 192, 2048), "qwen3-30b-a3b-tp8-down": (128, 8, 2048, 96),
    "gpt-oss-120b-gate-up": (128, 4, 5760, 2880), "gpt-oss-120b-down": (128, 4, 2880, 2880),
    "mixtral-8x7b-down": (8, 2, 4096, 14336),
}


@pytest.mark.parametrize("name", sorted(MODEL_SHAPES))
def test_model_shapes(name):
    e, top_k, n, k = MODEL_SHAPES[name]
    scheme = "w4a16-mxfp4" if name.startswith("gpt-oss") else "w4a16"
    qw = stacked(scheme, e, n, k, seed=11, group_size=None if scheme != "w4a16" else 32)
    for tokens in (1, 32, 517):
        ids = random_ids(tokens, top_k, e)
        x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16)
        close(humming.moe_gemm(x, qw, ids), reference_moe_gemm(x, qw, ids), f"{name} T={tokens}")


def test_cuda_graph_capture():
    """Routing and the GEMM captured once, replayed with new ids and activations written in place."""
    e, n, k, tokens, top_k = 16, 256, 512, 48, 4
    qw = stacked("w4a16", e, n, k, seed=13, group_size=128)
    x = torch.randn(tokens, k, device="cuda", dtype=torch.float16)
    ids = random_ids(tokens, top_k, e)
    tw = torch.rand(tokens, top_k, device="cuda")
    humming.moe_gemm(x, qw, ids, tw)  # prepared and compiled outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = humming.moe_gemm(x, qw, ids, tw)
    for skew in ("uniform", "one", "repeat"):
        x.copy_(torch.randn_like(x))
        ids.copy_(random_ids(tokens, top_k, e, skew))
        graph.replay()
        torch.cuda.synchronize()
        close(y, reference_moe_gemm(x, qw, ids, tw), f"graph replay {skew}")


@pytest.mark.parametrize("case", ["qwen3-tp8-silu", "gpt-oss-swiglu-bias", "expert-parallel"])
def test_quant_moe_layer(case):
    """The whole layer (routing, gate+up, activation, down with router weights, sum) against the reference layer."""
    from humming.core.moe.reference import reference_moe_layer

    torch.manual_seed(17)
    kw, expert_map = {}, None
    if case == "qwen3-tp8-silu":
        e, top_k, hidden, inter, scheme = 128, 8, 2048, 96, "w4a16"
    elif case == "gpt-oss-swiglu-bias":
        e, top_k, hidden, inter, scheme = 8, 4, 2880, 2880, "w4a16-mxfp4"
        kw = dict(activation="swiglu_clamped", interleaved=True,
                  w13_bias=torch.randn(e, 2 * inter, device="cuda", dtype=torch.bfloat16) * 0.1,
                  w2_bias=torch.randn(e, hidden, device="cuda", dtype=torch.bfloat16) * 0.1)
    else:
        e, top_k, hidden, inter, scheme = 8, 4, 512, 256, "w8a16"
        expert_map = torch.full((16,), -1, device="cuda", dtype=torch.int32)
        expert_map[::2] = torch.arange(8, device="cuda", dtype=torch.int32)
    layer = humming.nn.QuantMoE.from_experts(
        torch.randn(e, inter, hidden, device="cuda") * 0.05, torch.randn(e, hidden, inter, device="cuda") * 0.05,
        torch.randn(e, inter, hidden, device="cuda") * 0.05, scheme, group_size=32 if scheme == "w4a16" else None,
        expert_map=expert_map, **kw)
    experts_seen = 16 if expert_map is not None else e
    for tokens in (1, 64, 700):
        x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
        ids = random_ids(tokens, top_k, experts_seen)
        tw = torch.softmax(torch.randn(tokens, top_k, device="cuda"), dim=1)
        y = layer(x, ids, tw)
        local = ids if expert_map is None else expert_map[ids.long()]
        ref = reference_moe_layer(x, layer.w13, layer.w2, local, tw, activation=layer.activation,
                                  interleaved=layer.interleaved)
        close(y, ref, f"{case} T={tokens}", rel=3e-2)


def small_w4a16_layer(e: int, hidden: int, inter: int, seed: int):
    """A QuantMoE of random W4A16 (group 64) experts on the GPU."""
    torch.manual_seed(seed)
    return humming.nn.QuantMoE.from_experts(torch.randn(e, inter, hidden, device="cuda") * 0.05,
                                            torch.randn(e, hidden, inter, device="cuda") * 0.05,
                                            torch.randn(e, inter, hidden, device="cuda") * 0.05, "w4a16",
                                            group_size=64)


def test_quant_moe_layer_graph():
    """The whole layer captured in a CUDA graph and replayed with new routing."""
    e, top_k, hidden, inter, tokens = 16, 4, 256, 128, 40
    layer = small_w4a16_layer(e, hidden, inter, seed=19)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.float16)
    ids, tw = random_ids(tokens, top_k, e), torch.rand(tokens, top_k, device="cuda")
    layer(x, ids, tw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = layer(x, ids, tw)
    from humming.core.moe.reference import reference_moe_layer

    for skew in ("uniform", "one", "repeat"):
        ids.copy_(random_ids(tokens, top_k, e, skew))
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        close(y, reference_moe_layer(x, layer.w13, layer.w2, ids, tw), f"layer graph {skew}", rel=3e-2)


def test_quant_moe_layer_compiled():
    """torch.compile(fullgraph=True) of the layer on the GPU (the custom op runs the MoE kernels)."""
    from humming.core.moe.reference import reference_moe_layer

    e, top_k, hidden, inter, tokens = 16, 4, 256, 128, 37
    layer = small_w4a16_layer(e, hidden, inter, seed=23).prepare()
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    ids, tw = random_ids(tokens, top_k, e), torch.rand(tokens, top_k, device="cuda")
    y = torch.compile(layer, fullgraph=True)(x, ids, tw)
    close(y, reference_moe_layer(x, layer.w13, layer.w2, ids, tw), "compiled layer", rel=3e-2)


def test_quant_moe_layer_act_order_down_and_block_fp8():
    """GPTQ desc_act experts (gate/up: rows permuted per slot; down: folded into the intermediate order) and
    DeepSeek-V3's 128x128-block FP8
    experts (activations rescaled to 16 bits), whole layers against the reference layer of the given weights."""
    from humming.core.moe.reference import reference_moe_layer

    torch.manual_seed(29)
    e, top_k, hidden, inter = 8, 2, 512, 256
    w13 = humming.quantize(torch.randn(e, 2 * inter, hidden, device="cuda") * 0.05, "w4a16", group_size=64,
                           act_order=True)
    w2 = humming.quantize(torch.randn(e, hidden, inter, device="cuda") * 0.05, "w4a16", group_size=64,
                          act_order=True)
    act_order = humming.nn.QuantMoE(w13, w2)
    assert act_order.w2.g_idx is None
    block = humming.nn.QuantMoE.from_experts(torch.randn(e, inter, hidden, device="cuda") * 0.05,
                                             torch.randn(e, hidden, inter, device="cuda") * 0.05,
                                             torch.randn(e, inter, hidden, device="cuda") * 0.05, "w8a8-fp8-block")
    # block FP8 quantizes the intermediate activations to e4m3 again: where the kernel's 16-bit intermediate and the
    # reference's fp32 one round to neighbouring e4m3 codes (steps of 6-12%), single outputs move by a few percent
    # of the output scale (seen: 3.1% at T=33 on an H100), so its bound is wider and its mean error is checked too
    for name, layer, given, rel in (("act-order", act_order, (w13, w2), 3e-2),
                                    ("block fp8", block, (block.w13, block.w2), 6e-2)):
        for tokens in (1, 33, 300):
            x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
            ids = random_ids(tokens, top_k, e)
            tw = torch.softmax(torch.randn(tokens, top_k, device="cuda"), dim=1)
            y, ref = layer(x, ids, tw), reference_moe_layer(x, *given, ids, tw)
            close(y, ref, f"{name} T={tokens}", rel=rel)
            mean_err = (y.float() - ref.float()).abs().mean().item()
            assert mean_err <= 1.5e-2 * ref.float().abs().max().item() + 1e-4, f"{name} T={tokens}: mean error {mean_err:.3g}"


@pytest.mark.parametrize("scheme", ["w4a16", "w8a16", "w4a8-fp8"])
def test_moe_gemm_act_order(scheme):
    """Act-order experts, each with its own g_idx: every routed row permuted into its expert's column order before
    the GEMM (humming.core.moe.permute_kernel); the tile kernel and, at 2048 tokens, the register-A kernel."""
    from humming.core.moe import permute_kernel

    e, n, k = 8, 256, 1024
    torch.manual_seed(31)
    qw = humming.quantize(torch.randn(e, n, k, device="cuda") * 0.05, scheme, group_size=128, act_order=True)
    permute_kernel._POISON = True
    try:
        for tokens, gather in ((1, True), (37, True), (2048, True), (40, False)):
            ids = random_ids(tokens, 2, e)
            tw = torch.rand(tokens, 2, device="cuda")
            x = torch.randn(tokens if gather else tokens * 2, k, device="cuda", dtype=torch.bfloat16)
            y = humming.moe_gemm(x, qw, ids, tw, gather=gather)
            close(y, reference_moe_gemm(x, qw, ids, tw, gather=gather), f"{scheme} T={tokens} gather={gather}")
    finally:
        permute_kernel._POISON = False


# the 8-bit MoE kernels, off by default until measured: (family, its knob, scheme, N, K); K 1040 and 1056 are padded to 1152,
# N 336 to 384 (not with 128x128 weight blocks)
EIGHT_BIT_FORMS = [("moe_register_a8", "moe.w4a8_min_rows", "w4a8-fp8", 384, 1024),
                   ("moe_register_a8", "moe.w4a8_min_rows", "w4a8-int8", 384, 1024),
                   ("moe_register_a8", "moe.w4a8_min_rows", "w4a8-fp8[granularity=channel,group_size=none]", 384, 1040),
                   ("moe_wgmma_8bit", "moe.wgmma_8bit_min_rows", "w8a8-fp8", 336, 1040),
                   ("moe_wgmma_8bit", "moe.wgmma_8bit_min_rows", "w8a8-int8", 336, 1024),
                   ("moe_wgmma_8bit", "moe.wgmma_8bit_min_rows", "w8a8-fp8-block", 384, 1024),
                   ("moe_wgmma_8bit", "moe.wgmma_8bit_min_rows", "w4a8-mxfp4", 336, 1056),
                   # the mma.sync 8-bit tile kernel's MoE form (sm_80 instructions, run on the Hopper GPU)
                   ("moe_mma_8bit", "moe.mma_8bit_min_rows", "w8a8-int8", 336, 1040),
                   ("moe_mma_8bit", "moe.mma_8bit_min_rows", "w8a8-fp8", 336, 1024),
                   ("moe_mma_8bit", "moe.mma_8bit_min_rows", "w4a8-mxfp4", 336, 1056)]


@pytest.mark.parametrize("family,knob,scheme,n,k", EIGHT_BIT_FORMS)
def test_moe_8bit_kernels_with_their_knob_on(family, knob, scheme, n, k):
    """The MoE register-A W4A8 and wgmma W8A8 kernels (8-bit activation codes) against the reference: gathered and
    per-slot rows, router weights, bias, padded shapes, skewed routing."""
    from humming.core.registry import family_of

    e = 8
    with humming.tuning.override({knob: 16}):
        qw = stacked(scheme, e, n, k, seed=37, bias=True)
        for tokens, gather, skew in ((300, True, "uniform"), (1000, True, "one"), (200, False, "repeat")):
            ids = random_ids(tokens, 2, e, skew)
            tw = torch.rand(tokens, 2, device="cuda")
            x = torch.randn(tokens if gather else tokens * 2, k, device="cuda", dtype=torch.bfloat16)
            plan = humming.moe.prepared(qw, x.dtype, x.device).plan_for(tokens, 2)
            assert family_of(plan).name == family, plan.kernel_name
            y = humming.moe_gemm(x, qw, ids, tw, gather=gather)
            close(y, reference_moe_gemm(x, qw, ids, tw, gather=gather), f"{scheme} T={tokens} {skew} gather={gather}")
