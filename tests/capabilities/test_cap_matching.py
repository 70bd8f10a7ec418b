"""Matching live devices to profiles: by vendor, compute capability and name; fallbacks warn."""
from __future__ import annotations

import pytest

from humming.capabilities import DetectedDevice, get_profile, match_device, name_matches, specialize

CASES = [
    # (vendor, driver name, cc) -> (profile, how)
    ("nvidia", "NVIDIA H200", (9, 0), "nvidia-h200", "name"),
    ("nvidia", "NVIDIA H200 NVL", (9, 0), "nvidia-h200", "name"),
    ("nvidia", "NVIDIA H100 80GB HBM3", (9, 0), "nvidia-h100", "name"),
    ("nvidia", "NVIDIA H100 PCIe", (9, 0), "nvidia-h100", "name"),
    ("nvidia", "NVIDIA H20", (9, 0), "nvidia-h20", "name"),
    ("nvidia", "NVIDIA H20-3e", (9, 0), "nvidia-h20", "name"),
    ("nvidia", "NVIDIA H800", (9, 0), "nvidia-hopper", "fallback"),
    ("nvidia", "Tesla T4", (7, 5), "nvidia-t4", "name"),
    ("nvidia", "NVIDIA GeForce RTX 2080 Ti", (7, 5), "nvidia-turing", "fallback"),
    ("nvidia", "NVIDIA A100-SXM4-80GB", (8, 0), "nvidia-a100", "name"),
    ("nvidia", "NVIDIA A100 80GB PCIe", (8, 0), "nvidia-a100", "name"),
    ("nvidia", "NVIDIA A10", (8, 6), "nvidia-a10", "name"),
    ("nvidia", "NVIDIA A10G", (8, 6), "nvidia-ampere", "fallback"),       # sm_80 code runs on 8.6
    ("nvidia", "NVIDIA A30", (8, 0), "nvidia-ampere", "fallback"),
    ("nvidia", "NVIDIA GeForce RTX 3090", (8, 6), "nvidia-ampere", "fallback"),
    ("nvidia", "Orin", (8, 7), "nvidia-ampere", "fallback"),
    ("nvidia", "NVIDIA L40S", (8, 9), "nvidia-l40s", "name"),
    ("nvidia", "NVIDIA L4", (8, 9), "nvidia-ada", "fallback"),
    ("nvidia", "NVIDIA GeForce RTX 4090", (8, 9), "nvidia-ada", "fallback"),
    ("nvidia", "NVIDIA B200", (10, 0), "nvidia-b200", "name"),
    ("nvidia", "NVIDIA GB200", (10, 0), "nvidia-blackwell-datacenter", "fallback"),
    ("nvidia", "NVIDIA B300 SXM6 AC", (10, 3), "nvidia-b300", "name"),
    ("nvidia", "NVIDIA GB300", (10, 3), "nvidia-b300", "fallback"),      # sm_100a code cannot run on 10.3
    ("nvidia", "NVIDIA Thor", (11, 0), "nvidia-thor", "name"),
    ("nvidia", "NVIDIA Rubin", (10, 7), "nvidia-rubin", "compute_capability"),
    ("nvidia", "NVIDIA Vera Rubin NVL144", (10, 7), "nvidia-rubin", "compute_capability"),
    ("nvidia", "NVIDIA GeForce RTX 5090", (12, 0), "nvidia-rtx-5090", "name"),
    ("nvidia", "NVIDIA GeForce RTX 5080", (12, 0), "nvidia-blackwell-consumer", "fallback"),
    ("nvidia", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", (12, 0), "nvidia-rtx-pro-6000", "name"),
    ("nvidia", "NVIDIA RTX PRO 6000 Blackwell Server Edition", (12, 0), "nvidia-rtx-pro-6000", "name"),
    ("nvidia", "NVIDIA GB10", (12, 1), "nvidia-gb10", "name"),
    ("nvidia", "NVIDIA Unknown Spark", (12, 1), "nvidia-gb10", "fallback"),  # sm_120a code cannot run on 12.1
    ("nvidia", "NVIDIA H200", (8, 0), "nvidia-ampere", "fallback"),        # a name is not enough if cc disagrees
    ("thead", "PPU-ZW810E", (8, 0), "thead-zhenwu-810e", "name"),
    ("thead", "ZW810E", (8, 0), "thead-zhenwu-810e", "name"),
    ("thead", "PPU 810E", None, "thead-zhenwu-810e", "name"),
    ("thead", "PPU", (8, 0), "thead-ppu", "fallback"),
    ("thead", "ZW-X100", (8, 0), "thead-ppu", "fallback"),
    ("thead", "T-Head PPU", None, "thead-ppu", "fallback"),
    ("thead", "PPU-M890", None, "thead-zhenwu-m890", "name"),
]


@pytest.mark.parametrize("vendor,name,cc,profile,how", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES])
def test_match(vendor, name, cc, profile, how):
    found = match_device(DetectedDevice(vendor, name, cc, sms=None, index=0, source="test"))
    assert found.profile is not None, found.reason
    assert (found.profile.name, found.how) == (profile, how), found.reason
    if how == "fallback":
        assert found.warning and name in found.warning and profile in found.warning
        assert "HUMMING_DEVICE_PROFILE" in found.warning
        assert not found.exact
    else:
        assert found.warning is None and found.exact


@pytest.mark.parametrize("vendor,name,cc", [
    ("nvidia", "Tesla V100-SXM2-16GB", (7, 0)),     # older than every profile
    ("nvidia", "NVIDIA Future", (13, 0)),           # newer major: no known target runs there
    ("amd", "AMD Instinct MI300X", (9, 4)),          # no profile for the vendor
    ("nvidia", "Mystery", None),                    # nothing to go on
])
def test_no_match(vendor, name, cc):
    found = match_device(DetectedDevice(vendor, name, cc))
    assert found.profile is None and found.how == "none" and found.reason


@pytest.mark.parametrize("pattern,name,expected", [
    ("H20", "NVIDIA H20", True),
    ("H20", "NVIDIA H200", False),
    ("H200", "NVIDIA H200 NVL", True),
    ("A10", "NVIDIA A100-SXM4-40GB", False),
    ("A100", "NVIDIA A100-SXM4-40GB", True),
    ("RTX PRO 6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", True),
    ("RTX 5090", "NVIDIA GeForce RTX 5090 D", True),
    ("RTX 5090", "NVIDIA GeForce RTX 5080", False),
    ("*810E*", "PPU-ZW810E", True),
    ("*810e*", "ZW810E", True),
    ("*M890*", "ZW810E", False),
    ("T4", "Tesla T4", True),
    ("", "anything", False),
])
def test_name_patterns(pattern, name, expected):
    assert name_matches(pattern, name) is expected


def test_specialize_takes_the_live_sm_count():
    h100 = get_profile("nvidia-h100")
    pcie = DetectedDevice("nvidia", "NVIDIA H100 PCIe", (9, 0), sms=114)
    live = specialize(match_device(pcie).profile, pcie)
    assert live.limits.sms == 114 and h100.limits.sms == 132
    assert any("114" in n and "driver" in n for n in live.notes)
    same = DetectedDevice("nvidia", "NVIDIA H100 80GB HBM3", (9, 0), sms=132)
    assert specialize(h100, same) is h100
