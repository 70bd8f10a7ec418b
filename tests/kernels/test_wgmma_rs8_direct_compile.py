"""The register-A W4A8 kernel's direct accumulation for per-channel scales (TileConfig.direct;
humming.core.families.register_a8.direct): int8 by default (exact int32 sums; HUMMING_WGMMA_W4A8_RS_DIRECT=0 off),
e4m3 with HUMMING_WGMMA_FAST_ACCUM=1; planned for the plain grid (256-token tiles, tiles fitted to M, the narrow
form) and explained (groups of 128, stream-K, clusters, converter warps and PDL keep promoting, and say why); the
default e4m3 plans untouched; the loops have no partials or promotion and hand the channel scales to the epilogue;
the generator refuses the forms it is not written for; it compiles without spills."""
from dataclasses import replace

import pytest

import humming
from humming import api
from humming.api import resolve_profile
from humming.core.families.register_a8.planner import (
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
    start = src.index("chains of WT tokens a stage straight into")
    return src[start:src.index("consumer_sync();", start)]


def test_default_plans_do_not_change():
    p = _plan()
    assert p.tiles.direct == 0 and not p.layout.fast_accum and p.instruction.shape == (64, 64, 32), p.explain()
    src = api.source(p)
    assert "fast accumulation" not in src and "rcp_approx" not in src and "pa[WG_ACC_REGS], pb[WG_ACC_REGS]" in src
    assert "md_" not in p.kernel_name


def test_fast_accumulation_plans_the_direct_loop_for_per_channel_scales(monkeypatch):
    base = _plan(scheme=_per_channel())
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan(scheme=_per_channel())
    assert p.layout.fast_accum and p.tiles.direct == 1 and p.tiles.bm == 256, p.explain()
    assert p.instruction.shape == (64, 128, 32) and p.tiles.stagger == 1 and p.tiles.l2next == 1
    assert p.kernel_name != base.kernel_name and "md_" in p.kernel_name
    assert any(FAST_ACCUM_ENV in r and "per-channel scales in the epilogue" in r for r in p.reasons), p.explain()
    src = api.source(p)
    loop = _loop(src)
    # no partials and no promotion: both halves' wgmmas accumulate into facc
    assert "pa[" not in src and "part[" not in src and "+= wg_acc_to_f32" not in src and "*=" not in loop
    for hv in (0, 1):
        assert (f"wgmma_k32_rs(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>(facc + WG_ACC_REGS * {hv}), fa[u][ks], "
                f"desc_x + {hv} * (WT * BK / 16) + 2 * ks, 1);") in loop
    # the next stage widened into the other fragment before this stage's wait, the slot released after it
    assert loop.index("fa[u ^ 1][j >> 1]") < loop.index("wgmma_wait<0>();")
    assert loop.index("wgmma_wait<0>();") < loop.index("mbar_arrive(xbar0 + 8 * (STAGES + s))")
    assert src.count("consumer_turn_take();") == 1 and "if (wg == 0 && kt == 0) consumer_turn_give();" in loop
    # the channel scales in the epilogue
    assert "const float fs0 = s_lo, fs1 = s_hi;" in src
    assert "cs[h] = (CS ? load_f32(CS + n0 + ch) : 1.0f) * (h ? fs1 : fs0);" in src


def test_groups_of_128_keep_promoting_and_say_why(monkeypatch):
    base = _plan()
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan()
    assert p.layout.fast_accum and p.tiles.direct == 0 and p.instruction.shape == (64, 64, 32), p.explain()
    assert any("asked for, not planned" in r and "groups of 128" in r for r in p.reasons), p.explain()
    assert api.source(p).replace(p.kernel_name, base.kernel_name) == api.source(base)  # (the name says fast_accum)


@pytest.mark.parametrize("env,value,why", [(STREAMK_ENV, "132", "stream-K"), (PDL_RS8_ENV, "1", "PDL"),
                                           (WIDENED_ENV, "2", "converter warps")])
def test_forms_without_it_keep_promoting_and_say_why(env, value, why, monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    monkeypatch.setenv(env, value)
    p = _plan(scheme=_per_channel())
    assert p.layout.fast_accum and p.tiles.direct == 0, p.explain()
    assert any("asked for, not planned" in r and why in r for r in p.reasons), p.explain()
    assert "chains of WT tokens a stage straight into" not in api.source(p)


@pytest.mark.parametrize("name", ["w4a8-int8", "w4a8-fp8"])
def test_fitted_and_narrow_tiles_accumulate_directly_too(name, monkeypatch):
    """Per-channel plans of 192 / 128 tokens: the wide form fitted to M in 64-token chains, the narrow form in its one
    128-token chain; int8 by default, e4m3 under the switch."""
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    sch = _per_channel(name)
    fitted = _plan(m=300, scheme=sch)
    assert fitted.tiles.bm == 192 and fitted.tiles.direct == 1 and fitted.instruction.shape == (64, 64, 32), \
        fitted.explain()
    assert any("3 m64n64k32 chains a stage" in r for r in fitted.reasons), fitted.explain()
    src = api.source(fitted)
    assert "wgmma_k32_rs(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>(" in src and " + WG_ACC_REGS * 2)" in src
    assert "pa[" not in src and "+= wg_acc_to_f32" not in src and "+= small_s32_to_f32" not in src
    narrow = _plan(m=512, scheme=sch, n=4096, k=14336)
    assert narrow.tiles.bm == 128 and not narrow.tiles.wide and narrow.tiles.direct == 1, narrow.explain()
    assert narrow.instruction.shape == (64, 128, 32)
    src = api.source(narrow)
    acc = "iacc" if name == "w4a8-int8" else "facc"
    assert f"wgmma_k32_rs({acc}, a[ks], desc_x + 2 * ks, 1);" in src and "part[" not in src and "pa[" not in src
    assert "const float fs0 = s_lo, fs1 = s_hi;" in src and "(h ? fs1 : fs0)" in src
    assert ("facc[i] = (float)iacc[i]" in src) == (name == "w4a8-int8")
    # groups of 128 there: promoted (e4m3: and said why)
    grouped = _plan(m=300, scheme=name)
    assert grouped.tiles.direct == 0
    assert _plan(scheme="w4a8-int8").tiles.direct == 0  # int8 groups of 128: int32 sums per group only


def test_generator_refuses_what_it_is_not_written_for(monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan(scheme=_per_channel())
    for tiles in (replace(p.tiles, streamk=132), replace(p.tiles, cluster=2), replace(p.tiles, bm=192)):
        with pytest.raises(ValueError):
            api.source(replace(p, tiles=tiles))
    grouped = _plan(scheme="w4a8-int8")  # groups of 128: promoted only
    with pytest.raises(ValueError, match="per-channel scales"):
        api.source(replace(grouped, tiles=replace(grouped.tiles, direct=1)))


def test_int8_per_channel_accumulates_int32_sums_by_default(monkeypatch):
    p = _plan(scheme=_per_channel("w4a8-int8"))
    assert not p.layout.fast_accum and p.tiles.direct == 1 and p.instruction.shape == (64, 128, 32), p.explain()
    assert any("int32 sums across every stage" in r and DIRECT_S8_ENV in r for r in p.reasons), p.explain()
    src = api.source(p)
    loop = _loop(src)
    assert "int iacc[BT / 2];" in loop and "*=" not in loop
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


@pytest.mark.parametrize("scheme", ["channel", "int8-channel"])
@pytest.mark.parametrize("m,n,k", [(4096, 8192, 8192), (512, 8192, 8192), (300, 8192, 8192), (160, 28672, 8192),
                                   (512, 4096, 14336)])
def test_compiles_without_spills(scheme, m, n, k, compiled_without_spills, monkeypatch):
    monkeypatch.setenv(FAST_ACCUM_ENV, "1")
    p = _plan(m, {"channel": _per_channel(), "int8-channel": _per_channel("w4a8-int8")}.get(scheme, scheme), n, k)
    assert p.tiles.direct == 1, p.explain()
    compiled_without_spills(p, resolve_profile("nvidia-h200"))
