"""The MoE register-A kernel (sm_90a: int4 experts decoded in registers as wgmma's A, rows gathered through the
routing) on the GPU against the reference MoE on fresh random data, outputs poisoned before every launch: group,
zero-point and per-channel int4 weights, W4A8 (codes widened, per-token scales), padded K, bias, router weights,
skewed routings, gathered and per-slot activations, fp16 / bf16, and a whole layer. Each case asserts that the
register-A plan ran (skips where the GPU has no wgmma)."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.moe.reference import reference_moe_gemm, reference_moe_layer
from humming.core.runtime import layer as dense_layer

pytestmark = pytest.mark.gpu

PATH = "moe-wgmma-rs"


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(dense_layer, "POISON_OUTPUTS", True)


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def stacked(scheme, e, n, k, seed, group_size=None, bias=False):
    torch.manual_seed(seed)
    w = torch.randn(e, n, k, device="cuda") * 0.05
    b = torch.randn(e, n, device="cuda", dtype=torch.float16) if bias else None
    return humming.quantize(w, scheme, group_size=group_size, bias=b)


def close(y, ref, what, rel=2e-2):
    assert y.shape == ref.shape, f"{what}: shape {tuple(y.shape)}, want {tuple(ref.shape)}"
    assert not torch.isnan(y).any(), f"{what}: NaN in the output (a row left unwritten)"
    err = (y.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    assert err <= rel * scale + 1e-3, f"{what}: max error {err:.3g} vs output scale {scale:.3g}"


def random_ids(tokens, top_k, experts, skew="uniform"):
    if skew == "uniform":
        return torch.rand(tokens, experts, device="cuda").argsort(dim=1)[:, :top_k].to(torch.int32)
    if skew == "one":  # every slot to expert 1: one expert's run spans many token tiles
        return torch.ones(tokens, top_k, device="cuda", dtype=torch.int32)
    return torch.randint(0, max(1, experts // 2), (tokens, top_k), device="cuda", dtype=torch.int32)  # repeats


def the_plan(qw, dtype, tokens, top_k):
    return humming.moe.prepared(qw, dtype, "cuda").plan_for(tokens, top_k)


# (scheme, group, E, top_k, N, K, tokens): token tiles of 64 and 128, K padded (96 -> 128, 2880 -> 2944), N = 384
CASES = [("w4a16", 128, 8, 2, 256, 512, (300, 1000)), ("w4a16-zp", 64, 16, 4, 384, 1024, (200, 777)),
         ("w4a16", -1, 8, 2, 512, 2880, (256,)), ("w4a16", -1, 32, 8, 1024, 96, (512,)),
         ("w4a16", 128, 128, 8, 1536, 2048, (2048,)), ("w4a8-fp8", None, 8, 2, 256, 512, (300,)),
         ("w4a8-int8", None, 8, 2, 256, 512, (300,))]


@pytest.mark.skipif(not _sm90(), reason="the MoE register-A kernel is sm_90a")
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-g{c[1]}-E{c[2]}-{c[4]}x{c[5]}" for c in CASES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_moe_register_a(case, dtype):
    scheme, group, e, top_k, n, k, token_list = case
    qw = stacked(scheme, e, n, k, seed=n + k, group_size=group, bias=scheme == "w4a16-zp")
    for tokens in token_list:
        plan = the_plan(qw, dtype, tokens, top_k)
        assert plan.path == PATH, plan.explain()
        ids = random_ids(tokens, top_k, e)
        tw = torch.rand(tokens, top_k, device="cuda")
        x = torch.randn(tokens, k, device="cuda", dtype=dtype)
        close(humming.moe_gemm(x, qw, ids, tw), reference_moe_gemm(x, qw, ids, tw), f"{case} {dtype} T={tokens}")


@pytest.mark.skipif(not _sm90(), reason="the MoE register-A kernel is sm_90a")
@pytest.mark.parametrize("skew", ["one", "repeat"])
@pytest.mark.parametrize("gather", [True, False])
def test_moe_register_a_routings(skew, gather):
    e, n, k, top_k, tokens = 16, 256, 512, 4, 1500
    qw = stacked("w4a16", e, n, k, seed=3, group_size=128, bias=True)
    assert the_plan(qw, torch.bfloat16, tokens, top_k).path == PATH
    ids = random_ids(tokens, top_k, e, skew)
    x = torch.randn(tokens if gather else tokens * top_k, k, device="cuda", dtype=torch.bfloat16)
    y = humming.moe_gemm(x, qw, ids, gather=gather)
    close(y, reference_moe_gemm(x, qw, ids, gather=gather), f"{skew} gather={gather}")


@pytest.mark.skipif(not _sm90(), reason="the MoE register-A kernel is sm_90a")
def test_moe_register_a_layer():
    """Qwen3-30B-A3B's expert shapes (E 128, top-8, H 2048, I 768) at T=1024: both GEMMs on the register-A kernel."""
    e, top_k, hidden, inter, tokens = 128, 8, 2048, 768, 1024
    torch.manual_seed(29)
    layer = humming.nn.QuantMoE.from_experts(
        torch.randn(e, inter, hidden, device="cuda") * 0.05, torch.randn(e, hidden, inter, device="cuda") * 0.05,
        torch.randn(e, inter, hidden, device="cuda") * 0.05, "w4a16", group_size=128)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    assert the_plan(layer.w13, torch.bfloat16, tokens, top_k).path == PATH
    assert the_plan(layer.w2, torch.bfloat16, tokens, top_k).path == PATH
    ids = random_ids(tokens, top_k, e)
    tw = torch.softmax(torch.randn(tokens, top_k, device="cuda"), dim=1)
    close(layer(x, ids, tw), reference_moe_layer(x, layer.w13, layer.w2, ids, tw), "layer", rel=3e-2)
