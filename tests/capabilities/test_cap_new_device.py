"""A new device defined only by YAML in HUMMING_PROFILE_PATH appears everywhere, with no code change."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import humming.device as device
from humming.capabilities import DetectedDevice, get_profile, list_profiles, match_device, reload_profiles
from humming.errors import ProfileError

ROOT = Path(__file__).resolve().parents[2]

A30 = """\
# A device humming has never heard of, described by data only.
name: acme-a30
extends: nvidia-ampere
display_name: NVIDIA A30
match: {names: ["A30"]}
limits: {sms: 56, smem_per_block_kb: 163, memory_tb_s: 0.933}
notes: ["added from a temporary profile directory"]
"""

# A CUDA-compatible accelerator of a new vendor, on a new (test-only) target: a _targets.yaml entry
# next to the profile declares what that target can have.
NEW_TARGET_RULES = """\
instruction_sets:
  acme_mma:
    mma_sync:
      shapes:
        - {shape: [16, 8, 16], types: [f16, bf16], acc: [f32]}
targets:
  sm_85:
    compute_capability: [8, 5]
    min_nvrtc: "12.8"
    binary_compat: major
    instructions: [acme_mma]
    memory: [ldmatrix, cp_async]
"""
NEW_VENDOR = """\
name: acme-x1
vendor: acme
backend: nvidia
display_name: ACME X1
match: {names: ["ACME X1"]}
target: {arch: sm_85}
mma_sync:
  shapes:
    - {shape: [16, 8, 16], types: [f16], acc: [f32]}
memory: {cp_async: true, ldmatrix: true}
limits: {sms: 64, smem_per_block_kb: 128, max_threads_per_block: 1024, registers_per_thread: 255, warp_size: 32}
"""


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    (tmp_path / "acme-a30.yaml").write_text(A30)
    monkeypatch.setenv("HUMMING_PROFILE_PATH", str(tmp_path))
    reload_profiles()
    yield tmp_path
    monkeypatch.delenv("HUMMING_PROFILE_PATH")
    reload_profiles()


def _cli(*args: str, env_dir: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HUMMING_SKIP_DETECT": "1"}
    env.pop("HUMMING_DEVICE_PROFILE", None)
    if env_dir is not None:
        env["HUMMING_PROFILE_PATH"] = str(env_dir)
    return subprocess.run([sys.executable, "-m", "humming", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_new_device_is_listed_loaded_and_matched(profile_dir):
    assert "acme-a30" in [p.name for p in list_profiles()]
    caps = get_profile("acme-a30")
    assert caps.limits.sms == 56 and caps.target.arch == "sm_80" and "nvidia-ampere" in caps.lineage
    assert caps.source == str(profile_dir / "acme-a30.yaml")
    found = match_device(DetectedDevice("nvidia", "NVIDIA A30", (8, 0), sms=56))
    assert found.profile.name == "acme-a30" and found.how == "name"


def test_without_the_directory_it_is_gone():
    reload_profiles()
    with pytest.raises(ProfileError):
        get_profile("acme-a30")
    assert match_device(DetectedDevice("nvidia", "NVIDIA A30", (8, 0))).how == "fallback"


def test_new_device_appears_in_info(profile_dir, monkeypatch):
    from humming.devices import current

    def detect(refresh=False):
        return (DetectedDevice("nvidia", "NVIDIA A30", (8, 0), 56),)

    monkeypatch.setattr(current, "detect_devices", detect)  # (humming.device re-exports it)
    monkeypatch.setattr(device, "detect_devices", detect)
    monkeypatch.delenv("HUMMING_DEVICE_PROFILE", raising=False)
    info = device.info()
    assert info.profile.name == "acme-a30" and info.how == "name"
    assert "acme-a30" in str(info) and "NVIDIA A30" in str(info)
    assert device.current_profile().name == "acme-a30"


def test_new_device_appears_in_the_cli(profile_dir):
    listing = _cli("profiles", env_dir=profile_dir)
    assert listing.returncode == 0, listing.stderr
    assert "acme-a30" in listing.stdout
    shown = _cli("info", "--profile", "acme-a30", "--json", env_dir=profile_dir)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["profile"]["limits"]["sms"] == 56
    checked = _cli("profile", "validate", str(profile_dir / "acme-a30.yaml"), env_dir=profile_dir)
    assert checked.returncode == 0 and "ok" in checked.stdout


def test_new_vendor_on_a_new_target(profile_dir, monkeypatch):
    other = profile_dir / "more"
    other.mkdir()
    (other / "_targets.yaml").write_text(NEW_TARGET_RULES)
    (other / "acme-x1.yaml").write_text(NEW_VENDOR)
    monkeypatch.setenv("HUMMING_PROFILE_PATH", os.pathsep.join([str(profile_dir), str(other)]))
    reload_profiles()
    x1 = get_profile("acme-x1")
    assert x1.vendor == "acme" and x1.target.compute_capability == (8, 5)
    assert match_device(DetectedDevice("acme", "ACME X1 rev2", (8, 5))).profile.name == "acme-x1"
    assert get_profile("acme-a30").limits.sms == 56  # the first directory is still there


def test_later_directory_overrides_by_name(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "h200.yaml").write_text("name: nvidia-h200\nreplaces: nvidia-h200\nextends: nvidia-hopper\nmatch: {names: [H200]}\n"
                                     "limits: {sms: 1}\n")
    (second / "h200.yaml").write_text("name: nvidia-h200\nreplaces: nvidia-h200\nextends: nvidia-hopper\nmatch: {names: [H200]}\n"
                                      "limits: {sms: 2}\n")
    monkeypatch.setenv("HUMMING_PROFILE_PATH", os.pathsep.join([str(first), str(second)]))
    reload_profiles()
    try:
        assert get_profile("nvidia-h200").limits.sms == 2
        assert get_profile("nvidia-h200").source == str(second / "h200.yaml")
    finally:
        monkeypatch.delenv("HUMMING_PROFILE_PATH")
        reload_profiles()
    assert get_profile("nvidia-h200").limits.sms == 132


def test_missing_directory_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HUMMING_PROFILE_PATH", str(tmp_path / "nope"))
    try:
        with pytest.raises(ProfileError, match="HUMMING_PROFILE_PATH: .*nope.* is not a directory"):
            reload_profiles()
    finally:
        monkeypatch.delenv("HUMMING_PROFILE_PATH")
        reload_profiles()
