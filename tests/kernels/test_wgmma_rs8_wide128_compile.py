"""The wide register-A W4A8 form at 128 tokens (TileConfig.wide; the kernel name's 'v', its own kernel key): the
default at M 128 where its blocks fill the SMs (28672x8192), HUMMING_WGMMA_W4A8_RS_WIDE_FROM=M0 asks for it from M0
wherever it runs (8192x8192 here: 64 blocks, the narrow form by default); its tile fitted to M, never below 128
tokens. Plain and stream-K sources compile without spills; bad values are refused."""
import re

import pytest

import humming
from humming import api
from humming.core.compile.compiler import compile_cuda
from humming.core.families.register_a8.planner import STREAMK_ENV, WIDE_FROM_ENV


@pytest.fixture(autouse=True)
def _clean(native_8bit_defaults):
    native_8bit_defaults(WIDE_FROM_ENV, STREAMK_ENV)


def test_defaults_at_m_128():
    p = humming.plan("w4a8-fp8", 128, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.bm == 128 and not p.tiles.wide and "wide form" not in p.explain()
    p = humming.plan("w4a8-fp8", 128, 28672, 8192, profile="nvidia-h200")
    assert p.tiles.bm == 128 and p.tiles.wide and not p.tiles.streamk and "wide form" in p.explain()


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
@pytest.mark.parametrize("streamk", ["0", "132"])
def test_wide_form_at_128_tokens_compiles(scheme, streamk, monkeypatch):
    monkeypatch.setenv(WIDE_FROM_ENV, "128")
    monkeypatch.setenv(STREAMK_ENV, streamk)
    p = humming.plan(scheme, 128, 8192, 8192, profile="nvidia-h200")
    assert p.tiles.bm == 128 and p.tiles.wide == 1 and p.tiles.streamk == int(streamk) and "wide form" in p.explain()
    assert re.search(r"w1121v(k132)?m?_", p.kernel_name), p.kernel_name
    src = api.source(p)
    assert "constexpr int BT = 128, WT = 64" in src and "bulk_copy_g2s(" in src  # codes by bulk copy, two chains
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    assert max(int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log
    assert not re.search(r"C751\d", mod.log), mod.log


def test_fitted_tiles_above_128(monkeypatch):
    monkeypatch.setenv(WIDE_FROM_ENV, "128")
    assert [humming.plan("w4a8-fp8", m, 8192, 8192, profile="nvidia-h200").tiles.bm for m in (128, 160, 200)] == \
        [128, 192, 256]
    assert not humming.plan("w4a8-fp8", 160, 8192, 8192, profile="nvidia-h200").tiles.wide


@pytest.mark.parametrize("bad", ["0", "257", "x"])
def test_bad_value_is_refused(bad, monkeypatch):
    monkeypatch.setenv(WIDE_FROM_ENV, bad)
    with pytest.raises(ValueError, match=WIDE_FROM_ENV):
        humming.plan("w4a8-fp8", 128, 28672, 8192, profile="nvidia-h200")
