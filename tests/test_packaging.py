"""The wheel ships the device profiles (mapped from the top-level device_profiles/) and the tuned defaults."""
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_profiles_and_tuning(tmp_path):
    try:
        import setuptools  # noqa: F401
    except ImportError:
        pytest.skip("setuptools is not installed (needed to build the wheel without network)")
    cmd = [sys.executable, "-m", "pip", "wheel", str(ROOT), "-w", str(tmp_path), "--no-deps",
           "--no-build-isolation", "-q"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    wheel = next(tmp_path.glob("humming-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "humming/device_profiles/nvidia/b300.yaml" in names
    assert "humming/device_profiles/thead/zhenwu-810e.yaml" in names or any(
        n.startswith("humming/device_profiles/thead/") for n in names)
    assert sum(n.endswith(".yaml") for n in names if n.startswith("humming/device_profiles/")) >= 20
    assert "humming/device_profiles/tuning/nvidia-h200.json" in names
    assert "humming/device_profiles/tuning/defaults.yaml" in names
    assert "humming/cli/run.py" in names and "humming/devices/nvidia/backend.py" in names
