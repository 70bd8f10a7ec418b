"""Make the repository importable when humming is not installed, and keep these tests off the user's cache."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own cache directory and a clean selection environment."""
    monkeypatch.setenv("HUMMING_CACHE_DIR", str(tmp_path / "kernels"))
    for var in ("HUMMING_CACHE", "HUMMING_NVRTC", "HUMMING_NVRTC_PATH", "HUMMING_LINEINFO", "HUMMING_CACHE_MEMORY"):
        monkeypatch.delenv(var, raising=False)
    from humming.core.compile import cache

    cache.clear_memory_caches()
    yield
