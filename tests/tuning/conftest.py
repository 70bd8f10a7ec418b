"""Make the repository importable when humming is not installed; give every test its own kernel cache and
tuning file, and no forced profile."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("HUMMING_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(tmp_path / "tuning.json"))
    for var in ("HUMMING_CACHE", "HUMMING_TUNE", "HUMMING_DEVICE_PROFILE", "HUMMING_NVRTC", "HUMMING_NVRTC_PATH",
                "HUMMING_LINEINFO", "HUMMING_CACHE_MEMORY"):
        monkeypatch.delenv(var, raising=False)
    from humming.core.compile import cache
    from humming.core.tuning import entries as tuning

    cache.clear_memory_caches()
    tuning.clear_memory()
    yield
