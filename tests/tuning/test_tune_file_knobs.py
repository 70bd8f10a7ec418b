"""The user tune file holds measured entries and hand-set knobs side by side: recording a winner keeps the knobs, and a
file of knobs alone is a valid tuning file."""
import json
import logging

import humming
from humming.core.tuning import entries, knobs


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
