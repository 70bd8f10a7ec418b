"""HUMMING_WGMMA_W4A8_RS_PF: the register-A W4A8 narrow form's weight stages in flight per lane (TileConfig.prefetch;
unset: planner_wgmma_rs8.PF, 6). The generated ring follows it, the wide form (codes through shared memory) ignores it,
and every depth the switch takes compiles without spills."""
import re

import pytest

import humming
from humming import api
from humming.core.compile.compiler import compile_cuda
from humming.core.families.register_a8.planner import NARROW_PF_ENV, PF


@pytest.fixture(autouse=True)
def _clean(native_8bit_defaults):
    native_8bit_defaults(NARROW_PF_ENV)


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
def test_default_ring_compiles_without_spills(scheme):
    p = humming.plan(scheme, 128, 8192, 8192, profile="nvidia-h200")
    assert p.path == "wgmma-rs8" and p.tiles.bm == 128 and p.tiles.prefetch == 0 and PF == 6
    src = api.source(p)
    assert f"constexpr int PF = {PF}, R = PF + 1;" in src
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    assert max(int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("ring", [2, 4])
def test_other_rings_compile_without_spills(scheme, ring, monkeypatch):
    monkeypatch.setenv(NARROW_PF_ENV, str(ring))
    p = humming.plan(scheme, 128, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.prefetch == ring and any(f"{ring} stages ahead ({NARROW_PF_ENV})" in r for r in p.reasons)
    src = api.source(p)
    assert f"constexpr int PF = {ring}, R = PF + 1;" in src and "uint32_t wq[R][2][4];" in src
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    assert max(int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log
    wide = humming.plan(scheme, 4096, 8192, 8192, profile="nvidia-h200")
    assert wide.tiles.bm == 256 and wide.tiles.prefetch == 0


@pytest.mark.parametrize("bad", ["0", "7", "x"])
def test_bad_ring_is_refused(bad, monkeypatch):
    monkeypatch.setenv(NARROW_PF_ENV, bad)
    with pytest.raises(ValueError, match=NARROW_PF_ENV):
        humming.plan("w4a8-fp8", 128, 8192, 8192, profile="nvidia-h200")
