"""CPU: the timed graphs cycle the weight copies to at least graph_min_calls() GEMMs (humming.tuner.cycled), so a
replay's launch cost is spread over many GEMMs; HUMMING_GRAPH_MIN_CALLS=1 keeps one pass (the earlier method)."""
from __future__ import annotations

import pytest

from humming import tuner


def test_cycled_whole_passes_in_order():
    calls = ["a", "b", "c"]
    got = tuner.cycled(calls, 16)
    assert len(got) == 18 and got[:6] == ["a", "b", "c", "a", "b", "c"]
    # consecutive calls never repeat a weight copy (each still streams its weights past the L2)
    assert all(x != y for x, y in zip(got, got[1:]))
    assert tuner.cycled(calls, 1) == calls
    assert tuner.cycled(["a", "b"], 2) == ["a", "b"]


def test_cycled_refuses_nothing():
    with pytest.raises(ValueError, match="no calls"):
        tuner.cycled([], 4)


def test_graph_min_calls_default_and_env(monkeypatch):
    monkeypatch.delenv(tuner.GRAPH_MIN_CALLS_ENV, raising=False)
    assert tuner.graph_min_calls() == tuner.GRAPH_MIN_CALLS == 16
    assert len(tuner.cycled(["a", "b"])) == 16
    monkeypatch.setenv(tuner.GRAPH_MIN_CALLS_ENV, "1")
    assert tuner.cycled(["a", "b"]) == ["a", "b"]
    for bad in ("0", "-3", "many"):
        monkeypatch.setenv(tuner.GRAPH_MIN_CALLS_ENV, bad)
        with pytest.raises(ValueError, match="HUMMING_GRAPH_MIN_CALLS must be a positive integer"):
            tuner.graph_min_calls()
