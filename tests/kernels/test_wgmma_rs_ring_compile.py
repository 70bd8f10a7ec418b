"""The two-warpgroup form's weight ring depth (planner_wgmma_rs.RING_2WG, 5 by default; HUMMING_WGMMA_RS_PF overrides
it). At 5 atoms with 6 stages the plain form's trip of 12 stages is two rounds of the activation slots, so its slot
indices and phases become constants of the unrolled stage (fewer SASS instructions per stage); stream-K keeps its
running stage counter, and another depth the computed slots."""
import pytest

import humming
from humming import api
from humming.core.families.register_a.planner import RING_ENV


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(RING_ENV, raising=False)


def test_another_ring_depth_keeps_the_computed_slots(monkeypatch):
    monkeypatch.setenv(RING_ENV, "4")
    p = humming.plan("w4a16", 1024, 4096, 14336, profile="nvidia-h200")
    assert p.tiles.prefetch == 4 and "((unsigned)kt % STAGES)" in api.source(p)
    assert any(RING_ENV in r and "constant" not in r for r in p.reasons if "weight atoms in flight" in r)


@pytest.mark.parametrize("m, n, k", [(1024, 4096, 14336), (1024, 8192, 8192), (600, 8192, 8192)])
@pytest.mark.parametrize("env", ["unset", "5"])
def test_ring_of_five_makes_the_plain_form_s_slots_constants(m, n, k, env, monkeypatch):
    if env != "unset":
        monkeypatch.setenv(RING_ENV, env)
    p = humming.plan("w4a16", m, n, k, profile="nvidia-h200")
    assert p.tiles.prefetch == 5 and p.tiles.stages == 6 and not p.tiles.streamk, p.explain()
    assert any("5 weight atoms in flight" in r and "constant" in r for r in p.reasons)
    src = api.source(p)
    assert "constexpr int PF = 5, R = PF + 1;" in src and "constexpr int U = 2 * R;" in src
    assert "mbar_wait(xbar0 + 8 * (u % STAGES), ((u / STAGES) & 1));" in src
    assert "((unsigned)kt % STAGES)" not in src and "((unsigned)kt / STAGES)" not in src
    api.compile_plan(p, "nvidia-h200")


def test_stream_k_keeps_its_stage_counter():
    p = humming.plan("w4a16", 4096, 28672, 8192, profile="nvidia-h200")
    assert p.tiles.streamk and p.tiles.prefetch == 5, p.explain()
    assert "((unsigned)(it0 + kt) % STAGES)" in api.source(p)


@pytest.mark.parametrize("bad", ["0", "13", "x"])
def test_bad_ring_depth_is_refused(bad, monkeypatch):
    monkeypatch.setenv(RING_ENV, bad)
    with pytest.raises(ValueError, match=RING_ENV):
        humming.plan("w4a16", 1024, 4096, 14336, profile="nvidia-h200")
