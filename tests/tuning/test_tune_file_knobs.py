"""The user tune file holds measured entries and hand-set knobs side by side: recording a winner keeps the knobs, and a
file of knobs alone is a valid tuning file."""
import json
import logging

import pytest

import humming
from humming.core.tuning import entries, knobs
from humming.errors import ProfileError


def _plan():
    return humming.plan("w4a16", 16, 4096, 4096, profile="nvidia-h200")


def test_recording_a_winner_keeps_the_knobs(tmp_path, monkeypatch):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"format": 1, "note": "mine", "knobs": {"register_a.raster": 2}}))
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(path))
    assert knobs.value("register_a.raster") == 2
    key = entries.record(_plan(), 12.5, device="test")
    data = json.loads(path.read_text())
    assert data["knobs"] == {"register_a.raster": 2} and data["note"] == "mine"
    assert data["entries"][key]["measured_us"] == 12.5
    assert knobs.value("register_a.raster") == 2


def test_a_file_of_knobs_alone_is_read_without_a_warning(tmp_path, monkeypatch, caplog):
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"knobs": {"register_a.raster": 3}}))
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(path))
    with caplog.at_level(logging.WARNING):
        assert entries.read_entries(path) == {}
    assert not [r for r in caplog.records if "ignoring" in r.getMessage()]
    assert knobs.value("register_a.raster") == 3


def test_a_profile_directory_carries_its_tuning_data(tmp_path, monkeypatch):
    """A HUMMING_PROFILE_PATH directory's tuning/<profile>.yaml sets that profile's knobs (before the shipped data);
    other profiles keep theirs; a bad value names the file."""
    from humming.capabilities import get_profile

    (tmp_path / "tuning").mkdir()
    (tmp_path / "tuning" / "nvidia-h200.yaml").write_text("register_a:\n  raster: 2\n")
    monkeypatch.setenv("HUMMING_PROFILE_PATH", str(tmp_path))
    h200, h100 = get_profile("nvidia-h200"), get_profile("nvidia-h100")
    assert knobs.value("register_a.raster", h200) == 2
    assert knobs.value("register_a.raster", h100) == knobs.defaults()["register_a.raster"]
    monkeypatch.delenv("HUMMING_PROFILE_PATH")
    assert knobs.value("register_a.raster", h200) == knobs.defaults()["register_a.raster"]
    bad = tmp_path / "bad"
    (bad / "tuning").mkdir(parents=True)
    (bad / "tuning" / "nvidia-h200.yaml").write_text("register_a:\n  raster: x\n")
    monkeypatch.setenv("HUMMING_PROFILE_PATH", str(bad))
    with pytest.raises(ProfileError, match="nvidia-h200.yaml"):
        knobs.value("register_a.raster", h200)


def test_tuning_data_is_read_with_the_profiles_bounds(tmp_path):
    """A tuning-data file is read like a profile: an alias bomb or bytes that are not UTF-8 are named errors."""
    import time

    bomb = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 9)]
    bomb.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    with pytest.raises(ProfileError):
        knobs.read_knobs(bomb)
    assert time.perf_counter() - start < 2
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"moe:\n  raster: 8  # caf\xe9\n")
    with pytest.raises(ProfileError, match="UTF-8"):
        knobs.read_knobs(latin)
