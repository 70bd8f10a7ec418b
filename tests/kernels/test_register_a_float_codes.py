"""CPU: the register-A kernels (dense two-warpgroup and small forms, MoE) on e2m1 codes and on scale groups of 16 / 32
k (W4A16-MXFP4 / NVFP4 / FP4, MXINT4, GPTQ g32): which layouts they decode, that the default selection leaves these
to the other kernels until they have run on a GPU (the tuning knob register_a.any_group takes them), the generated
decode (a table row per group in the weight ring, the group of each k16 step, no magic number for float codes), the
MoE form over an odd number of 64-channel slabs (the last block half past N; also with the knob only), and NVRTC
compiles for sm_90a without spills (ptxas verbose)."""
from __future__ import annotations

import re

import pytest

import humming
from humming import api
from humming.capabilities import get_profile
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.families.register_a.layout import (
    default_refusal,
    layout_refusal,
    scale_rows_per_atom,
    untested_refusal,
)
from humming.core.families.register_a.planner import plan_wna16_wgmma_rs
from humming.core.problem import Problem, scheme_of
from humming.core.registry import select
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

ANY_GROUP = "register_a.any_group"
H200 = "nvidia-h200"
# (scheme, scale group, table rows per 64-wide atom)
SUB_ATOM = [("w4a16-mxfp4", 32, 2), ("w4a16-nvfp4", 16, 4), ("w4a16-fp4", 32, 2), ("mxint4", 32, 2)]


def _layout(name, n=4096, k=8192, act="f16", group=None):
    sch = scheme_of(name) if group is None else scheme_of(name).with_(group_size=group)
    return layout_for(sch, n, k, act, caps=get_profile(H200))


@pytest.mark.parametrize("name,group,rows", SUB_ATOM, ids=[c[0] for c in SUB_ATOM])
def test_layouts_it_decodes(name, group, rows):
    lay = _layout(name)
    assert lay.scale_group == group and scale_rows_per_atom(lay) == rows
    assert layout_refusal(lay) == ""
    assert untested_refusal(lay) and ANY_GROUP in default_refusal(lay)  # not by default until run on a GPU


def test_int4_groups_of_32_decode_and_other_groups_do_not():
    assert layout_refusal(_layout("w4a16", group=32)) == ""
    # zero points keep a row per atom: an int4 layout with zero groups of 32 is left to the other kernels
    assert "zero group 32 is not a multiple of 64" in layout_refusal(_layout("w4a16-zp", group=32))
    assert "not int8" in layout_refusal(_layout("w8a16")) and "e2m1" in layout_refusal(_layout("w8a16"))
    # the tested layouts keep their default
    assert default_refusal(_layout("w4a16")) == "" and untested_refusal(_layout("w4a16", group=64)) == ""


@pytest.mark.parametrize("name", ["w4a16-mxfp4", "w4a16-nvfp4", "mxint4"])
@pytest.mark.parametrize("m", [64, 1024, 4096])
def test_default_plans_stay_on_the_other_kernels_and_the_knob_takes_them(name, m):
    before = humming.plan(name, m, 8192, 8192, profile=H200, act="bf16")
    assert before.path != "wgmma-rs", before.explain()
    with knobs.override({ANY_GROUP: True}):
        after = humming.plan(name, m, 8192, 8192, profile=H200, act="bf16")
    assert after.path == "wgmma-rs", after.explain()
    codes = "float4" if name != "mxint4" else "int4"
    assert after.kernel_name.startswith(f"hm_wna16_wgmmars_{codes}_bf16_")
    if name != "mxint4" and after.tiles.bn == 128:  # the two-warpgroup form's words (the small form: "float4")
        assert "e2m1 codes (the mma.sync atom layout" in after.explain()
        assert "e2m1: sign and bits under the bf16 mantissa" in after.explain()


