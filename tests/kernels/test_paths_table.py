"""(profile, scheme) -> path and instruction family for every shipped device profile and every preset that
quantizes activations. The expectations are written from shared/FACTS.md section 1, not from the code."""
import os

import pytest

import humming
from humming.capabilities import list_profiles
from humming.core.common.paths import choose_path
from humming.errors import UnsupportedOnDevice

ACT_PRESETS = [n for n in humming.schemes.names() if humming.schemes.get(n).act]
PROFILES = {p.name: p for p in list_profiles(include_abstract=False) if p.verified}

# families per device group (FACTS.md section 1)
TCGEN05_I8 = {"nvidia-b200", "nvidia-thor"}          # tcgen05 with kind::i8
TCGEN05_NO_I8 = {"nvidia-b300", "nvidia-rubin"}      # tcgen05 without kind::i8 -> legacy INT8
HOPPER = {"nvidia-h100", "nvidia-h200", "nvidia-h20"}  # wgmma (sm_90a)
SM120 = {"nvidia-rtx-5090", "nvidia-rtx-pro-6000", "nvidia-gb10"}  # block-scaled mma.sync
ADA = {"nvidia-l40s"}                                 # fp8 mma.sync, no block scaling
NO_FP8 = {"nvidia-a100", "nvidia-a10", "nvidia-t4", "thead-zhenwu-810e"}
BLOCK_SCALED = {"w4a4-nvfp4", "w4a4-mxfp4", "mxfp8", "mxfp6", "mxfp6-e3m2"}
INT8_ACT = {"w8a8-int8", "w4a8-int8"}


def expected(profile: str, scheme: str) -> tuple[str, str] | None:
    """(path, family), or None for a refusal."""
    widened = scheme.startswith("w4a8")
    if scheme in INT8_ACT:
        if profile in TCGEN05_NO_I8:
            return ("legacy", "mma_sync")
        fam = "tcgen05" if profile in TCGEN05_I8 else "wgmma" if profile in HOPPER else "mma_sync"
        return ("dequant-to-activation" if widened else "native", fam)
    if scheme in BLOCK_SCALED:
        if profile in TCGEN05_I8 | TCGEN05_NO_I8:
            return ("native", "tcgen05")
        if profile in SM120:
            return ("native", "mma_sync")
        if profile == "nvidia-t4":  # f16 only: NVFP4 (e2m1 x ue4m3) fits f16, ue8m0 scales do not
            return ("upconvert", "mma_sync") if scheme == "w4a4-nvfp4" else None
        return ("upconvert", "mma_sync")
    # fp8 activations per token / tensor / 128-block
    if profile in NO_FP8:
        return None
    fam = "tcgen05" if profile in TCGEN05_I8 | TCGEN05_NO_I8 else "wgmma" if profile in HOPPER else "mma_sync"
    return ("dequant-to-activation" if widened else "native", fam)


def test_every_profile_is_classified():
    groups = TCGEN05_I8 | TCGEN05_NO_I8 | HOPPER | SM120 | ADA | NO_FP8
    assert set(PROFILES) == groups


@pytest.mark.parametrize("scheme", ACT_PRESETS)
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_path(profile, scheme):
    caps, sch = PROFILES[profile], humming.schemes.get(scheme)
    want = expected(profile, scheme)
    if want is None:
        with pytest.raises(UnsupportedOnDevice) as err:
            choose_path(caps, sch)
        assert sch.act in str(err.value) or "declares no" in str(err.value)
        return
    choice = choose_path(caps, sch)
    assert (choice.path, choice.family) == want, choice
    ins = choice.instruction
    if choice.family == "tcgen05":
        assert caps.has_tcgen05_kind(ins.kind)
    if choice.path == "legacy":
        assert "kind::i8 not available" in " ".join(choice.reasons)
        assert ins.shape == (16, 8, 32) and ins.a_type == "s8"
    if scheme in BLOCK_SCALED and choice.path == "native":
        assert ins.scale_format == sch.weight_scale.format and ins.kind in ("mxf4", "mxf4nvf4", "mxf8f6f4")


def test_no_i8_kind_is_ever_chosen_on_b300_or_rubin():
    for name in TCGEN05_NO_I8:
        for scheme in ACT_PRESETS:
            try:
                choice = choose_path(PROFILES[name], humming.schemes.get(scheme))
            except UnsupportedOnDevice:
                continue
            assert choice.instruction.kind != "i8"


def test_hidden_formats_are_refused_with_the_reason():
    sch = humming.schemes.get("w8a8-fp8").with_(act="e3m4", weight="e3m4")
    with pytest.raises(UnsupportedOnDevice, match="no e3m4 type|SASS"):
        choose_path(PROFILES["nvidia-b200"], sch)
    with pytest.raises(UnsupportedOnDevice, match="does not execute the hidden format"):
        choose_path(PROFILES["nvidia-rubin"], sch)


def test_info_shows_the_b300_int8_fallback():
    from humming.device import info

    text = str(info("nvidia-b300"))
    assert "kind::i8 not available on sm_103a -> legacy mma_sync" in text


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_runnable_path_uses_generated_families_and_says_so(profile):
    from humming.core.families.runnable import GENERATED_FAMILIES, runnable_path
    from humming.core.families.tcgen05.planner import tcgen05_generated

    caps = PROFILES[profile]
    for scheme in ACT_PRESETS:
        sch = humming.schemes.get(scheme)
        try:
            ideal = choose_path(caps, sch)
        except UnsupportedOnDevice:
            with pytest.raises(UnsupportedOnDevice):
                runnable_path(caps, sch)
            continue
        run = runnable_path(caps, sch)
        if tcgen05_generated(ideal, sch):  # the tcgen05 W8A8 kernel: compiled, never run, opt-in
            if os.environ.get("HUMMING_UNVERIFIED_KERNELS") == "1":
                assert run == ideal
            else:
                assert run.family in GENERATED_FAMILIES and "not yet validated on hardware" in run.reasons[-1]
            continue
        assert run.family in GENERATED_FAMILIES
        if ideal.family not in GENERATED_FAMILIES:
            assert "not generated yet" in run.reasons[-1] and ideal.describe() in run.reasons[-1]
        elif ideal.path == "native" and ideal.instruction.scale_format and os.environ.get("HUMMING_UNVERIFIED_KERNELS") != "1":
            # the block-scaled mma.sync kernel is compiled but unvalidated: upconvert unless opted in
            assert run.path == "upconvert" and any("not yet validated on hardware" in r for r in run.reasons)
        else:
            assert run == ideal
        if ideal.path == "legacy":
            assert run.path == "legacy"
