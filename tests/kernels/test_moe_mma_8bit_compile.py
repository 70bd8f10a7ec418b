"""CPU: the MoE mma.sync 8-bit kernel (humming.core.families.moe_mma_8bit: the 8-bit tile kernel over routed rows, W8A8
codes as stored and W4A8 codes widened in registers, 8-bit activation codes) takes MoE GEMMs from
moe.mma_8bit_min_rows rows per expert (128 by default; fewer: the MoE tile kernel on 16-bit codes), plans where the
knob lets it on every profile with 8-bit mma.sync forms, compiles there without spills, and packs padded experts. tests/gpu/test_moe_gpu.py checks its results with the knob on."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.capabilities import list_profiles
from humming.core.families.moe_mma_8bit.layout import prepare_8bit_experts
from humming.core.families.moe_mma_8bit.planner import PATH
from humming.core.problem import Problem
from humming.core.registry import family_of, kernel_source, select
from humming.core.tuning import knobs
from humming.devices import get_backend
from humming.devices.current import resolve_profile

ON = {"moe.mma_8bit_min_rows": 16}
NAME = "moe_mma_8bit"
SCHEMES = ("w8a8-int8", "w8a8-fp8", "w4a8-int8", "w4a8-fp8", "w4a8-mxfp4")
PROFILES = [c for c in list_profiles(include_abstract=False) if c.target.arch]


def _problem(scheme="w8a8-int8", tokens=4096, n=336, k=2880, act="f16", experts=8, top_k=2):
    return Problem(humming.schemes.get(scheme), tokens, n, k, act, form="indexed", experts=experts, top_k=top_k)


def test_rows_threshold_and_where_it_applies():
    a100 = resolve_profile("nvidia-a100")
    assert knobs.value("moe.mma_8bit_min_rows", a100) == 128
    assert select(_problem(tokens=4096), a100).family.name == NAME  # 1024 rows per expert
    assert select(_problem(tokens=256), a100).family.name != NAME  # 64
    with knobs.override(ON):
        for scheme in ("w8a8-int8", "w4a8-int8"):
            chosen = select(_problem(scheme), a100)
            assert chosen.family.name == NAME, scheme
            assert "padded to 384x2944" in " ".join(chosen.plan.reasons)
        for scheme in ("w8a8-fp8", "w4a8-fp8", "w4a8-mxfp4"):  # (fp8 from Ada on)
            assert select(_problem(scheme), resolve_profile("nvidia-l40s")).family.name == NAME, scheme
        refused = {
            "rows": _problem(tokens=32),  # 8 rows per expert on average, under the knob's 16
            "w4a16": _problem("w4a16"),
            "block scales": _problem("w8a8-fp8-block", n=384, k=2944),
            "static activation scale": _problem("w8a8-fp8-tensor"),
            "A100 has no e4m3 mma": _problem("w8a8-fp8"),
        }
        for why, other in refused.items():
            profile = "nvidia-l40s" if why in ("block scales", "static activation scale") else "nvidia-a100"
            assert select(other, resolve_profile(profile)).family.name != NAME, why


@pytest.mark.parametrize("caps", PROFILES, ids=[c.name for c in PROFILES])
def test_compiles_without_spills_on_every_8bit_profile(caps, compiled_without_spills):
    taken = []
    with knobs.override(ON):
        for scheme in SCHEMES:
            try:
                chosen = select(_problem(scheme), caps)
            except humming.HummingError:
                continue
            if chosen.family.name == NAME:
                taken.append(chosen.plan)
    if not taken:
        pytest.skip(f"{caps.name}: no 8-bit mma.sync MoE form (other kernels take these schemes)")
    for p in taken:
        assert p.path == PATH and family_of(p).name == NAME and p.kernel_name.startswith("hm_moe_w")
        assert (p.tiles.bm, p.tiles.bn, p.splits) == (64, 128, 1)
        src = kernel_source(p, get_backend(caps), caps)
        for routed in ("slot_of_row[r] = SORTED[m0 + r]", "EXPERT_IDS[mb]", "(size_t)(slot / a_div) * KA",
                       "GS + slot / a_div", "C + (size_t)slot * n_out + col", "TOPK_W + slot"):
            assert routed in src, (p.kernel_name, routed)
        assert "mma.sync" in compiled_without_spills(p, caps).ptx


def test_packs_padded_experts():
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(3, 208, 2880) * 0.05, "w8a8-int8", bias=torch.randn(3, 208))
    a100 = resolve_profile("nvidia-a100")
    with knobs.override(ON):
        p = select(_problem("w8a8-int8", n=208, k=2880), a100).plan
    ew = prepare_8bit_experts(qw, torch.float16, p.layout)
    assert (ew.layout.n, ew.layout.k) == (256, 2944) and ew.num_experts == 3 and ew.qweight.dtype == torch.int32
    assert ew.stride(ew.qweight) == 256 * 2944 // 4 and ew.channel_scale.shape == (3, 256)
    torch.testing.assert_close(ew.channel_scale[1, :208], qw.expert(1).scale_values().reshape(-1).float())
    w4 = humming.quantize(torch.randn(2, 208, 2880) * 0.05, "w4a8-int8", group_size=64)
    with knobs.override(ON):
        p = select(_problem("w4a8-int8", n=208, k=2880), a100).plan
    ew = prepare_8bit_experts(w4, torch.float16, p.layout)
    assert ew.stride(ew.qweight) == 256 * 2944 // 8 and ew.scales.shape[0] == 2 and ew.channel_scale is None