@pytest.mark.parametrize("name,group,rows", SUB_ATOM, ids=[c[0] for c in SUB_ATOM])
def test_ring_holds_a_table_row_per_group(name, group, rows):
    caps = get_profile(H200)
    plan = plan_wna16_wgmma_rs(caps, _layout(name), 1024, "f16", scheme=name)
    src = api.source(plan, caps)
    assert f"uint32_t sq[R][{rows}];" in src
    for j in range(rows):
        assert re.search(rf"sq\[s\]\[{j}\] = load_g32\(S \+ \(size_t\)\(\(unsigned\)\(s\) \* {rows} \+ {j}\) \* N", src)
    pick = "sq[s][ks / 2]" if rows == 2 else "sq[s][ks]"
    assert f"const uint32_t ss = h ? dup_hi({pick}) : dup_lo({pick});" in src
    if name == "mxint4":
        assert "zz_const" in src and "dq_raw_x16" in src  # int4: the magic number, the one-shift f16 decode
    else:
        assert "zz_const" not in src and "dq_raw_x16" not in src and "v = act2_mul(v, ss);" in src


def test_fold_refuses_sub_atom_groups_and_float_codes():
    caps = get_profile(H200)
    for name in ("mxint4", "w4a16-mxfp4"):
        with pytest.raises(ShapeError, match="fold is written for integer codes"):
            plan_wna16_wgmma_rs(caps, _layout(name), 16, "f16", scheme=name, small=True, fold=1)


def _moe(name, tokens=8192, n=5760, k=2880, act="bf16"):
    return Problem(scheme_of(name), tokens, n, k, act, form="indexed", experts=128, top_k=4)


def test_moe_selection():
    caps = get_profile(H200)
    sel = select(_moe("w4a16-mxfp4"), caps)
    assert sel.family.name == "moe_wna16" and "e2m1 codes" in dict(sel.refusals)["moe_register_a"]
    with knobs.override({ANY_GROUP: True}):
        sel = select(_moe("w4a16-mxfp4"), caps)
        assert sel.family.name == "moe_register_a", sel.explain()
        assert sel.plan.kernel_name.startswith("hm_wna16_moewgmmars_float4_bf16_")
        # gpt-oss's down GEMM: 2880 channels = 45 slabs of 64, the last 128-channel block half past N
        down = select(_moe("w4a16-mxfp4", n=2880), caps)
        assert down.family.name == "moe_register_a", down.explain()
        assert down.plan.grid[1] == 23 and "ragged_n" not in down.plan.kernel_name
        src = api.source(down.plan, caps)
        assert "const int slab = min(n0 / 64 + wg, N / 64 - 1);" in src and "(N + BC - 1) / BC" in src
        assert "CS && n0 + ch < N ?" in src and "BIAS && n0 + ch < N ?" in src


def test_moe_ragged_n_is_taken_with_the_knob_only():
    caps = get_profile(H200)
    qwen_tp8 = Problem(scheme_of("w4a16"), 8192, 192, 2048, "bf16", form="indexed", experts=128, top_k=8)
    sel = select(qwen_tp8, caps)  # Qwen3-30B-A3B gate+up at TP8: 192 channels = 3 slabs
    assert sel.family.name == "moe_wna16"
    assert "N=192 is an odd number of 64-channel slabs" in dict(sel.refusals)["moe_register_a"]
    with knobs.override({ANY_GROUP: True}):
        ragged = select(qwen_tp8, caps).plan
        whole = select(qwen_tp8.with_(n=256), caps).plan
    assert ragged.path == whole.path == "moe-wgmma-rs" and ragged.kernel_name != whole.kernel_name
    assert "min(n0 / 64 + wg" in api.source(ragged, caps) and "min(n0 / 64 + wg" not in api.source(whole, caps)


def _compiles_without_spills(plan, caps, compiled_without_spills):
    ptx = compiled_without_spills(plan, caps).ptx
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16", ptx), plan.kernel_name
    return ptx


