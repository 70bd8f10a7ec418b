"""Every plan the registry chooses is owned by exactly one kernel family (the one whose generator writes it and whose
packer prepares its weights), across profiles, schemes and M, with the unverified kernels off and on."""
import pytest

from humming.capabilities import list_profiles
from humming.core import registry
from humming.core.problem import Problem, scheme_of
from humming.errors import HummingError

SCHEMES = ["w4a16", "w8a16", "w4a16-nvfp4", "w4a16-mxfp4", "w8a8-fp8", "w8a8-int8", "w4a8-fp8", "w4a8-int8",
           "w4a8-mxfp4", "w4a4-nvfp4", "w4a4-mxfp4"]


@pytest.mark.parametrize("unverified", ["0", "1"])
def test_each_chosen_plan_has_one_owner(unverified, monkeypatch):
    monkeypatch.setenv("HUMMING_UNVERIFIED_KERNELS", unverified)
    seen = set()
    for caps in list_profiles(include_abstract=False):
        for name in SCHEMES:
            for m in (1, 64, 512):
                try:
                    sel = registry.select(Problem(scheme_of(name), m, 4096, 4096), caps)
                except HummingError:
                    continue
                owners = [f.name for f in registry.KERNEL_FAMILIES if f.owns(sel.plan)]
                assert owners == [sel.kernel.name], (caps.name, name, m, owners)
                seen.add(sel.kernel.name)
    if unverified == "1":  # (the table covers the gated families too)
        assert {"tcgen05_w8a8", "tcgen05_blockscaled", "tcgen05_w4a8", "tcgen05_wna16"} <= seen


MOE_KNOBS = {"moe.w4a8_min_rows": 1, "moe.wgmma_8bit_min_rows": 1, "moe.mma_8bit_min_rows": 1}  # (the 8-bit MoE kernels, off by default, on)


@pytest.mark.parametrize("unverified", ["0", "1"])
def test_each_chosen_moe_plan_has_one_owner(unverified, monkeypatch):
    from humming.core.tuning import knobs

    monkeypatch.setenv("HUMMING_UNVERIFIED_KERNELS", unverified)
    seen = set()
    with knobs.override(MOE_KNOBS):
        for caps in list_profiles(include_abstract=False):
            for name in SCHEMES + ["w8a8-fp8-block", "w4a16-zp"]:
                for tokens in (1, 512, 8192):
                    problem = Problem(scheme_of(name), tokens, 1536, 2048, form="indexed", experts=64, top_k=8)
                    try:
                        sel = registry.select(problem, caps)
                    except HummingError:
                        continue
                    owners = [f.name for f in registry.KERNEL_FAMILIES if f.owns(sel.plan)]
                    assert owners == [sel.kernel.name], (caps.name, name, tokens, owners)
                    seen.add(sel.kernel.name)
    assert {"moe_wna16"} <= seen
