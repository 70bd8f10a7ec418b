"""CPU: the stream kernel's balance option (the last slabs run as two blocks each, one per half of K): planning and
its refusals, the launch shape, the tuner's candidates, and NVRTC compilation (no spills) for the H200 and an Ampere
profile. The GPU test (tests/gpu/test_stream_balance_gpu.py) checks the results."""
import dataclasses

import pytest

import humming
from humming import api
from humming.core.families.mma_wna16.candidates import candidates
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.errors import ShapeError


def _layout(caps, n, k, scheme="w4a16"):
    return layout_for(humming.schemes.get(scheme), n, k, "f16", caps=caps)


def _balanced(caps, n, k, m, balance, **tiles):
    base = dict(bm=8, bn=64, bk=256, stages=3, warps_m=1, warps_n=1, warps_k=4, fold=2, x_smem=1)
    base.update(tiles)
    return plan_wna16(caps, _layout(caps, n, k), m, "f16", scheme="w4a16", path="stream", splits=1,
                      tiles=MmaWnA16Tiles(**base, balance=balance))


def test_plan_launch_shape_and_name():
    caps = api.resolve_profile("nvidia-h200")
    p = _balanced(caps, 28672, 8192, 1, 80)
    assert p.grid == (1, 448 + 80, 1) and p.partials == 2 and p.splits == 1
    assert "m8n64k256s3w114sf2v80_" in p.kernel_name
    assert any("balance 80: the last 80 of 448 slabs" in r for r in p.reasons)
    plain = _balanced(caps, 28672, 8192, 1, 0)
    assert plain.grid == (1, 448, 1) and plain.partials == 1 and plain.kernel_key != p.kernel_key
    src = api.source(p, caps)
    assert "constexpr int BALANCE = 80;" in src and "k_per_split = K / splits;" in src
    # every block stages all of K (x_smem) and indexes it by the absolute atom
    assert "stage_rows<XS_TOKENS, XS_K / 8>(x_s, A + (size_t)0 * 64, K, M);" in src and "XS_K = 8192" in src
    assert "(atom - atom0) * 64" not in src and "int* counter = CNT + slab;" in src
    assert "BALANCE" not in api.source(plain, caps) and "(atom - atom0) * 64" in api.source(plain, caps)


def test_refusals():
    caps = api.resolve_profile("nvidia-h200")
    with pytest.raises(ShapeError, match="between 1 and the 16 slabs"):
        _balanced(caps, 1024, 2048, 1, 17)
    with pytest.raises(ShapeError, match="split-K 2 excludes it"):
        plan_wna16(caps, _layout(caps, 1024, 2048), 1, "f16", scheme="w4a16", path="stream", splits=2,
                   tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, 2, x_smem=1, balance=4))
    with pytest.raises(ShapeError, match="must be even"):  # 3 atoms per warp cannot be halved
        _balanced(caps, 1024, 768, 1, 4)
    with pytest.raises(ShapeError, match="not bulk"):
        _balanced(caps, 1024, 2048, 1, 4, x_smem=0, fold=1, bulk=1)


def test_tuner_times_the_two_rounds_above_the_slab_count():
    caps = api.resolve_profile("nvidia-h200")  # 132 SMs
    wide = candidates(caps, _layout(caps, 28672, 8192), 1, "f16", "w4a16")
    assert {p.tiles.option("balance") for p in wide} == {0, 132 * 4 - 448, 132 * 5 - 448}
    assert all(p.path == "stream" and p.splits == 1 and not p.tiles.option("bulk") for p in wide if p.tiles.option("balance"))
    # 64 slabs: 132 blocks would be more than twice the slabs, no candidate
    assert not any(p.tiles.option("balance") for p in candidates(caps, _layout(caps, 4096, 14336), 1, "f16", "w4a16"))
    assert not any(p.tiles.option("balance") for p in candidates(caps, _layout(caps, 28672, 8192), 64, "f16", "w4a16"))


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-a100"])
@pytest.mark.parametrize("form", [dict(), dict(x_smem=0, fold=1, x_ring=1), dict(x_smem=0, fold=0, warps_k=2, bk=128)])
def test_compiles_without_spills(profile, form, compiled_without_spills):
    caps = api.resolve_profile(profile)
    p = _balanced(caps, 4096, 4096, 1, 20, **form)
    mod = compiled_without_spills(p, caps)
    assert "atom.global.add.s32" in mod.ptx  # the per-slab counter of the halves
    assert dataclasses.replace(p.tiles, balance=0) != p.tiles
