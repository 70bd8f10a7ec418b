"""Widened 8-bit activations on the weight-only kernels (humming.core.routes.widened_ranges): which schemes and M take the path,
what the plans say, and that every row-scaled WnA16 kernel (stream, tile, register-A small and prefill forms)
compiles with NVRTC and reads one scale per token row."""
from dataclasses import replace

import pytest
import torch

import humming
from humming import api
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.plan import row_scale_refusal
from humming.core.routes import widened_ranges as widen
from humming.core.tuning import knobs

N, K = 8192, 8192


@pytest.mark.parametrize("scheme,m,row_scale", [
    ("w4a8-fp8", 1, True), ("w4a8-int8", 16, True), ("w4a8-fp8", 64, True), ("w4a8-fp8", 128, True),
    ("w8a8-int8", 1, True),
    ("w8a8-fp8", 8, True), ("w8a8-fp8-tensor", 7, False), ("w4a8-mxfp4", 1, True),
])
def test_widened_plans_on_h200(scheme, m, row_scale):
    p = humming.plan(scheme, m, N, K, profile="nvidia-h200")
    assert p.reasons[0].startswith("widened activations"), p.explain()
    assert not p.is_8bit and p.row_scale == row_scale and p.scheme == scheme
    assert ("_ts_" in p.kernel_name) == row_scale
    assert p.to_dict().get("row_scale", False) == row_scale


@pytest.mark.parametrize("scheme,m", [("w4a8-int8", 4096), ("w4a8-int8", 256), ("w8a8-fp8", 16), ("w8a8-int8", 1024),
                                      ("w8a8-fp8-block", 1), ("w4a4-nvfp4", 1), ("mxfp8", 1)])
def test_native_or_other_paths_stay(scheme, m):
    p = humming.plan(scheme, m, N, K, profile="nvidia-h200")
    assert not p.reasons[0].startswith("widened"), p.explain()
    assert not p.row_scale


