"""CPU: the MoE register-A W4A8 kernel (humming.core.families.moe_register_a8: the narrow register-A wgmma W4A8 kernel
over routed rows, 8-bit activation codes) is off by default (moe.w4a8_min_rows null until measured), plans where the
knob turns it on, compiles for sm_90a without spills, and packs padded experts. tests/gpu/test_moe_gpu.py checks its
results with the knob on."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.families.moe_register_a8.layout import prepare_rs8_experts
from humming.core.families.moe_register_a8.planner import PATH
from humming.core.problem import Problem
from humming.core.registry import family_of, kernel_source, select
from humming.core.tuning import knobs
from humming.devices import get_backend
from humming.devices.current import resolve_profile

ON = {"moe.w4a8_min_rows": 64}


def _problem(scheme="w4a8-fp8", tokens=4096, n=1536, k=2048, experts=8, top_k=2, act_order=False):
    return Problem(humming.schemes.get(scheme), tokens, n, k, "bf16", form="indexed", experts=experts, top_k=top_k,
                   act_order=act_order)


def test_off_by_default_and_where_it_applies():
    caps = resolve_profile("nvidia-h200")
    assert select(_problem(), caps).family.name == "moe_register_a"  # (16-bit activation codes)
    with knobs.override(ON):
        assert select(_problem(), caps).family.name == "moe_register_a8"
        assert select(_problem("w4a8-int8"), caps).family.name == "moe_register_a8"
        for other in (_problem(tokens=64), _problem("w4a16"), _problem("w8a8-fp8"), _problem(act_order=True)):
            assert select(other, caps).family.name != "moe_register_a8"
        assert select(_problem(), resolve_profile("nvidia-a100")).family.name == "moe_wna16"


@pytest.mark.parametrize("scheme,n,k", [("w4a8-fp8", 1536, 2048), ("w4a8-int8", 2880, 2880),
                                        ("w4a8-fp8[granularity=channel]", 768, 2048)])
def test_compiles_without_spills(scheme, n, k, compiled_without_spills):
    caps = resolve_profile("nvidia-h200")
    with knobs.override(ON):
        p = select(_problem(scheme, n=n, k=k), caps).plan
    assert p.path == PATH and family_of(p).name == "moe_register_a8" and p.kernel_name.startswith("hm_moe_w4a8_")
    assert (p.tiles.bm, p.tiles.bn, p.tiles.bulk, p.tiles.direct, p.tiles.stsm) == (128, 128, 0, 0, 0)
    src = kernel_source(p, get_backend(caps), caps)
    for routed in ("SORTED[m0 + r]", "EXPERT_IDS[mb]", "my_rows[i] * KA", "TOPK_W + s0", "GS + s0 / a_div"):
        assert routed in src, routed
    assert "wgmma.mma_async" in compiled_without_spills(p, caps).ptx


def test_packs_padded_experts():
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(3, 208, 2880) * 0.05, "w4a8-fp8[granularity=channel,group_size=none]",
                          bias=torch.randn(3, 208))
    ew = prepare_rs8_experts(qw, torch.bfloat16, "e4m3")
    assert (ew.layout.n, ew.layout.k) == (256, 2944) and ew.num_experts == 3
    assert ew.scales.dtype == torch.float32 and ew.bias.shape == (3, 256)
