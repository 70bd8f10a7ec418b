"""The register-A W4A16 forms stage their output tile with stmatrix .trans where the profile declares stmatrix (the
default; HUMMING_WGMMA_RS_STSM=0: the 16-bit shared stores). The lane
addresses of the generated source are evaluated here against stmatrix's documented semantics (PTX ISA: register i of
lane t holds row t / 4, columns 2 (t % 4), +1 of matrix i; lane 8 i + r gives the address of row r of matrix i; .trans
stores column c of the matrix into row c), so every value lands where the 16-bit stores put it."""
import re

import pytest

import humming
from humming import api
from humming.core.families.register_a.planner import STSM_ENV

CASES = [(1024, 4096, 14336), (128, 28672, 8192), (16, 8192, 8192), (600, 8192, 8192), (64, 8192, 8192),
         (128, 8192, 8192)]


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(STSM_ENV, raising=False)


def test_switched_off_keeps_the_16_bit_stores(monkeypatch):
    assert humming.plan("w4a16", 1024, 4096, 14336, profile="nvidia-h200").tiles.stsm  # the default
    monkeypatch.setenv(STSM_ENV, "0")
    p = humming.plan("w4a16", 1024, 4096, 14336, profile="nvidia-h200")
    src = api.source(p)
    assert not p.tiles.stsm and "sts_u16(o, " in src and "stmatrix" not in src


def _c_int(expr: str, **names) -> int:
    """A C integer expression of the generated source (shifts, masks, + - *) evaluated with ``names``."""
    py = re.sub(r"\b([A-Za-z_]\w*)\b", lambda m: str(names[m.group(1)]), expr)
    return int(eval(py, {"__builtins__": {}}))  # noqa: S307 (digits and operators only)


@pytest.mark.parametrize("m, n, k", CASES)
def test_stmatrix_lanes_put_every_value_where_the_stores_did(m, n, k, monkeypatch):
    monkeypatch.setenv(STSM_ENV, "1")
    p = humming.plan("w4a16", m, n, k, profile="nvidia-h200")
    assert p.path == "wgmma-rs" and p.tiles.stsm and re.search(r"m(_ts)?(_pdl)?(_cs)?_[0-9a-f]{10}$", p.kernel_name), p.explain()
    src = api.source(p)
    assert "sts_u16(o, " not in src and "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src
    row_expr = re.search(r"const uint32_t stsm_row = (.*?);", src).group(1)
    step_expr = re.search(r"stmatrix_x4_trans\(stsm_row \+ (.*?), v4\[0\]", src).group(1)
    bt, out_ld = p.tiles.bm, p.tiles.bn + 8
    assert "OUT_LD = BC + 8;" in src
    base = re.search(r"stsm_row = (\w+) \+", src).group(1)  # the staging tile (x0, or stream-K's stg0)
    warpgroups = 2 if p.tiles.bn == 128 else 1
    placed = {}
    for wg in range(warpgroups):
        for w in range(4):
            for jp in range(0, bt // 8, 2):
                rows = [_c_int(row_expr, **{base: 0, "lane": lane, "OUT_LD": out_ld, "wg": wg, "w": w})
                        + _c_int(step_expr, jp=jp, OUT_LD=out_ld) for lane in range(32)]
                for i in range(4):  # matrix i: token block jp + i / 2, channels 8 (i % 2) + g
                    j, h = jp + i // 2, i % 2
                    for t in range(32):
                        g, q = t // 4, t % 4
                        for e in range(2):
                            r, c = g, 2 * q + e  # the fragment element register i of lane t holds
                            addr = rows[8 * i + c] + 2 * r  # .trans: column c goes to the row lane 8 i + c gave
                            channel, token = wg * 64 + w * 16 + 8 * h + g, 8 * j + 2 * q + e
                            assert addr == (token * out_ld + channel) * 2, (wg, w, jp, i, t, e)
                            placed[addr] = (token, channel)
    assert len(placed) == bt * 64 * warpgroups  # every value of the tile once
    for lane in range(32):  # 16-byte aligned rows (stmatrix's requirement)
        assert _c_int(row_expr, **{base: 0, "lane": lane, "OUT_LD": out_ld, "wg": 1, "w": 3}) % 16 == 0
    api.compile_plan(p, "nvidia-h200")


def test_bad_value_and_profiles_without_stmatrix(monkeypatch):
    monkeypatch.setenv(STSM_ENV, "2")
    with pytest.raises(ValueError, match=STSM_ENV):
        humming.plan("w4a16", 1024, 4096, 14336, profile="nvidia-h200")
    from humming.devices.nvidia.backend import stmatrix_helpers

    with pytest.raises(ValueError, match="stmatrix"):
        stmatrix_helpers(api.resolve_profile("nvidia-l40s"))


@pytest.mark.parametrize("scheme, m, n", [("w4a8-fp8", 4096, 8192), ("w4a8-int8", 1024, 8192), ("w4a8-fp8", 128, 28672)])
def test_register_a_w4a8_forms_take_the_same_staging(scheme, m, n, monkeypatch):
    """The W4A8 narrow and wide forms (not stream-K) stage through the same stmatrix text (wgmma_common's
    stmatrix_staging, whose lane addresses are checked above) from the same fragment layout."""
    monkeypatch.setenv(STSM_ENV, "1")
    p = humming.plan(scheme, m, n, 8192, profile="nvidia-h200")
    assert p.path == "wgmma-rs8" and p.tiles.stsm and not p.tiles.streamk, p.explain()
    src = api.source(p)
    assert "sts_u16(o, " not in src and src.count("stmatrix_x4_trans(stsm_row + jp * 8 * OUT_LD * 2") == 1
    assert "facc[4 * j + 2 * h] * ts[2 * j] * cs[h] + bs[h]" in src
    api.compile_plan(p, "nvidia-h200")
    monkeypatch.setenv(STSM_ENV, "0")
    assert "stmatrix" not in api.source(humming.plan(scheme, m, n, 8192, profile="nvidia-h200"))
