"""bench/gpu_state.py: the benchmark's reading of nvidia-smi after each row (clock, power, power-cap flag)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))

import gpu_state  # noqa: E402


def test_parse_capped_and_free_lines():
    # lines as the H200's nvidia-smi printed them on 2026-12-01 (docs/runs/2026-12-01j/call5/)
    capped = gpu_state.parse("1582, 691.20, 55, 0x0000000000000004")
    assert capped == {"sm_mhz": 1582.0, "watts": 691.2, "celsius": 55.0, "reasons": 4, "power_capped": True}
    free = gpu_state.parse("1980, 116.40, 35, 0x0000000000000000\n")
    assert free["power_capped"] is False and free["sm_mhz"] == 1980.0
    assert gpu_state.describe(capped) == "  [1582 MHz 691 W capped]" and gpu_state.describe(free) == "  [1980 MHz 116 W]"


def test_parse_refuses_other_output():
    assert gpu_state.parse("") == {} and gpu_state.parse("No devices were found") == {}
    assert gpu_state.parse("1980, [N/A], 35, 0x0") == {} and gpu_state.describe({}) == ""


def test_read_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(gpu_state.shutil, "which", lambda name: None)
    assert gpu_state.read() == {}
