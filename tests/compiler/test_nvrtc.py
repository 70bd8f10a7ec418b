"""NVRTC discovery, target tables and toolchain selection (CPU only)."""
from __future__ import annotations

import os

import pytest

from humming.core.compile import nvrtc
from humming.errors import HummingError, SettingsError, UnsupportedOnDevice

TOOLCHAINS = nvrtc.available_toolchains()
pytestmark = pytest.mark.skipif(not TOOLCHAINS, reason="no NVRTC library installed (pip install nvidia-cuda-nvrtc)")
MAJORS = sorted({t.version[0] for t in TOOLCHAINS})


def _by_major(major: int) -> nvrtc.NvrtcToolchain | None:
    return next((t for t in TOOLCHAINS if t.version[0] == major), None)


def test_toolchains_are_loaded_and_describe_themselves():
    for t in TOOLCHAINS:
        assert os.path.exists(t.path), t.path
        assert t.version >= (12, 0)
        assert t.supported_archs and all(isinstance(a, int) for a in t.supported_archs)
        assert t.arch_specific_archs <= t.supported_archs and t.family_archs <= t.supported_archs
        assert t.origin in ("wheel", "system", "HUMMING_NVRTC_PATH")
        assert str(t.version[0]) in t.describe()
        assert t.supports("sm_80") and t.supports("sm_90a")
        assert not t.supports("sm_90f") and not t.supports("sm_80a")
    versions = [t.version for t in TOOLCHAINS]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)


def test_target_tables_match_facts():
    t12, t13 = _by_major(12), _by_major(13)
    if t12 is not None:
        assert t12.supports("sm_70") and not t12.supports("sm_110a")
        if t12.version >= (12, 9):
            assert t12.supports("sm_103f") and t12.supports("sm_121a")
    if t13 is not None:
        assert not t13.supports("sm_72") and not t13.supports("sm_101a")
        assert t13.supports("sm_110a") and t13.supports("sm_110f")
        assert t13.supports("sm_107a") == (t13.version >= (13, 4))
    if t12 is None and t13 is None:
        pytest.skip("neither a CUDA 12 nor a CUDA 13 NVRTC is installed")


@pytest.mark.parametrize("bad", ["sm90", "compute_90", "sm_90x", "", "SM_90"])
def test_parse_arch_rejects_malformed_targets(bad):
    with pytest.raises(UnsupportedOnDevice, match="not an NVRTC CUBIN target"):
        nvrtc.parse_arch(bad)
    assert nvrtc.parse_arch("sm_103f") == (103, "f")


def test_auto_selects_newest_supporting_toolchain(monkeypatch):
    newest = TOOLCHAINS[0]
    assert nvrtc.select_toolchain("sm_90a").version == newest.version
    if _by_major(12) is not None:  # only CUDA 12 still accepts sm_70
        assert nvrtc.select_toolchain("sm_70").version[0] == 12
    assert nvrtc.select_toolchain("sm_80", min_version=TOOLCHAINS[-1].version).version == newest.version


@pytest.mark.parametrize("major", [12, 13])
def test_env_restricts_major(monkeypatch, major):
    if _by_major(major) is None:
        pytest.skip(f"NVRTC {major} not installed (pip install {nvrtc.PIP_PACKAGE[major]})")
    monkeypatch.setenv("HUMMING_NVRTC", str(major))
    assert nvrtc.select_toolchain("sm_90a").version[0] == major


def test_missing_target_error_names_installed_versions_and_package(monkeypatch):
    with pytest.raises(UnsupportedOnDevice) as e:
        nvrtc.select_toolchain("sm_90a", min_version=(99, 0))
    text = str(e.value)
    assert isinstance(e.value, HummingError)
    for t in TOOLCHAINS:
        assert f"NVRTC {t.version[0]}.{t.version[1]}" in text
    assert "needs NVRTC >= 99.0" in text and "pip install" in text


def test_env_major_that_cannot_compile_target(monkeypatch):
    if _by_major(12) is None or _by_major(13) is None:
        pytest.skip("needs both a CUDA 12 and a CUDA 13 NVRTC")
    monkeypatch.setenv("HUMMING_NVRTC", "12")
    with pytest.raises(UnsupportedOnDevice) as e:
        nvrtc.select_toolchain("sm_110a")
    assert "HUMMING_NVRTC=12" in str(e.value) and "accepts sm_110a" in str(e.value)
    monkeypatch.setenv("HUMMING_NVRTC", "banana")
    with pytest.raises(SettingsError, match="HUMMING_NVRTC='banana'"):
        nvrtc.select_toolchain("sm_80")


def test_env_path_pins_a_library(monkeypatch):
    oldest = TOOLCHAINS[-1]
    monkeypatch.setenv("HUMMING_NVRTC_PATH", oldest.path)
    chosen = nvrtc.select_toolchain("sm_80")
    assert os.path.realpath(chosen.path) == os.path.realpath(oldest.path)
    assert chosen.version == oldest.version
    # a directory works too; a bogus item beside it is an error (a pin is a pin: tests/compiler/test_nvrtc_pin.py)
    monkeypatch.setenv("HUMMING_NVRTC_PATH", os.path.dirname(oldest.path))
    assert nvrtc.select_toolchain("sm_80").version == oldest.version
    monkeypatch.setenv("HUMMING_NVRTC_PATH", os.pathsep.join([os.path.dirname(oldest.path), "/nonexistent/libnvrtc.so"]))
    with pytest.raises(SettingsError, match="/nonexistent/libnvrtc.so: does not exist"):
        nvrtc.select_toolchain("sm_80")


def test_nonexistent_suffix_gets_a_spelling_hint():
    with pytest.raises(UnsupportedOnDevice, match="target sm_90, sm_90a|target one of sm_90, sm_90a"):
        nvrtc.select_toolchain("sm_90f")
