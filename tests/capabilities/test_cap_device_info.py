"""humming.device.info() / current_profile() and the CLI, on synthetic devices and without any."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import humming.device as device
from humming.capabilities import DetectedDevice
from humming.errors import ProfileError, UnsupportedOnDevice

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("HUMMING_DEVICE_PROFILE", raising=False)
    monkeypatch.delenv("HUMMING_PROFILE_PATH", raising=False)


def _devices(monkeypatch, *devs: DetectedDevice):
    """The detectors find ``devs`` (humming.devices.current asks them; humming.device re-exports it)."""
    from humming.devices import current

    def detect(refresh=False):
        return tuple(devs)

    monkeypatch.setattr(current, "detect_devices", detect)
    monkeypatch.setattr(device, "detect_devices", detect)


def _no_planner(monkeypatch):
    monkeypatch.setitem(sys.modules, "humming.core.path_table", None)  # import raises ImportError


def test_no_device(monkeypatch, no_env):
    _devices(monkeypatch)
    info = device.info()
    assert info.profile is None and info.device is None and info.how == "none"
    text = str(info)
    assert "detected:  none" in text and "HUMMING_DEVICE_PROFILE" in text
    json.dumps(info.to_dict())
    with pytest.raises(UnsupportedOnDevice, match="no device found.*HUMMING_DEVICE_PROFILE"):
        device.current_profile()


def test_named_profile_without_device(monkeypatch, no_env):
    _devices(monkeypatch)
    _no_planner(monkeypatch)
    info = device.info("nvidia-b300")
    assert info.profile.name == "nvidia-b300" and info.how == "requested"
    text = str(info)
    assert "sm_103a" in text and "family sm_103f" in text and "nvrtc >= 12.9" in text
    assert "tcgen05 kind::i8 is not declared" in text and "legacy mma_sync path" in text
    assert "m16n8k32 s8 x s8 -> s32" in text
    assert "paths:     planner not available" in text
    data = info.to_dict()
    json.dumps(data)
    assert data["paths"] is None and data["paths_note"] == "planner not available"
    assert any("INT8" in line for line in data["summary"]["legacy_paths"])


def test_forced_profile(monkeypatch, no_env):
    _devices(monkeypatch, DetectedDevice("nvidia", "NVIDIA H200", (9, 0), 132))
    monkeypatch.setenv("HUMMING_DEVICE_PROFILE", "nvidia-t4")
    assert device.current_profile().name == "nvidia-t4"
    info = device.info()
    assert info.how == "forced" and "HUMMING_DEVICE_PROFILE=nvidia-t4" in info.reason
    assert any("matches profile 'nvidia-h200'" in w for w in info.warnings)
    monkeypatch.setenv("HUMMING_DEVICE_PROFILE", "nvidia-t5")
    with pytest.raises(ProfileError, match="did you mean 'nvidia-t4'"):
        device.current_profile()


def test_detected_device_is_matched(monkeypatch, no_env):
    _devices(monkeypatch, DetectedDevice("nvidia", "NVIDIA H20", (9, 0), 78, 0, "cuda driver"))
    caps = device.current_profile()
    assert caps.name == "nvidia-h20"
    info = device.info()
    assert info.how == "name" and "NVIDIA H20" in str(info) and "wgmma" in str(info)


def test_unknown_card_falls_back_with_a_warning(monkeypatch, no_env):
    _devices(monkeypatch, DetectedDevice("nvidia", "NVIDIA H800", (9, 0), 132))
    with pytest.warns(UserWarning, match="no profile matches 'NVIDIA H800'.*nvidia-hopper"):
        caps = device.current_profile()
    assert caps.name == "nvidia-hopper" and caps.limits.sms == 132
    info = device.info()
    assert info.how == "fallback" and any("nvidia-hopper" in w for w in info.warnings)
    assert "warning:" in str(info)


def test_unsupported_card(monkeypatch, no_env):
    _devices(monkeypatch, DetectedDevice("nvidia", "Tesla V100", (7, 0), 80))
    with pytest.raises(UnsupportedOnDevice, match="HUMMING_DEVICE_PROFILE"):
        device.current_profile()
    assert device.info().profile is None


def test_ppu_device(monkeypatch, no_env):
    _devices(monkeypatch, DetectedDevice("thead", "PPU-ZW810E", (8, 0), 20, 0, "cuda driver (PPU name)"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        caps = device.current_profile()
    assert caps.name == "thead-zhenwu-810e" and caps.limits.sms == 20
    text = str(device.info())
    assert "ppu_mma_m16n16k16" in text and "vendor_nvcc" in text


def test_paths_from_the_planner(monkeypatch, no_env):
    import types

    fake = types.ModuleType("humming.core.path_table")
    fake.path_table = lambda caps: [{"scheme": "w4a16", "family": "mma_sync", "instruction": "mma.sync m16n8k16",
                                     "reason": f"declared by {caps.name}"}]
    monkeypatch.setitem(sys.modules, "humming.core.path_table", fake)
    _devices(monkeypatch)
    info = device.info("nvidia-h200")
    assert info.paths[0]["reason"] == "declared by nvidia-h200"
    assert "w4a16" in str(info) and "declared by nvidia-h200" in str(info)

    def broken(caps):
        raise RuntimeError("boom")

    fake.path_table = broken
    assert "planner failed: RuntimeError: boom" in str(device.info("nvidia-h200"))


def test_real_detection_never_crashes(no_env):
    devices = device.detect_devices(refresh=True)
    assert isinstance(devices, tuple)
    str(device.info())


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HUMMING_SKIP_DETECT": "1"}
    env.pop("HUMMING_DEVICE_PROFILE", None)
    env.pop("HUMMING_PROFILE_PATH", None)
    return subprocess.run([sys.executable, "-m", "humming", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_cli_profiles_lists_at_least_16():
    out = _cli("profiles")
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0]
    for column in ("name", "target", "SMs", "smem", "MMA families", "INT8", "FP8", "FP4", "notes"):
        assert column in header
    rows = _cli("profiles", "--json", "--devices")
    data = json.loads(rows.stdout)
    assert len(data) >= 16
    b300 = next(r for r in data if r["name"] == "nvidia-b300")
    assert b300["INT8"] == "mma_sync (legacy)" and b300["FP4"] == "tcgen05"
    assert next(r for r in data if r["name"] == "thead-zhenwu-810e")["FP8"] == "-"


def test_cli_info_states_the_b300_int8_fallback():
    out = _cli("info", "--profile", "nvidia-b300")
    assert out.returncode == 0, out.stderr
    assert "INT8" in out.stdout and "legacy mma_sync path" in out.stdout
    as_json = json.loads(_cli("info", "--profile", "nvidia-b300", "--json").stdout)
    assert as_json["profile"]["name"] == "nvidia-b300"
    plain = _cli("info")
    assert plain.returncode == 0 and "detected:  none" in plain.stdout


def test_cli_profile_validate_and_show():
    builtin = sorted(str(p) for p in (ROOT / "device_profiles").rglob("*.yaml")
               if not p.name.startswith("_") and "tuning" not in p.parts)
    ok = _cli("profile", "validate", *builtin)
    assert ok.returncode == 0, ok.stdout
    bad = _cli("profile", "validate", str(ROOT / "tests/capabilities/broken_profiles/unknown_kind_remove.yaml"))
    assert bad.returncode == 1 and "unknown kind 'i9'" in bad.stdout
    shown = _cli("profile", "show", "nvidia-h200")
    assert shown.returncode == 0 and shown.stdout.startswith("name: nvidia-h200")
    unknown = _cli("profile", "show", "nvidia-h2000")
    assert unknown.returncode == 2 and "did you mean 'nvidia-h200'" in unknown.stderr


def test_cli_info_knobs_lists_every_knob_with_the_profiles_value(tmp_path):
    from humming.capabilities import get_profile
    from humming.core.tuning import knobs

    out = _cli("info", "--knobs", "--profile", "nvidia-h200", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["profile"] == "nvidia-h200" and set(data["knobs"]) == set(knobs.KNOBS)
    assert data["knobs"] == json.loads(json.dumps(knobs.table(get_profile("nvidia-h200"))))
    text = _cli("info", "--knobs", "--profile", "nvidia-t4").stdout
    assert "register_a.raster" in text and "tuning knobs for nvidia-t4" in text