@pytest.mark.parametrize("name", ["w4a16-mxfp4", "w4a16-nvfp4", "mxint4"])
@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_dense_forms_compile(name, act, compiled_without_spills):
    caps = get_profile(H200)
    with knobs.override({ANY_GROUP: True}):
        # the small form (three sizes), the two-warpgroup form, stream-K; where NVFP4's four table rows an atom
        # spilled with the int4 rings (32 tokens; 256 tokens on the wide layer, stream-K)
        for m, n, k in ((16, 8192, 8192), (32, 8192, 8192), (128, 8192, 8192), (1024, 8192, 8192),
                        (4096, 8192, 8192), (256, 28672, 8192)):
            _compiles_without_spills(humming.plan(name, m, n, k, profile=H200, act=act), caps, compiled_without_spills)


def test_rings_of_sub_atom_tables():
    with knobs.override({ANY_GROUP: True}):
        nv = humming.plan("w4a16-nvfp4", 32, 8192, 8192, profile=H200, act="bf16")
        mx = humming.plan("w4a16-mxfp4", 32, 8192, 8192, profile=H200, act="bf16")
        wide = humming.plan("w4a16-nvfp4", 256, 28672, 8192, profile=H200, act="bf16")
        int4 = humming.plan("w4a16", 256, 28672, 8192, profile=H200, act="bf16")
        occupied = humming.plan("mxint4", 32, 28672, 8192, profile=H200, act="bf16")
    assert nv.tiles.prefetch == 6 and mx.tiles.prefetch == 0  # (0: the form's rule, 7 atoms at 8 stages)
    assert wide.tiles.prefetch == 4 and int4.tiles.prefetch == 5  # one atom fewer with four table rows an atom
    assert not occupied.tiles.occupancy and "6 atoms ahead" in nv.explain()


@pytest.mark.parametrize("name,tokens,n", [("w4a16-mxfp4", 8192, 5760), ("w4a16-nvfp4", 512, 5760),
                                           ("w4a8-mxfp4", 2048, 5760), ("w4a16-mxfp4", 4096, 2880),
                                           ("w4a16", 8192, 192)])
def test_moe_form_compiles(name, tokens, n, compiled_without_spills):
    caps = get_profile(H200)
    with knobs.override({ANY_GROUP: True}):
        sel = select(_moe(name, tokens, n=n, k=2880 if n != 192 else 2048), caps)
    assert sel.family.name == "moe_register_a", sel.explain()
    _compiles_without_spills(sel.plan, caps, compiled_without_spills)


def test_explicit_plan_without_wgmma_is_refused():
    with pytest.raises(UnsupportedOnDevice, match="declares no wgmma"):
        plan_wna16_wgmma_rs(get_profile("nvidia-l40s"), _layout("w4a16-mxfp4"), 1024, "f16")


def test_moe_tuner_times_them_and_a_measured_entry_takes_them():
    """`humming tune --moe` checks every candidate against the reference on the GPU, so it times these layouts with the
    knob off, and an entry it stores is taken (refusal with measured=True)."""
    from humming.core.families.moe_register_a.planner import refusal
    from humming.moe_tuner import moe_candidates

    caps = get_profile(H200)
    problem = _moe("w4a16-mxfp4", n=2880)  # e2m1 and a ragged N
    _, plans = moe_candidates(problem, caps)
    assert sum(p.path == "moe-wgmma-rs" for p in plans) == 3  # one per token tile
    args = (caps, problem.scheme, problem.m, problem.n, problem.k, problem.act, problem.experts, problem.top_k)
    assert "e2m1 codes" in refusal(*args) and refusal(*args, measured=True) == ""


def test_upconvert_route_takes_the_register_a_forms_with_the_knob():
    """W4A4-NVFP4 on Hopper: activations upconverted exactly to 16 bits onto the WnA16 kernels; with the knob, the
    small register-A form below M 513 and the two-warpgroup form from it, as for W4A16-NVFP4."""
    for m, small in ((16, True), (1024, False), (4096, False)):
        assert humming.plan("w4a4-nvfp4", m, 8192, 8192, profile=H200, act="bf16").path != "wgmma-rs"
        with knobs.override({ANY_GROUP: True}):
            p = humming.plan("w4a4-nvfp4", m, 8192, 8192, profile=H200, act="bf16")
        assert p.path == "wgmma-rs" and (p.tiles.bn == 64) == small, p.explain()
        assert "upconvert" in p.explain()

