"""Detectors: never crash without a driver; PPU names are recognised; driver answers are read right."""
from __future__ import annotations

import sys
import types

from humming.capabilities import DetectedDevice
from humming.devices.nvidia import detect as nvidia
from humming.devices.thead_ppu import detect as ppu


def test_no_driver_means_no_devices(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # import fails
    assert nvidia.detect() == []


def test_skip_env(monkeypatch):
    monkeypatch.setenv(nvidia.SKIP_ENV, "1")
    assert nvidia.query_driver() == []


def test_this_machine_does_not_crash():
    devices = nvidia.detect()
    assert isinstance(devices, list) and all(isinstance(d, DetectedDevice) for d in devices)


def _fake_driver(devices, fail_init=False):
    """A stand-in for cuda.bindings.driver answering like the real one: (CUresult, value) tuples."""
    attr = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
                                 CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor",
                                 CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT="sms")
    return types.SimpleNamespace(
        CUdevice_attribute=attr,
        cuInit=lambda flags: (100 if fail_init else 0,),
        cuDeviceGetCount=lambda: (0, len(devices)),
        cuDeviceGet=lambda i: (0, i),
        cuDeviceGetName=lambda n, dev: (0, devices[dev][0].encode() + b"\0" * 8),
        cuDeviceGetAttribute=lambda a, dev: (0, {"major": devices[dev][1][0], "minor": devices[dev][1][1],
                                                 "sms": devices[dev][2]}[a]),
    )


def _install(monkeypatch, driver):
    package = types.ModuleType("cuda.bindings")
    package.driver = driver
    monkeypatch.setitem(sys.modules, "cuda.bindings", package)
    monkeypatch.setitem(sys.modules, "cuda.bindings.driver", driver)
    monkeypatch.delenv(nvidia.SKIP_ENV, raising=False)


def test_driver_answers_become_devices(monkeypatch):
    _install(monkeypatch, _fake_driver([("NVIDIA H200", (9, 0), 132), ("PPU-ZW810E", (8, 0), 20)]))
    found = nvidia.detect()
    assert found[0] == DetectedDevice("nvidia", "NVIDIA H200", (9, 0), 132, 0, nvidia.SOURCE)
    assert found[1].name == "PPU-ZW810E" and found[1].index == 1
    assert ppu.detect(found) == [DetectedDevice("thead", "PPU-ZW810E", (8, 0), 20, 1, "cuda driver (PPU name)")]


def test_driver_failure_is_no_device(monkeypatch):
    _install(monkeypatch, _fake_driver([("NVIDIA H200", (9, 0), 132)], fail_init=True))
    assert nvidia.detect() == []

    def explode(flags):
        raise RuntimeError("driver exploded")

    broken = _fake_driver([])
    broken.cuInit = explode
    _install(monkeypatch, broken)
    assert nvidia.detect() == []


def test_ppu_names():
    for name in ("PPU", "PPU-ZW810E", "ZW810E", "zw m890", " PPU 810E"):
        assert ppu.is_ppu_name(name)
    for name in ("NVIDIA H200", "Tesla T4", "APPU"):
        assert not ppu.is_ppu_name(name)
    assert ppu.claim(DetectedDevice("nvidia", "NVIDIA H20", (9, 0))) is None


def test_ppu_device_nodes_without_driver(monkeypatch):
    monkeypatch.setattr(ppu.glob, "glob", lambda pattern: ["/dev/alixpu0", "/dev/alixpu1", "/dev/alixpu_ctl"])
    monkeypatch.setenv(ppu.SDK_ENV, "/opt/ppu-sdk")
    found = ppu.detect(driver_devices=[])
    assert [d.index for d in found] == [0, 1]
    assert found[0].vendor == "thead" and found[0].compute_capability is None
    assert "/dev/alixpu0" in found[0].source and "/opt/ppu-sdk" in found[0].source


def test_no_ppu_here(monkeypatch):
    monkeypatch.setattr(ppu.glob, "glob", lambda pattern: [])
    assert ppu.detect(driver_devices=[]) == []
