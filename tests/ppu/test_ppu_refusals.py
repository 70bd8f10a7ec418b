"""The 810E's tensor cores take f16, bf16 and int8 only: fp8, fp6, fp4 and int4 activations are refused with
reasons, by the planner and in the path table; the refusal comes from the profile's declarations."""
from __future__ import annotations

import pytest

from humming import api, schemes
from humming.capabilities import get_profile
from humming.capabilities.vocabulary import TYPE_CLASSES
from humming.core.common.paths import choose_mma
from humming.errors import UnsupportedOnDevice

PPU = "thead-zhenwu-810e"
REFUSED_CLASSES = ("fp8", "fp6", "fp4", "int4")
REFUSED_TYPES = [t for c in REFUSED_CLASSES for t in TYPE_CLASSES[c]]  # e4m3 e5m2 e3m2 e2m3 e2m1 s4 u4


@pytest.fixture
def caps():
    return get_profile(PPU)


def test_the_profile_declares_only_f16_bf16_int8_tensor_cores(caps):
    declared = {ins.a_type for ins in caps.mma} | {ins.b_type for ins in caps.mma}
    assert declared == {"f16", "bf16", "s8"}
    for t in REFUSED_TYPES:
        assert caps.find_mma(a_type=t) == [] and caps.find_mma(b_type=t) == []


@pytest.mark.parametrize("act", REFUSED_TYPES)
def test_planner_refuses_unsupported_activation_types(caps, act):
    with pytest.raises(UnsupportedOnDevice) as err:
        choose_mma(caps, act)
    text = str(err.value)
    assert f"{PPU} declares no mma.sync" in text and f"with {act} operands" in text
    assert "declared mma.sync A types: bf16, f16, s8" in text


def test_the_same_request_is_planned_where_the_profile_declares_fp8():
    """Data, not code, makes the difference: the H200 profile declares e4m3 mma.sync."""
    instruction, _ = choose_mma(get_profile("nvidia-h200"), "e4m3")
    assert instruction.a_type == "e4m3"


def _int4_activation_scheme():
    return schemes.get("w4a16").with_(act="int4")


QUANTIZED_ACT = [(name, schemes.get(name).act) for name in schemes.names() if schemes.get(name).act]
REFUSED_PRESETS = [(n, a) for n, a in QUANTIZED_ACT if a not in ("int8",)]


MMA_TYPE = {"int8": "s8", "int4": "s4"}
# block-scaled recipes (NVFP4, MX) have an exact widening to bf16, which the 810E's tensor cores take
UPCONVERTED = {"w4a4-nvfp4", "w4a4-mxfp4", "mxfp8", "mxfp6", "mxfp6-e3m2"}
# fp8 activations per token / per tensor: the codes are exact in f16, so they widen onto the weight-only kernels
WIDENED = {"w8a8-fp8", "w8a8-fp8-tensor", "w4a8-fp8", "w4a8-mxfp4"}


@pytest.mark.parametrize("scheme, act", REFUSED_PRESETS + [(str(_int4_activation_scheme()), "int4")])
def test_plan_refuses_fp8_fp4_int4_activation_schemes(caps, scheme, act):
    if scheme in UPCONVERTED:  # exact upconversion to bf16 is planned instead (see below)
        plan = api.plan(scheme, 16, 4096, 4096, profile=caps)
        assert plan.instruction.a_type == "bf16" and any("upconvert" in r for r in plan.reasons)
        return
    if scheme in WIDENED:  # every M: there is no fp8 tensor-core path to prefer
        for m in (16, 4096):
            plan = api.plan(scheme, m, 4096, 4096, profile=caps)
            assert plan.instruction.a_type in ("f16", "bf16") and plan.reasons[0].startswith("widened"), plan.explain()
            assert "the only path here" in plan.reasons[0] and f"taking {act}" in plan.reasons[0]
        return
    with pytest.raises(UnsupportedOnDevice) as err:
        api.plan(scheme, 16, 4096, 4096, profile=caps)
    text = str(err.value)
    assert f"{PPU} declares no tensor-core instruction taking {MMA_TYPE.get(act, act)}" in text
    assert "declared operand types: bf16, f16, s8" in text


def test_path_table_refuses_quantized_activation_schemes_with_reasons(caps):
    rows = {row["scheme"]: row for row in api.path_table(caps)}
    assert {"w8a8-fp8", "w4a8-fp8", "w4a4-nvfp4", "w4a4-mxfp4", "mxfp6"} <= set(rows)
    for name, act in REFUSED_PRESETS:
        row = rows[name]
        if name in UPCONVERTED:  # not an fp8/fp4 tensor-core path: exact upconversion to bf16 mma.sync
            assert row["route"] == "upconvert" and "bf16" in row["instruction"], row
            continue
        if name in WIDENED:
            assert row["route"] == "widened" and act in row["reason"], row
            continue
        assert row["family"] is None and row["instruction"] is None, row
        assert act in row["reason"], row  # the reason names the activation format
    for name in ("w4a16", "w8a16", "w4a16-fp4", "w8a16-fp8"):  # weight-only schemes run, on mma.sync f16
        assert rows[name]["family"] == "mma_sync" and "m16x8x16 f16" in rows[name]["instruction"]


def test_info_shows_no_fp8_or_int4_tensor_cores(caps):
    from humming.device import info

    text = str(info(PPU))
    assert "fp8 -" in text and "int4 -" in text and "fp4 -" in text
    assert "int8 mma_sync" in text
