"""CPU: the timed graphs cycle the weight copies to at least graph_min_calls() GEMMs (humming.tuner.cycled), so a
replay's launch cost is spread over many GEMMs; set_graph_timing(min_calls=1) keeps one pass (the earlier method)."""
from __future__ import annotations

import pytest

from humming import tuner


@pytest.fixture
def graph_timing():
    """tuner.set_graph_timing for the test only: the values in force before it come back afterwards."""
    saved = (tuner.graph_min_calls(), tuner.graph_target_us())
    yield tuner.set_graph_timing
    tuner.set_graph_timing(min_calls=saved[0], target_us=saved[1])


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


def test_graph_min_calls_default_and_set(graph_timing):
    assert tuner.graph_min_calls() == tuner.GRAPH_MIN_CALLS == 16
    assert len(tuner.cycled(["a", "b"])) == 16
    graph_timing(min_calls=1)
    assert tuner.graph_min_calls() == 1
    assert tuner.cycled(["a", "b"]) == ["a", "b"]
    for bad in (0, -3, "many", 2.5, True):
        with pytest.raises(ValueError, match="graph min_calls must be a positive integer"):
            graph_timing(min_calls=bad)
    assert tuner.graph_min_calls() == 1  # a refused value changes nothing
    graph_timing(target_us=0)  # None keeps a value: min_calls stays
    assert tuner.graph_min_calls() == 1


def test_passes_stop_at_the_target_length(graph_timing):
    """Passes over the copies: enough for graph_min_calls() GEMMs, but no more than make a graph of about
    graph_target_us() (a prefill GEMM's graph stays a short burst, not a sustained power-limited run)."""
    assert tuner.graph_target_us() == tuner.GRAPH_TARGET_US == 1000.0
    assert tuner.passes_for(2, None) == 8  # no timing yet: 16 GEMMs
    assert tuner.passes_for(2, 70.0) == 8  # decode: 2 x 35 us a pass, 8 passes (560 us) for 16 GEMMs
    assert tuner.passes_for(4, 50.0) == 4  # 4 copies: 4 passes
    assert tuner.passes_for(4, 400.0) == 3  # 3 passes reach 1 ms
    assert tuner.passes_for(2, 1300.0) == 1 and tuner.passes_for(4, 3000.0) == 1  # prefill: one pass, as before
    assert tuner.passes_for(20, 10.0) == 1  # already 16 or more GEMMs
    graph_timing(target_us=0)  # no cap: 16 GEMMs whatever they take (sustained load)
    assert tuner.graph_target_us() == 0
    assert tuner.passes_for(2, 1300.0) == 8
    graph_timing(min_calls=1)
    assert tuner.passes_for(2, 10.0) == 1
    for bad in (-1, "soon", float("nan")):
        with pytest.raises(ValueError, match="graph target_us must be a number"):
            graph_timing(target_us=bad)
    assert tuner.graph_target_us() == 0  # a refused value changes nothing


def test_graph_timing_restored(graph_timing):
    """The fixture above leaves the defaults behind (a test that changed them does not leak into the next)."""
    assert (tuner.graph_min_calls(), tuner.graph_target_us()) == (tuner.GRAPH_MIN_CALLS, tuner.GRAPH_TARGET_US)
