"""PPU detection on synthetic device descriptions: claimed by name, matched to the right profile and backend."""
from __future__ import annotations

import pytest

import humming.device as device
from humming.capabilities import DetectedDevice, match_device
from humming.devices import current, get_backend
from humming.devices.thead_ppu import detect as ppu
from humming.devices.thead_ppu.backend import PPUBackend
from humming.errors import UnsupportedOnDevice


def _driver(name, cc=(8, 0), sms=20, index=0):
    return DetectedDevice("nvidia", name, cc, sms, index, "cuda driver")


@pytest.mark.parametrize("name", ["PPU-ZW810E", "ZW810E", "PPU 810E", "zw810e"])
def test_810e_names_are_claimed_and_matched(name):
    claimed = ppu.detect([_driver(name)])
    assert len(claimed) == 1 and claimed[0].vendor == "thead" and claimed[0].compute_capability == (8, 0)
    found = match_device(claimed[0])
    assert found.profile.name == "thead-zhenwu-810e" and found.how == "name"
    backend = get_backend(found.profile)
    assert isinstance(backend, PPUBackend) and backend.supports(found.profile)


def test_nvidia_devices_are_not_claimed(monkeypatch):
    monkeypatch.setattr(ppu.glob, "glob", lambda pattern: [])
    devices = [_driver("NVIDIA H200", (9, 0), 132), _driver("Tesla T4", (7, 5), 40, 1)]
    assert [ppu.claim(d) for d in devices] == [None, None]
    assert ppu.detect(devices) == []


def test_mixed_host_keeps_indices(monkeypatch):
    monkeypatch.setattr(ppu.glob, "glob", lambda pattern: [])
    found = ppu.detect([_driver("NVIDIA H20", (9, 0), 78, 0), _driver("PPU-ZW810E", (8, 0), 20, 1)])
    assert [(d.name, d.index, d.sms) for d in found] == [("PPU-ZW810E", 1, 20)]


def test_unknown_ppu_model_falls_back_to_the_family_profile():
    claimed = ppu.claim(_driver("PPU-ZW999"))
    found = match_device(claimed)
    assert found.profile.name == "thead-ppu" and found.how == "fallback" and found.warning
    route = get_backend(found.profile).compile_route(found.profile)
    assert route.compiler == "nvrtc" and route.arch == "sm_80"


def test_device_nodes_without_a_driver(monkeypatch):
    monkeypatch.setattr(ppu.glob, "glob", lambda pattern: ["/dev/alixpu0", "/dev/alixpu1", "/dev/alixpu_ctl"])
    found = ppu.detect(driver_devices=[])
    assert [d.index for d in found] == [0, 1] and all(d.compute_capability is None for d in found)
    match = match_device(found[0])
    assert match.profile.name == "thead-ppu" and match.how == "fallback"


def test_m890_is_recognised_but_cannot_be_compiled_for():
    found = match_device(ppu.claim(_driver("ZW M890", None, None)))
    assert found.profile.name == "thead-zhenwu-m890" and not found.profile.verified
    backend = get_backend(found.profile)
    with pytest.raises(UnsupportedOnDevice, match=r"target\.arch is null"):
        backend.compile_route(found.profile)


def test_current_profile_on_a_synthetic_ppu_host(monkeypatch):
    """The detection lives in humming.devices.current (humming.device re-exports it): both see the synthetic host;
    the live target it implies (current.live_arch) is not kept for later tests."""
    def synthetic(refresh=False):
        return (DetectedDevice("thead", "PPU-ZW810E", (8, 0), 20, 0, "test"),)

    monkeypatch.setattr(current, "detect_devices", synthetic)
    monkeypatch.setattr(device, "detect_devices", synthetic)
    caps = device.current_profile()
    assert caps.name == "thead-zhenwu-810e" and caps.limits.sms == 20  # the driver's SM count is used
    info = device.info()
    assert "thead-zhenwu-810e" in str(info) and info.device.name == "PPU-ZW810E" and info.paths
    assert current.live_arch() == "sm_80"  # the live target follows the detected devices ...
    monkeypatch.undo()
    real_ppu = any(d.vendor == "thead" for d in current.detect_devices())
    assert real_ppu or current.live_arch() != "sm_80"  # ... and is not kept once they change
