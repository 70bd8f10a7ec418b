"""HUMMING_WGMMA_W4A8_RS_STAGGER: how many 64-token chains the wide register-A W4A8 form's warpgroup 1 starts behind
warpgroup 0 (TileConfig.stagger; unset: planner_wgmma_rs8.STAGGER_CHAINS). Warpgroup 0 gives the turn right after it
issues chain N - 1 of its first stage; the value clamps to the tile's chains less one, HUMMING_WGMMA_STAGGER=0 still
turns the staggered start off, and every depth compiles without spills (plain and stream-K)."""
import re

import pytest

import humming
from humming import api
from humming.api import resolve_profile
from humming.core.common.wgmma import STAGGER_ENV
from humming.core.families.register_a8.planner import STAGGER_CHAINS, STAGGER_CHAINS_ENV, STREAMK_ENV


@pytest.fixture(autouse=True)
def _clean(native_8bit_defaults):
    native_8bit_defaults(STAGGER_CHAINS_ENV, STAGGER_ENV, STREAMK_ENV)


def _give_after(src: str) -> int:
    """The chain whose issue warpgroup 0's turn give follows (from the chain comments before it)."""
    head = src[:src.index("consumer_turn_give();  // warpgroup 1 may start")]
    return int(re.findall(r"// tokens (\d+)\.\.\d+: slot rows", head)[-1]) // 64


def test_default_gives_after_the_first_chain():
    p = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.bm == 256 and p.tiles.stagger == STAGGER_CHAINS == 1
    src = api.source(p)
    assert _give_after(src) == 0 and "start one wgmma chain behind warpgroup 0" in src


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("behind", [2, 3])
def test_deeper_stagger_moves_the_give_and_compiles(scheme, behind, monkeypatch, compiled_without_spills):
    monkeypatch.setenv(STAGGER_CHAINS_ENV, str(behind))
    p = humming.plan(scheme, 4096, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.stagger == behind and any(f"{behind} chains after" in r for r in p.reasons), p.explain()
    src = api.source(p)
    assert _give_after(src) == behind - 1 and f"start {behind} wgmma chains behind" in src
    assert src.count("consumer_turn_give();") == 1
    compiled_without_spills(p, resolve_profile("nvidia-h200"))


def test_stream_k_form_follows(monkeypatch, compiled_without_spills):
    monkeypatch.setenv(STAGGER_CHAINS_ENV, "2")
    monkeypatch.setenv(STREAMK_ENV, "132")
    p = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.streamk == 132 and p.tiles.stagger == 2
    src = api.source(p)
    assert _give_after(src) == 1 and "wg == 0 && it0 + kt == 0" in src
    compiled_without_spills(p, resolve_profile("nvidia-h200"))


def test_clamped_to_the_tiles_chains(monkeypatch):
    monkeypatch.setenv(STAGGER_CHAINS_ENV, "3")
    p = humming.plan("w4a8-fp8", 192, 28672, 8192, profile="nvidia-h200")  # the wide form fitted to 192 tokens
    assert p.tiles.bm == 192 and p.tiles.stagger == 2, p.explain()
    assert _give_after(api.source(p)) == 1


def test_off_switch_wins(monkeypatch):
    monkeypatch.setenv(STAGGER_CHAINS_ENV, "2")
    monkeypatch.setenv(STAGGER_ENV, "0")
    p = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.stagger == 0 and "consumer_turn_give" not in api.source(p)


@pytest.mark.parametrize("bad", ["0", "4", "x"])
def test_bad_value_is_refused(bad, monkeypatch):
    monkeypatch.setenv(STAGGER_CHAINS_ENV, bad)
    with pytest.raises(ValueError, match=STAGGER_CHAINS_ENV):
        humming.plan("w4a8-fp8", 4096, 8192, 8192, profile="nvidia-h200")
