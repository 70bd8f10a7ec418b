"""Shared fixtures of the PPU tests: a clean environment, profile directories, sources with the profile bound."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PPU_810E_YAML = ROOT / "device_profiles" / "thead" / "zhenwu-810e.yaml"
_ENV = ("PPU_SDK", "HUMMING_PPU_EXTENSIONS", "HUMMING_PPU_NVCC_FLAGS", "HUMMING_DEVICE_PROFILE", "HUMMING_PROFILE_PATH",
        "HUMMING_CACHE", "HUMMING_NVRTC", "HUMMING_NVRTC_PATH", "HUMMING_LINEINFO")


@pytest.fixture(scope="session")
def kernel_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, kernel_cache_dir):
    """No SDK, no forced profile, no extra profile directories, a private kernel cache."""
    for var in _ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HUMMING_CACHE_DIR", str(kernel_cache_dir))
    from humming.capabilities import reload_profiles

    reload_profiles()
    yield
    reload_profiles()


@pytest.fixture
def profile_dir(tmp_path, monkeypatch):
    """A temporary HUMMING_PROFILE_PATH directory; write YAML files into it, then call reload_profiles()."""
    from humming.capabilities import reload_profiles

    directory = tmp_path / "profiles"
    directory.mkdir()
    monkeypatch.setenv("HUMMING_PROFILE_PATH", str(directory))
    reload_profiles()
    return directory


def write_810e_variant(directory: Path, edit) -> Path:
    """A copy of the shipped 810E profile (same name and `replaces:` it, so it replaces the built-in one), changed
    by ``edit(doc)``."""
    from humming.capabilities import reload_profiles

    doc = yaml.safe_load(PPU_810E_YAML.read_text())
    name = doc.pop("name")
    doc = {"name": name, "replaces": name, **doc}
    edit(doc)
    path = directory / "zhenwu-810e.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    reload_profiles()
    return path


class BoundBackend:
    """A backend whose prelude always sees the profile (what the generator does once it passes caps)."""

    def __init__(self, backend, caps):
        self.backend, self.caps = backend, caps

    def prelude(self, request):
        if request.caps is None:
            request = dataclasses.replace(request, caps=self.caps)
        return self.backend.prelude(request)

    def __getattr__(self, name):
        return getattr(self.backend, name)


def ppu_source(plan, caps) -> str:
    """The generated kernel of ``plan`` with the profile passed to the PPU backend."""
    from humming.core.registry import kernel_source
    from humming.devices import get_backend

    return kernel_source(plan, BoundBackend(get_backend(caps), caps))
