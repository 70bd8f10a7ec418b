"""The register-A kernels on the layouts the tuning knob register_a.any_group adds (not taken by default until these
pass): e2m1 codes (W4A16-MXFP4 / NVFP4 / FP4: sign and bits under the 16-bit mantissa) and scale groups of 16 / 32 k
(a table row per group in the weight ring; MXINT4, int4 g32), dense (the small form, the two-warpgroup form and
stream-K) and MoE (gpt-oss-shaped experts, W4A16 and W4A8 on widened codes; N of an odd number of 64-channel slabs,
the last block half past N, with a bias), fp16 / bf16, against the reference on
fresh random data with poisoned outputs; each case checks that the register-A kernel ran."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.moe.reference import reference_moe_gemm
from humming.core.runtime import layer as dense_layer

from .conftest import layers_of, rel_error

ANY_GROUP = "register_a.any_group"
TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
# (scheme, group size or None for the scheme's own)
LAYOUTS = [("w4a16-mxfp4", None), ("w4a16-nvfp4", None), ("w4a16-fp4", None), ("mxint4", None), ("w4a16", 32),
           ("w4a16", 16), ("w4a4-nvfp4", None)]  # (W4A4-NVFP4: activations upconverted exactly, the upconvert route)


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _sm90(), reason="the register-A kernels are sm_90a")]


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    monkeypatch.setattr(dense_layer, "POISON_OUTPUTS", True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", LAYOUTS, ids=[f"{n}-g{g}" if g else n for n, g in LAYOUTS])
def test_dense(name, group, dtype, set_knobs):
    set_knobs({ANY_GROUP: True})
    n, k = 1024, 4096
    torch.manual_seed(n + k + len(name) + (group or 0))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, name, group_size=group, bias=bias)
    for m in (16, 100, 1024, 3000):  # the small form (two token tiles), the two-warpgroup form (fitted, stream-K)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        plan = next(lay.launches[m].plan for lay in layers_of(qw, dtype) if m in lay.launches)
        assert plan.path == "wgmma-rs", plan.explain()
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL[dtype], f"{name} g{group} {dtype} M={m}: relative error {err:.2e} ({plan.kernel_name})"


# (scheme, N, K): gpt-oss's K (2880 = 45 atoms) with fewer experts and channels; N of an odd number of 64-channel
# slabs (the last 128-channel block half past N): gpt-oss's down GEMM (2880), Qwen3-30B-A3B's gate+up at TP8 (192)
MOE_CASES = [("w4a16-mxfp4", 768, 2880), ("w4a16-nvfp4", 768, 2880), ("w4a8-mxfp4", 768, 2880),
             ("w4a16-mxfp4", 2880, 2880), ("w4a16", 192, 2048), ("w4a16-zp", 320, 1024)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,n,k", MOE_CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}" for c in MOE_CASES])
def test_moe(name, n, k, dtype, set_knobs):
    set_knobs({ANY_GROUP: True, "moe.wgmma_min_rows": 1, "moe.mma_8bit_min_rows": None})
    e, top_k = 16, 4
    torch.manual_seed(e + n + k + len(name))
    bias = torch.randn(e, n, device="cuda", dtype=torch.float16) if name == "w4a16-zp" else None
    qw = humming.quantize(torch.randn(e, n, k, device="cuda") * 0.05, name, bias=bias)
    for tokens, skew in ((256, False), (1000, True)):
        ids = (torch.randint(0, 3, (tokens, top_k), device="cuda", dtype=torch.int32) if skew else
               torch.rand(tokens, e, device="cuda").argsort(dim=1)[:, :top_k].to(torch.int32))
        plan = humming.moe.prepared(qw, dtype, "cuda").plan_for(tokens, top_k)
        assert plan.path == "moe-wgmma-rs", plan.explain()
        tw = torch.rand(tokens, top_k, device="cuda")
        x = torch.randn(tokens, k, device="cuda", dtype=dtype)
        y = humming.moe_gemm(x, qw, ids, tw)
        ref = reference_moe_gemm(x, qw, ids, tw)
        assert not torch.isnan(y).any(), f"{name} {dtype} T={tokens}: NaN (a row left unwritten)"
        err = (y.float() - ref.float()).abs().max().item()
        assert err <= 2e-2 * ref.float().abs().max().item() + 1e-3, f"{name} {dtype} T={tokens}: max error {err:.3g}"