def test_ranges_per_profile_and_option():
    h200, a100 = api.resolve_profile("nvidia-h200"), api.resolve_profile("nvidia-a100")
    w4a8, w8a8 = humming.schemes.get("w4a8-fp8"), humming.schemes.get("w8a8-int8")
    # g128 int4 without zero points: the register-A W4A8 kernel takes it ("4bit-rs8"); groups of 64: "4bit"
    # 64 blocks per 128 tokens: up to 128; then the M whose native tiles (128, or 256 / 192 in 64-token chains) hold
    # fewer than 65% tokens: 129-166 (two 128-token tiles); the wide tiles fitted to M never hold that few
    assert widen.m_ranges(h200, w4a8, N, K) == widen.rs8_ranges(h200, N) == ((1, 166),)
    # the register-A kernel's blocks fill 3/4 of the SMs: at once on 28672 channels (there the wide form from M 128, its
    # tiles fitted to M: 129-166 in one of 192 tokens, native), from 4 token tiles on 4096
    assert widen.rs8_ranges(h200, 28672) == ((1, 64),)
    assert widen.rs8_ranges(h200, 4096) == ((1, 384),)
    for n, m in ((8192, 150),):  # measured: the widened path faster there
        assert any(lo <= m <= hi for lo, hi in widen.rs8_ranges(h200, n)), (n, m)
    # (28672, 150): the widened path 131.4 us against 189.9 in two narrow tiles (2026-12-01); since the wide form takes
    # it in one tile of 192, native at M 192 ran 102.2 (docs/runs/2026-12-01m/call8; M 150 itself not measured)
    for n, m in ((28672, 150), (8192, 200), (8192, 270), (8192, 300), (8192, 380), (8192, 513), (8192, 600), (28672, 270),
                 (28672, 300), (28672, 380), (28672, 513), (28672, 600), (8192, 4096)):  # native faster
        assert not any(lo <= m <= hi for lo, hi in widen.rs8_ranges(h200, n)), (n, m)
    w4a8_g64 = w4a8.with_(group_size=64)
    assert widen.m_ranges(h200, w4a8_g64, N, K) == widen.DEFAULT_M_RANGES["wgmma"][("4bit", "fp8")]
    assert widen.m_ranges(h200, w8a8) == widen.DEFAULT_M_RANGES["wgmma"][("8bit", "int8")]
    assert widen.m_ranges(a100, w8a8) == widen.DEFAULT_M_RANGES["mma_sync"][("8bit", "int8")]
    w4a8_int8 = humming.schemes.get("w4a8-int8")
    assert widen.applies(h200, w4a8_int8, 166, N, K) and not widen.applies(h200, w4a8_int8, 167, N, K)
    assert not widen.applies(h200, w4a8_int8, 2048, N, K)
    assert widen.applies(h200, w4a8_int8.with_(group_size=64), 2048, N, K)
    assert widen.applies(a100, w8a8, 8, N, K) and not widen.applies(a100, w8a8, 9, N, K)
    assert widen.applies(h200, w4a8, 166, N, K) and not widen.applies(h200, w4a8, 167, N, K)
    assert not widen.applies(h200, w4a8, 1024, N, K) and not widen.applies(h200, w4a8, 4096, N, K)
    assert widen.applies(h200, w4a8_g64, 1024, N, K) and not widen.applies(h200, w4a8_g64, 512, N, K)
    with knobs.override({"register_a8.min_m": None}):  # the register-A kernel off: the other 4-bit ranges
        assert widen.m_ranges(h200, w4a8, N, K) == widen.DEFAULT_M_RANGES["wgmma"][("4bit", "fp8")]
        assert widen.applies(h200, w4a8, 1024, N, K)  # (the decision is not the one cached without the override)
    assert not widen.applies(h200, w4a8, 1024, N, K)
    assert widen.applies(a100, w4a8, 1 << 20, N, K)  # no fp8 tensor cores on the A100: the only path
    assert widen.describe_ranges(((1, 64), (1024, 2048))) == "M <= 64, M 1024-2048"
    assert widen.describe_ranges(((1, 64), (1024, widen.OPEN))) == "M <= 64, M >= 1024"
    # GemmOptions.act_widen: False never, True every M
    assert widen.m_ranges(h200, w4a8, N, K, act_widen=False) == ()
    assert not widen.applies(h200, w4a8, 1, N, K, act_widen=False)
    assert humming.plan("w4a8-fp8", 1, N, K, profile="nvidia-h200").row_scale
    assert not humming.plan("w4a8-fp8", 1, N, K, profile="nvidia-h200",
                            options=humming.GemmOptions(act_widen=False)).row_scale
    assert widen.m_ranges(h200, w4a8, N, K, act_widen=True) is None
    assert widen.applies(h200, w4a8, 65536, N, K, act_widen=True)
    assert humming.plan("w4a8-fp8", 65536, N, K, profile="nvidia-h200",
                        options=humming.GemmOptions(act_widen=True)).reasons[0].startswith("widened activations")


def test_refusals_say_why():
    get = humming.schemes.get
    assert "dynamic_group" in widen.refusal(get("w8a8-fp8-block"), N, K)  # (and no weight-only 2D blocks)
    assert "dynamic_group" in widen.refusal(get("mxfp8"), N, K)
    assert "e2m1" in widen.refusal(get("w4a4-nvfp4"), N, K)
    assert widen.refusal(get("w4a8-int8"), N, K) == ""


