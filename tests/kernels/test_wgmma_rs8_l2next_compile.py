"""The wide register-A W4A8 form's prefetch of the next wave's weights (TileConfig.l2next, default on;
HUMMING_WGMMA_W4A8_RS_L2NEXT=0 off): once its producer thread has issued the tile's last stage it asks the L2 for the
first STAGES stages' codes (and group scales) of the block launched one wave later. The plan says so; the prefetched
block's tile is the block's own mapping applied to block id + the SM count (rasterized and in launch order); the
addresses are the ones that block's producer copies; the forms it is not written for keep their plans; it compiles
without spills."""
import re

import pytest

import humming
from humming import api
from humming.api import resolve_profile
from humming.core.families.register_a.generator import TILE_RASTERIZED
from humming.core.families.register_a8.planner import L2NEXT_ENV, PDL_RS8_ENV, RASTER_ENV, STREAMK_ENV, WIDENED_ENV


@pytest.fixture(autouse=True)
def _clean(native_8bit_defaults):
    native_8bit_defaults(L2NEXT_ENV, STREAMK_ENV, PDL_RS8_ENV, WIDENED_ENV, RASTER_ENV)


def _prefetch(src: str) -> str:
    start = src.index("{  // the block launched one wave later")
    return src[start:src.index("} else if (warp == THREADS / 32 + 1)", start)]


def _plan(m: int = 4096, scheme: str = "w4a8-fp8"):
    return humming.plan(scheme, m, 8192, 8192, profile="nvidia-h200")


def test_default_prefetches_the_next_wave_and_says_so():
    p = _plan()
    assert p.tiles.l2next == 1 and p.tiles.streamk == 0 and p.tiles.bm == 256, p.explain()
    assert any(L2NEXT_ENV in r and "one wave" in r for r in p.reasons)
    block = _prefetch(api.source(p))
    assert "const int nb = bid + (int)nsm;" in block and "nsm = sm_count();" in block
    # the same codes and scales the producer of block nb copies for its first STAGES stages
    assert "for (int kt = 0; kt < min(ktiles, STAGES); ++kt)" in block
    assert "l2_prefetch(ncodes + (size_t)kt * SLAB_BYTES, SLAB_BYTES);" in block
    assert "l2_prefetch(ncodes + ((size_t)ktiles + kt) * SLAB_BYTES, SLAB_BYTES);" in block
    assert "l2_prefetch(S + (size_t)kt * N + nn0, S_BYTES);" in block
    assert "(size_t)(nn0 / 64) * ktiles * SLAB_BYTES" in block


def test_the_next_block_is_mapped_as_the_block_maps_itself():
    block = _prefetch(api.source(_plan()))
    mine = [ln.split("   //")[0].strip() for ln in TILE_RASTERIZED.split("\n")[1:]]
    theirs = [ln.strip() for ln in block.split("\n") if "nfirst" in ln or "nm0 =" in ln]
    back = [re.sub(r"\bn(first|rows|m0|n0)\b", r"\1", re.sub(r"\bnb\b", "bid", ln)) for ln in theirs]
    assert back == mine


def test_launch_order_mapping(monkeypatch):
    monkeypatch.setenv(RASTER_ENV, "0")
    p = _plan()
    assert p.tiles.raster == 0 and p.tiles.l2next == 1
    src = api.source(p)
    assert "const int m0 = blockIdx.x * BT, n0 = blockIdx.y * BC;" in src
    block = _prefetch(src)
    # launch order: block nb = blockIdx.x + blockIdx.y * gridDim.x
    assert "const int nb = blockIdx.x + blockIdx.y * gridDim.x + (int)nsm;" in block
    assert "const int nm0 = nb % (int)gridDim.x * BT, nn0 = nb / (int)gridDim.x * BC;" in block


def test_per_channel_scales_prefetch_only_codes():
    scheme = humming.schemes.get("w4a8-fp8").with_(granularity="channel", group_size=None)
    p = humming.plan(scheme, 4096, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.l2next == 1, p.explain()
    block = _prefetch(api.source(p))
    assert "l2_prefetch(ncodes" in block and "l2_prefetch(S +" not in block


def test_off_switch_and_other_forms(monkeypatch):
    base = _plan()
    monkeypatch.setenv(L2NEXT_ENV, "0")
    off = _plan()
    assert off.tiles.l2next == 0 and "one wave later" not in api.source(off) and off.kernel_name != base.kernel_name
    monkeypatch.delenv(L2NEXT_ENV)
    for env, value in ((STREAMK_ENV, "132"), (PDL_RS8_ENV, "1"), (WIDENED_ENV, "2")):
        monkeypatch.setenv(env, value)
        p = _plan()
        assert p.tiles.l2next == 0 and "one wave later" not in api.source(p), (env, p.explain())
        monkeypatch.delenv(env)


@pytest.mark.parametrize("scheme,m", [("w4a8-fp8", 4096), ("w4a8-int8", 4096), ("w4a8-fp8", 300)])
def test_compiles_without_spills(scheme, m, compiled_without_spills):
    p = _plan(m, scheme)
    assert p.tiles.l2next == 1, p.explain()
    compiled_without_spills(p, resolve_profile("nvidia-h200"))
