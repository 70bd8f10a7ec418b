"""Schemes: presets, validation messages, string round trips."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import humming
from humming import schemes
from humming.core.quant.schemes import ActScaleSpec, ScaleSpec, Scheme
from humming.errors import SchemeError

REQUIRED = ["w4a16", "w4a16-zp", "w8a16", "w3a16", "w2a16", "w1a16", "w1a16-ternary", "w4a16-fp4", "w8a16-fp8",
            "w8a8-int8", "w8a8-fp8", "w8a8-fp8-block", "w4a8-int8", "w4a8-fp8", "w4a8-mxfp4", "w4a4-nvfp4",
            "w4a4-mxfp4", "mxint4", "mxfp8", "mxfp6", "w4a16-nvfp4", "w4a16-mxfp4"]


def test_required_presets_exist():
    assert set(REQUIRED) <= set(schemes.names())
    assert humming.Scheme is Scheme


def test_w4a16_contract():
    s = schemes.get("w4a16")
    assert (s.name, s.weight, s.zero_point, s.act, s.act_order, s.weight_global_scale) == \
        ("w4a16", "int4", None, None, False, False)
    assert s.weight_scale == ScaleSpec("group", 128, None, "f16")
    assert s.act_scale == ActScaleSpec("none", None, "f32", False)


def test_nvfp4_and_mx_presets():
    n = schemes.get("nvfp4")
    assert n.name == "w4a4-nvfp4" and n.weight == "e2m1" and n.weight_global_scale
    assert n.weight_scale == ScaleSpec("group", 16, None, "ue4m3")
    assert n.act == "e2m1" and n.act_scale == ActScaleSpec("dynamic_group", 16, "ue4m3", True)
    m = schemes.get("w4a4-mxfp4")
    assert m.weight_scale == ScaleSpec("group", 32, None, "ue8m0")
    assert m.act_scale == ActScaleSpec("dynamic_group", 32, "ue8m0", False)
    b = schemes.get("w8a8-fp8-block")
    assert b.weight_scale.block == (128, 128) and b.act_scale.group_size == 128
    assert schemes.get("w1a16-ternary").weight == "ternary"
    assert schemes.get("mxint4").weight == "int4" and schemes.get("mxint4").act is None


@pytest.mark.parametrize("name", schemes.names() + list(schemes.aliases()))
def test_every_preset_roundtrips_through_its_string(name):
    s = schemes.get(name)
    assert schemes.get(str(s)) == s
    assert eval(repr(s), {"Scheme": lambda t: schemes.get(t)}) == s
    assert s.describe()


def test_with_makes_validated_copies():
    s = schemes.get("w4a16").with_(group_size=64, act_order=True)
    assert s.weight_scale.group_size == 64 and s.act_order and str(s) == "w4a16[group_size=64,act_order=true]"
    assert schemes.get("w8a16").with_(group_size=128).weight_scale.granularity == "group"
    assert schemes.get("w4a16").with_(group_size=None).weight_scale == ScaleSpec("channel", None, None, "f16")
    blk = schemes.get("w8a8-fp8").with_(block="128x128", act_scale="dynamic_group", act_group_size=128)
    assert blk.weight_scale == ScaleSpec("block", None, (128, 128), "f32")
    a = schemes.get("w4a16").with_(act="fp8")
    assert a.act == "e4m3" and a.act_scale.mode == "dynamic_token"
    assert schemes.get("w4a8-fp8").with_(act=None).act_scale.mode == "none"
    assert schemes.get("w4a16", group_size=32).weight_scale.group_size == 32
    assert schemes.get("w4a16[g=32]") == schemes.get("w4a16").with_(group_size=32)
    custom = Scheme("mine", "e2m1", ScaleSpec("group", 32, None, "bf16"))
    assert str(custom).startswith("custom[name=mine") and schemes.get(str(custom)) == custom


@pytest.mark.parametrize("change,match", [
    (dict(group_size=48), "power of two from 16 to 1024"),
    (dict(group_size=2048), "power of two"),
    (dict(weight="uint4"), "need a zero point.*int4"),
    (dict(zero_point="int"), "unsigned integer weight format.*uint4"),
    (dict(weight="e2m1", zero_point="int"), "unsigned integer"),
    (dict(act="int8", weight="e2m1"), "not exactly representable in int8.*e4m3"),
    (dict(weight="int8", act="e4m3"), "not exactly representable"),
    (dict(act="uint8"), "signed"),
    (dict(act="e4m3", act_scale="none"), "needs an activation scale"),
    (dict(act="e2m1", act_scale="dynamic_group", act_group_size=None), "act_group_size"),
    (dict(scale_format="ue8m0", group_size=None), "need granularity 'group'"),
    (dict(weight="f16"), "not a quantized weight format"),
    (dict(granularity="tensor", act_order=True), "act_order"),
    (dict(block=(100, 128)), "power of two"),
    (dict(act_scale="dynamic_token"), "quantized activation format"),
    (dict(weight="bogus"), "unknown number format"),
    (dict(colour="red"), "unknown scheme key"),
])
def test_invalid_combinations_explain_themselves(change, match):
    with pytest.raises(SchemeError, match=match):
        schemes.get("w4a16").with_(**change)


def test_unknown_and_confused_names():
    with pytest.raises(SchemeError, match="did you mean"):
        schemes.get("w4a61")
    with pytest.raises(SchemeError, match="number format, not a scheme"):
        schemes.get("e2m1")
    with pytest.raises(SchemeError, match="key=value"):
        schemes.get("w4a16[64]")


def test_group_size_rule():
    gs = schemes.valid_group_sizes()
    assert gs[:4] == [16, 32, 64, 128] and 192 in gs and 1024 in gs and 48 not in gs and 96 not in gs
    assert schemes.valid_group_sizes(384) == [16, 32, 64, 128, 192, 384]


_MUTATIONS = st.fixed_dictionaries({}, optional={
    "group_size": st.sampled_from([None, 16, 32, 64, 128, 256, 192, 1024]),
    "act_order": st.booleans(),
    "weight": st.sampled_from(["int2", "int3", "int4", "int8", "e2m1", "e4m3", "e2m3", "ternary"]),
    "act": st.sampled_from([None, "int8", "e4m3"]),
    "scale_format": st.sampled_from(["f16", "bf16", "f32"]),
})


@settings(max_examples=200, deadline=None)
@given(base=st.sampled_from(schemes.names()), change=_MUTATIONS)
def test_valid_modifications_roundtrip(base, change):
    try:
        s = schemes.get(base).with_(**change)
    except SchemeError as e:
        assert str(e)  # invalid combinations must say why
        return
    assert schemes.get(str(s)) == s
    assert hash(s) == hash(schemes.get(str(s)))


def test_scheme_is_frozen():
    s = schemes.get("w4a16")
    with pytest.raises(AttributeError):
        s.weight = "int8"
    assert torch.tensor(0).item() == 0