def test_codes_are_exact_in_16_bits():
    """Every int8 / e4m3 / e5m2 code survives f16 and bf16 unchanged (the premise of the path)."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for fmt, dtype in widen.CODE_DTYPES.items():
        v = codes.view(dtype).to(torch.float32)
        finite = torch.isfinite(v)
        for act in (torch.float16, torch.bfloat16):
            assert torch.equal(v[finite].to(act).to(torch.float32), v[finite]), (fmt, act)


def _row_scaled_plans():
    caps = api.resolve_profile("nvidia-h200")
    plans = [humming.plan("w4a8-fp8", m, N, K, profile=caps) for m in (1, 7, 16, 33)]
    # above the default threshold: the row-scaled twin of the weight-only plan (GemmOptions(act_widen=True))
    plans += [replace(humming.plan("w4a16", m, N, K, profile=caps), row_scale=True) for m in (128, 1024)]
    # the mma.sync tile kernel, as the row-scaled twin handle plans it (act_widen=True above M=16 there)
    plans.append(replace(humming.plan("w8a16", 48, N, K, profile="nvidia-a100"), row_scale=True))
    plans.append(humming.plan("w8a8-int8", 1, N, K, profile="nvidia-t4"))
    return plans


@pytest.mark.parametrize("plan", _row_scaled_plans(), ids=lambda p: f"{p.profile}-{p.path}-m{p.m}")
def test_row_scaled_kernels_compile(plan):
    assert plan.row_scale and not row_scale_refusal(plan)
    src = api.source(plan)
    assert "load_f32(GS + " in src and "out_scale * load_f32(GS)" not in src
    plain = api.source(replace(plan, row_scale=False))
    assert "load_f32(GS + " not in plain and "out_scale * load_f32(GS)" in plain
    kernel = api.compile_plan(plan, plan.profile)
    assert kernel is not None


def test_row_scale_refused_where_no_kernel_takes_it():
    p = humming.plan("w8a8-fp8", 4096, N, K, profile="nvidia-h200")  # the native TMA W8A8 kernel
    assert row_scale_refusal(p)
    with pytest.raises(ValueError, match="row_scale"):
        api.source(replace(p, row_scale=True))
    caps = api.resolve_profile("nvidia-h200")
    from humming.core.families.wgmma_dequant.layout import wgmma_wna16_layout
    from humming.core.families.wgmma_dequant.planner import plan_wna16_wgmma

    sch = humming.schemes.get("w4a16")
    q = plan_wna16_wgmma(caps, wgmma_wna16_layout(sch, N, K, "f16"), 256, "f16", scheme="w4a16")
    assert "no per-token output scale" in row_scale_refusal(q)
    assert layout_for(sch, N, K, "f16") is not None


def test_int32_sums_take_m_from_a_lower_fill():
    """W4A8-INT8 with per-channel scales (the register-A kernel's exact int32 sums across stages, ~1.6x cheaper
    blocks): native from RS8_MIN_FILL_INT32_SUMS of the SMs instead of RS8_MIN_FILL; measured on the H200
    (docs/runs/2026-12-02d/call6): 4096x14336 M128 widened 30.7 / native 47.3 us, M200 52.2 / 48.6, M300 101.1 / 51.6."""
    from humming.core.families.register_a8 import planner as planner_wgmma_rs8

    h200 = api.resolve_profile("nvidia-h200")
    channel = humming.schemes.get("w4a8-int8").with_(granularity="channel", group_size=None)
    assert widen.m_ranges(h200, channel, 4096, 14336) == ((1, 166),)  # (129-166: the token-share rule)
    assert widen.applies(h200, channel, 128, 4096, 14336) and not widen.applies(h200, channel, 200, 4096, 14336)
    assert not widen.applies(h200, channel, 300, 4096, 14336)
    assert widen.m_ranges(h200, channel, 8192, 8192) == ((1, 64), (129, 166))
    # groups of 128, e4m3 per channel (promoted unless GemmOptions(fast_accum=True)) and the knob off: as before
    assert widen.m_ranges(h200, humming.schemes.get("w4a8-int8"), 4096, 14336) == ((1, 384),)
    fp8_channel = humming.schemes.get("w4a8-fp8").with_(granularity="channel", group_size=None)
    assert widen.m_ranges(h200, fp8_channel, 4096, 14336) == ((1, 384),)
    with knobs.override({planner_wgmma_rs8.DIRECT_S8_KNOB: False}):
        assert widen.m_ranges(h200, channel, 4096, 14336) == ((1, 384),)
        assert widen.applies(h200, channel, 300, 4096, 14336)
    # K past the int32 bound: promoted, so the old fill
    assert widen.m_ranges(h200, channel, 4096, 2 * 65536) == ((1, 384),)
