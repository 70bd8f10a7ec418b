"""The wide register-A W4A8 form's fast accumulation (HUMMING_WGMMA_FAST_ACCUM=1, TileConfig.direct;
humming.core.generator_wgmma_rs8_direct): planned for e4m3 on the plain 256-token grid only and explained; the
default plans untouched; the loop has no partials or promotion, rescales with group scales and not per channel,
handles zero scales on a voted branch, hands its scales to the epilogue; the generator refuses the forms it is not
written for; it compiles without spills."""
from dataclasses import replace

import pytest

import humming
from humming import api
from humming.api import resolve_profile
from humming.core.planner_wgmma_rs8 import (
    DIRECT_S8_ENV,
    DIRECT_S8_MAX_K,
    FAST_ACCUM_ENV,
    PDL_RS8_ENV,
    STREAMK_ENV,
    WIDE_FROM_ENV,
    WIDENED_ENV,
)


@pytest.fixture(autouse=True)
def _clean(native_8bit_defaults):
    native_8bit_defaults(FAST_ACCUM_ENV, DIRECT_S8_ENV, STREAMK_ENV, PDL_RS8_ENV, WIDENED_ENV, WIDE_FROM_ENV)


def _per_channel(name: str = "w4a8-fp8"):
    return humming.schemes.get(name).with_(granularity="channel", group_size=None)


def _plan(m: int = 4096, scheme="w4a8-fp8", n: int = 8192, k: int = 8192):
    return humming.plan(scheme, m, n, k, profile="nvidia-h200")


def _loop(src: str) -> str:
    start = src.index("two 128-token chains a stage straight into")
    return src[start:src.index("consumer_sync();", start)]


def test_default_plans_do_not_change():
    p = _plan()
    assert p.tiles.direct == 0 and not p.layout.fast_accum and p.instruction.shape == (64, 64, 32), p.explain()
    src = api.source(p)
    assert "fast accumulation" not in src and "rcp_approx" not in src and "pa[WG_ACC_REGS], pb[WG_ACC_REGS]" in src
    assert "md_" not in p.kernel_name


def test_fast_accumulation_plans_the_direct_loop_and_says_so(monkeypatch):
    base = _plan()
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan()
    assert p.layout.fast_accum and p.tiles.direct == 1 and p.tiles.bm == 256, p.explain()
    assert p.instruction.shape == (64, 128, 32) and p.tiles.stagger == 1 and p.tiles.l2next == 1
    assert p.kernel_name != base.kernel_name and "md_" in p.kernel_name
    assert any(FAST_ACCUM_ENV in r and "rescaling the running sums" in r for r in p.reasons), p.explain()


