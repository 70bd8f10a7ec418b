"""CPU: the MoE register-A kernel (wgmma, int4 weights decoded in registers, rows routed to experts) is planned for
every shipped profile that declares the wgmma k16 forms, generated and compiled (NVRTC, ptxas verbose: no spills);
its PTX holds wgmma and the cp.async gather. The MoE registry hands prefill-sized int4 GEMMs to it and everything
else to the MoE tile kernel, saying why."""
from __future__ import annotations

import re

import pytest

from humming.capabilities import list_profiles
from humming.core.common.wgmma import wgmma_k16_form
from humming.core.families.moe_register_a.planner import MIN_ROWS_KNOB
from humming.core.problem import Problem, scheme_of
from humming.core.registry import refusal, select
from humming.core.tuning import knobs
from humming.devices.current import resolve_profile

WGMMA_PROFILES = [p for p in list_profiles(include_abstract=False) if wgmma_k16_form(p, "bf16")]
# (scheme, group, act, tokens, experts, top_k, N, K, token tile): Qwen3-30B-A3B gate+up at T=2048, Mixtral-8x7B
# down at T=1024 with zero points (a 256-row tile), a padded K (96 -> 128), W4A8-FP8 (codes widened, per-token scales), per channel
CASES = [("w4a16", 128, "bf16", 2048, 128, 8, 1536, 2048, 128), ("w4a16-zp", 64, "f16", 1024, 8, 2, 4096, 14336, 256),
         ("w4a16", 64, "bf16", 4096, 128, 8, 2048, 96, 256), ("w4a8-fp8", None, "bf16", 400, 8, 2, 256, 512, 128),
         ("w4a16", -1, "f16", 256, 16, 4, 384, 1024, 64)]


def moe_problem(scheme, group, act, tokens, experts, top_k, n, k):
    sch = scheme_of(scheme) if group is None else scheme_of(scheme).with_(group_size=group)
    return Problem(sch, tokens, n, k, act, form="indexed", experts=experts, top_k=top_k)


def test_wgmma_profiles_exist():
    assert {"nvidia-h100", "nvidia-h200"} <= {p.name for p in WGMMA_PROFILES}


@pytest.mark.parametrize("profile", WGMMA_PROFILES, ids=[p.name for p in WGMMA_PROFILES])
def test_moe_register_a_compiles(profile, compiled_without_spills):
    for *case, bt in CASES:
        sel = select(moe_problem(*case), profile)
        plan = sel.plan
        assert sel.family.name == "moe_register_a", sel.explain()
        assert plan.tiles.bm == bt and plan.tiles.bn == 128 and plan.splits == 1
        assert plan.kernel_name.startswith("hm_wna16_moewgmmars_int4_")
        assert plan.row_scale == (case[0] == "w4a8-fp8")
        ptx = compiled_without_spills(plan, profile).ptx
        assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16", ptx), plan.kernel_name
        assert "cp.async.cg.shared.global" in ptx and "mma.sync" not in ptx


def test_token_tiles_and_threshold():
    caps = resolve_profile("nvidia-h200")
    lowest = knobs.value(MIN_ROWS_KNOB, caps)

    def chosen(tokens, experts=8, top_k=2, n=4096, k=1024, scheme="w4a16"):
        return select(moe_problem(scheme, None, "bf16", tokens, experts, top_k, n, k), caps)

    below = chosen(int(lowest * 8 / 2) - 4)  # a little under the threshold's rows per expert
    assert below.family.name == "moe_wna16" and MIN_ROWS_KNOB in dict(below.refusals)["moe_register_a"]
    assert chosen(4 * 64).plan.tiles.bm == 64 and chosen(4 * 100).plan.tiles.bm == 128
    assert chosen(4 * 1000).plan.tiles.bm == 256 and chosen(4 * 16).plan.tiles.bm == 64
    with knobs.override({"moe.wgmma_max_token_tile": 128}):
        assert chosen(4 * 1000).plan.tiles.bm == 128 and chosen(4 * 100).plan.tiles.bm == 128
    with knobs.override({MIN_ROWS_KNOB: None}):
        off = chosen(4 * 1000)
        assert off.family.name == "moe_wna16" and "off" in dict(off.refusals)["moe_register_a"]
    plan = chosen(4096).plan
    assert "rows per expert" in plan.explain() and "router weight" in plan.explain()


@pytest.mark.parametrize("scheme, group, n, k, why", [
    ("w4a16-mxfp4", None, 4096, 1024, "e2m1 codes: not yet run on a GPU"),  # (gpt-oss: register_a.any_group)
    ("w8a16", None, 4096, 1024, "4-bit integer codes"),
    ("w4a16", 32, 4096, 1024, "scale group 32: sub-atom groups have not run on a GPU yet"),
    ("w4a16", 128, 192, 2048, "odd number of 64-channel slabs"),  # (Qwen3-30B-A3B gate+up at TP8; with the knob)
])
def test_hands_on_to_the_tile_kernel(scheme, group, n, k, why):
    caps = resolve_profile("nvidia-h200")
    problem = moe_problem(scheme, group, "bf16", 8192, 8, 2, n, k)
    sel = select(problem, caps)
    assert sel.family.name == "moe_wna16"
    assert why in refusal("moe_register_a", problem, caps)


def test_not_without_wgmma():
    caps = resolve_profile("nvidia-a100")
    problem = moe_problem("w4a16", 128, "bf16", 8192, 8, 2, 4096, 1024)
    assert "wgmma" in refusal("moe_register_a", problem, caps)
    assert select(problem, caps).family.name == "moe_wna16"
