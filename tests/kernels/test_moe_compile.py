"""CPU: the MoE WnA16 kernel is planned for every shipped profile with mma.sync, generated and compiled (NVRTC, ptxas
verbose: no spills); its PTX holds the mma.sync of the profile and the routing reads. Plans explain their token
tile, padding and the MoE registry's refusals."""
from __future__ import annotations

import re

import pytest

from humming.capabilities import list_profiles
from humming.core.families.moe_wna16.layout import padded_shape
from humming.core.families.moe_wna16.planner import token_tile
from humming.core.problem import Problem, scheme_of
from humming.core.registry import refusal, select
from humming.core.tuning import knobs
from humming.devices.current import resolve_profile
from humming.errors import ShapeError, UnsupportedOnDevice

PROFILES = [p for p in list_profiles(include_abstract=False) if p.find_mma(family="mma_sync")]
# (scheme, act, tokens, experts, top_k, N, K): each token tile, a padded shape, zero points, floats
CASES = [("w4a16", "f16", 1, 256, 8, 512, 7168), ("w4a16-zp", "f16", 300, 8, 2, 4096, 1024),
         ("w4a16", "bf16", 8192, 8, 2, 4096, 1024), ("w4a8-fp8", "bf16", 8192, 8, 2, 4096, 1024),
         ("w8a8-int8", "f16", 8, 8, 2, 4096, 1024),
         ("w8a16-fp8", "bf16", 4096, 128, 8, 192, 2048), ("w4a16-mxfp4", "bf16", 40, 32, 4, 2880, 2880)]


def moe_problem(scheme, act, tokens, experts, top_k, n, k):
    sch = scheme_of(scheme)
    if sch.weight_scale.granularity == "group" and k % sch.weight_scale.group_size:
        sch = sch.with_(group_size=32)
    return Problem(sch, tokens, n, k, act, form="indexed", experts=experts, top_k=top_k)


@pytest.mark.parametrize("profile", PROFILES, ids=[p.name for p in PROFILES])
def test_moe_kernel_compiles(profile, compiled_without_spills):
    # the tile kernel everywhere (sm_90a: the register-A form's prefill cases are test_moe_register_a_compile.py's;
    # 8-bit activation codes from 128 rows per expert: test_moe_mma_8bit_compile.py's)
    with knobs.override({"moe.wgmma_min_rows": None, "moe.mma_8bit_min_rows": None}):
        _compile_cases(profile, compiled_without_spills)


def _compile_cases(profile, compiled_without_spills):
    for case in CASES:
        act = case[1]
        if not profile.find_mma(family="mma_sync", a_type=act):
            with pytest.raises(UnsupportedOnDevice):
                select(moe_problem(*case), profile)
            continue
        plan = select(moe_problem(*case), profile).plan
        assert plan.tiles.bm == token_tile(case[2], case[4], case[3], knobs.value("moe.max_token_tile", profile))
        mod = compiled_without_spills(plan, profile)
        ptx = mod.ptx
        assert re.search(r"mma\.sync\.aligned\.m16n8k(16|8)", ptx), plan.kernel_name
        assert plan.kernel_name.startswith("hm_wna16_moe_")
        assert "wgmma" not in ptx and "tcgen05" not in ptx


def test_token_tile_and_padding():
    assert token_tile(1, 8, 256) == 16 and token_tile(512, 8, 256) == 16 and token_tile(1024, 8, 256) == 32
    assert token_tile(8192, 8, 256) == 128 and token_tile(8192, 8, 256, largest=64) == 64
    assert token_tile(4, 2, 8) == 16 and token_tile(2048, 8, 256) == 64
    assert padded_shape(192, 96) == (192, 128) and padded_shape(2880, 2880) == (2880, 2944)
    assert padded_shape(2880, 1088) == (2880, 1152) and padded_shape(64, 960) == (64, 960) and padded_shape(2048, 7168) == (2048, 7168)
    with pytest.raises(ShapeError, match="multiples of 16"):
        padded_shape(200, 96)
    caps = resolve_profile("nvidia-h200")
    plan = select(moe_problem("w4a16", "bf16", 64, 128, 8, 192, 2048), caps).plan
    assert (plan.n, plan.k, plan.layout.n, plan.layout.k) == (192, 2048, 192, 2048)
    plan = select(moe_problem("w4a16", "bf16", 64, 128, 8, 2048, 96), caps).plan
    assert (plan.layout.n, plan.layout.k) == (2048, 128)
    assert "token tile 16" in plan.explain() and "padded" in plan.explain()


def test_moe_refusals():
    caps = resolve_profile("nvidia-h200")
    dense = Problem(scheme_of("w4a16"), 16, 1024, 1024, "f16")
    assert refusal("moe_wna16", dense, caps).startswith("dense")
    w8a8 = Problem(scheme_of("w8a8-fp8"), 16, 1024, 1024, "f16", form="indexed", experts=8, top_k=2)
    assert select(w8a8, caps).plan.row_scale  # codes widened, per-token scales per output row
    block = Problem(scheme_of("w8a8-fp8-block"), 16, 1024, 1024, "f16", form="indexed", experts=8, top_k=2)
    plan = select(block, caps).plan  # DeepSeek-V3's block FP8: activations rescaled to 16 bits, blocks as groups
    assert not plan.row_scale and plan.layout.scale_group == 128
    assert any("rounded once to 16 bits" in r for r in plan.reasons)
    act_order = select(Problem(scheme_of("w4a16"), 16, 1024, 1024, "f16", act_order=True, form="indexed", experts=8,
                               top_k=2), caps).plan  # each routed row permuted into its expert's order first
    assert any(r.startswith("act-order experts") for r in act_order.reasons)
    # a dense problem never reaches the MoE family
    assert select(dense, caps).family.name != "moe_wna16"


def test_moe_128_row_tile_compiles(set_knobs, compiled_without_spills):
    """The 128-row token tile (knob moe.max_token_tile 128) compiles without spills."""
    set_knobs({"moe.max_token_tile": 128, "moe.wgmma_min_rows": None, "moe.mma_8bit_min_rows": None})
    caps = resolve_profile("nvidia-h200")
    for case in (("w4a16", "bf16", 8192, 8, 2, 4096, 1024), ("w4a8-fp8", "bf16", 8192, 8, 2, 1024, 1024)):
        plan = select(moe_problem(*case), caps).plan
        assert plan.tiles.bm == 128
        compiled_without_spills(plan, caps)