def test_group_scale_loop_rescales_and_guards_zero_scales(monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    src = api.source(_plan())
    loop = _loop(src)
    # no partials and no promotion: both halves' wgmmas accumulate into facc, each after its rescale
    assert "pa[" not in src and "part[" not in src and "+= wg_acc_to_f32" not in src
    for hv in (0, 1):
        assert f"facc[WG_ACC_REGS * {hv} + i] *= (i & 2) ? r1 : r0;" in loop
        assert (f"wgmma_k32_rs(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>(facc + WG_ACC_REGS * {hv}), fa[u][ks], "
                f"desc_x + {hv} * (WT * BK / 16) + 2 * ks, 1);") in loop
    assert loop.index("facc[WG_ACC_REGS * 0 + i] *=") < loop.index("wgmma_k32_rs(") < loop.index(
        "facc[WG_ACC_REGS * 1 + i] *=")
    # the next stage widened into the other fragment before this stage's wait; ratios and units from its scales
    assert loop.index("fa[u ^ 1][j >> 1]") < loop.index("wgmma_wait<0>();")
    assert "rn0 = p0 * rcp_approx(c0); rn1 = p1 * rcp_approx(c1); en0 = c0; en1 = c1;" in loop
    assert "__any_sync(0xFFFFFFFFu, c0 == 0.0f || c1 == 0.0f)" in loop
    assert "if (c0 == 0.0f) { rn0 = 1.0f; en0 = p0; }" in loop
    assert "if (c0 == 0.0f) { fa[u ^ 1][ks][0] = 0u; fa[u ^ 1][ks][2] = 0u; }" in loop
    assert "if (c1 == 0.0f) { fa[u ^ 1][ks][1] = 0u; fa[u ^ 1][ks][3] = 0u; }" in loop
    assert "const float fs0 = en0, fs1 = en1;" in src
    assert "cs[h] = (CS ? load_f32(CS + n0 + ch) : 1.0f) * (h ? fs1 : fs0);" in src
    assert "__device__ __forceinline__ float rcp_approx(float x)" in src
    # the slot is released after the wait, and warpgroup 1 starts one chain behind
    assert loop.index("wgmma_wait<0>();") < loop.index("mbar_arrive(xbar0 + 8 * (STAGES + s))")
    assert src.count("consumer_turn_take();") == 1 and "if (wg == 0 && kt == 0) consumer_turn_give();" in loop


def test_per_channel_loop_does_not_rescale(monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan(scheme=_per_channel())
    assert p.tiles.direct == 1 and any("per-channel scales in the epilogue" in r for r in p.reasons), p.explain()
    src = api.source(p)
    loop = _loop(src)
    assert "*=" not in loop and "rcp_approx" not in src and "__any_sync" not in loop
    assert "const float fs0 = s_lo, fs1 = s_hi;" in src and "(h ? fs1 : fs0)" in src


@pytest.mark.parametrize("env,value,why", [(STREAMK_ENV, "132", "stream-K"), (PDL_RS8_ENV, "1", "PDL"),
                                           (WIDENED_ENV, "2", "converter warps")])
def test_forms_without_it_keep_promoting_and_say_why(env, value, why, monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    monkeypatch.setenv(env, value)
    p = _plan()
    assert p.layout.fast_accum and p.tiles.direct == 0, p.explain()
    assert any("asked for, not planned" in r and why in r for r in p.reasons), p.explain()
    assert "two 128-token chains a stage straight into" not in api.source(p)


def test_fitted_tiles_and_int8_keep_promoting(monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    fitted = _plan(m=160)
    assert fitted.tiles.bm != 256 and fitted.tiles.direct == 0, fitted.explain()
    assert any("asked for, not planned" in r for r in fitted.reasons)
    int8 = _plan(scheme="w4a8-int8")
    assert not int8.layout.fast_accum and int8.tiles.direct == 0  # int32 sums: exact either way


def test_generator_refuses_what_it_is_not_written_for(monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan()
    for tiles in (replace(p.tiles, streamk=132), replace(p.tiles, cluster=2), replace(p.tiles, bm=192)):
        with pytest.raises(ValueError):
            api.source(replace(p, tiles=tiles))
    int8 = _plan(scheme="w4a8-int8")
    with pytest.raises(ValueError, match="fast accumulation"):
        api.source(replace(int8, tiles=replace(int8.tiles, direct=1)))


def test_int8_per_channel_accumulates_int32_sums_by_default(monkeypatch):
    p = _plan(scheme=_per_channel("w4a8-int8"))
    assert not p.layout.fast_accum and p.tiles.direct == 1 and p.instruction.shape == (64, 128, 32), p.explain()
    assert any("int32 sums across every stage" in r and DIRECT_S8_ENV in r for r in p.reasons), p.explain()
    src = api.source(p)
    loop = _loop(src)
    assert "int iacc[BT / 2];" in loop and "*=" not in loop and "rcp_approx" not in src
    assert "s8x16_lo(wq[j >> 2][j & 3])" in loop and "int4n8_to_e4m3x8_x" not in loop
    assert "wgmma_k32_rs(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>(iacc + WG_ACC_REGS * 1)" in loop
    assert "for (int i = 0; i < BT / 2; ++i) facc[i] = (float)iacc[i];" in src
    assert src.index("facc[i] = (float)iacc[i]") < src.index("consumer_sync();                 // all wgmmas done")
    assert "const float fs0 = s_lo, fs1 = s_hi;" in src and "pa[" not in src
    # the off switch, a K past the int32 bound, and int8 groups of 128 keep promoting
    monkeypatch.setenv(DIRECT_S8_ENV, "0")
    assert _plan(scheme=_per_channel("w4a8-int8")).tiles.direct == 0
    monkeypatch.delenv(DIRECT_S8_ENV)
    assert _plan(scheme=_per_channel("w4a8-int8"), k=2 * DIRECT_S8_MAX_K).tiles.direct == 0
    assert _plan(scheme="w4a8-int8").tiles.direct == 0


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "channel", "int8-channel"])
@pytest.mark.parametrize("m", [4096, 512])
def test_compiles_without_spills(scheme, m, compiled_without_spills, monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan(m, {"channel": _per_channel(), "int8-channel": _per_channel("w4a8-int8")}.get(scheme, scheme))
    assert p.tiles.direct == 1, p.explain()
    compiled_without_spills(p, resolve_profile("nvidia-h200"))
