"""CPU: the MoE wgmma W8A8 kernel (humming.core.families.moe_wgmma_8bit: the lock-step wgmma W8A8 kernel over routed
rows, 8-bit activation codes and weights) is off by default (moe.w8a8_min_rows null until measured), plans where the
knob turns it on, compiles for sm_90a without spills, and packs padded experts. tests/gpu/test_moe_gpu.py checks its
results with the knob on."""
from __future__ import annotations

import re

import pytest
import torch

import humming
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.moe_wgmma_8bit.layout import prepare_w8a8_experts
from humming.core.families.moe_wgmma_8bit.planner import PATH
from humming.core.problem import Problem
from humming.core.registry import family_of, kernel_source, select
from humming.core.tuning import knobs
from humming.devices import get_backend
from humming.devices.current import resolve_profile
from humming.errors import UnsupportedOnDevice

ON = {"moe.w8a8_min_rows": 64}
NAME = "moe_wgmma_8bit"


def _problem(scheme="w8a8-fp8", tokens=4096, n=1536, k=2048, experts=8, top_k=2):
    return Problem(humming.schemes.get(scheme), tokens, n, k, "bf16", form="indexed", experts=experts, top_k=top_k)


def test_off_by_default_and_where_it_applies():
    caps = resolve_profile("nvidia-h200")
    assert select(_problem(), caps).family.name != NAME
    with knobs.override(ON):
        for scheme in ("w8a8-fp8", "w8a8-int8", "w8a8-fp8-block"):
            assert select(_problem(scheme), caps).family.name == NAME, scheme
        refused = {
            "rows": _problem(tokens=64),  # 16 rows per expert on average, under the knob's 64
            "w4a16": _problem("w4a16"),
            "w4a8": _problem("w4a8-fp8"),
            "static activation scale": _problem("w8a8-fp8-tensor"),
            "blocks on a padded shape": _problem("w8a8-fp8-block", n=1536 + 16),
        }
        for why, other in refused.items():
            assert select(other, caps).family.name != NAME, why
        assert select(_problem(), resolve_profile("nvidia-a100")).family.name != NAME
        reasons = " ".join(select(_problem("w8a8-int8", n=96 * 2, k=2048), caps).plan.reasons)
        assert "padded to 256x2048" in reasons and "moe.w8a8_min_rows" in reasons


@pytest.mark.parametrize("scheme,n,k", [("w8a8-fp8", 1536, 2048), ("w8a8-int8", 2880, 2880),
                                        ("w8a8-fp8-block", 512, 7168)])
def test_compiles_without_spills(scheme, n, k):
    try:
        tc = select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    caps = resolve_profile("nvidia-h200")
    with knobs.override(ON):
        p = select(_problem(scheme, n=n, k=k), caps).plan
    assert p.path == PATH and family_of(p).name == NAME and p.kernel_name.startswith("hm_moe_w8a8")
    assert (p.tiles.bm, p.tiles.bulk, p.splits) == (128, 0, 1)
    src = kernel_source(p, get_backend(caps), caps)
    routed = ["SORTED[m0 + r]", "EXPERT_IDS[mb]", "my_rows[i] * KA", "TOPK_W + s", "C + (size_t)row_slot[h] * n_out"]
    routed.append("GS + (size_t)max(a_row[br], 0) * ktiles" if "block" in scheme else "GS + s / a_div")
    for text in routed:
        assert text in src, text
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", toolchain=tc, options=("--ptxas-options=-v",), cache=False)
    assert max(int(r) for r in re.findall(r"Used (\d+) registers", mod.log)) <= 255, mod.log
    assert all(int(s) == 0 for s in re.findall(r"(\d+) bytes spill stores", mod.log)), mod.log
    assert "wgmma.mma_async" in mod.ptx


def test_packs_padded_experts():
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(3, 208, 2880) * 0.05, "w8a8-int8", bias=torch.randn(3, 208))
    ew = prepare_w8a8_experts(qw, torch.bfloat16)
    assert (ew.layout.n, ew.layout.k) == (256, 2944) and ew.num_experts == 3
    assert ew.qweight.dtype == torch.uint8 and ew.stride(ew.qweight) == 256 * 2944  # bytes between two experts
    assert ew.channel_scale.shape == (3, 256) and ew.bias.shape == (3, 256) and ew.scales is None
    codes = ew.qweight.view(3, 256, 2944)
    assert torch.equal(codes[1, :208, :2880], qw.expert(1).codes().to(torch.uint8))  # as stored; padding zero
    assert not codes[:, 208:].any() and not codes[:, :, 2880:].any()
    torch.testing.assert_close(ew.channel_scale[2, :208], qw.expert(2).scale_values().reshape(-1).float())
    block = humming.quantize(torch.randn(2, 256, 384) * 0.05, "w8a8-fp8-block")
    ew = prepare_w8a8_experts(block, torch.bfloat16)
    assert ew.scales.shape == (2, 2, 3) and ew.channel_scale is None and ew.stride(ew.scales) == 6
