"""W4A16 on the register-A wgmma kernel (sm_90a, opt-in: HUMMING_WGMMA_RS=1; weights dequantized in registers as
wgmma's A operand) against the reference, on a GPU whose profile declares wgmma f16/bf16 (H100/H200/H20). Outputs are
NaN-poisoned before each launch (conftest sets HUMMING_POISON_OUTPUT=1), and every case checks that this kernel ran
and that it shares the prepared weights of the mma.sync/stream handle."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import ENV, PATH

from .conftest import rel_error

pytestmark = pytest.mark.gpu

SHAPES = [(1024, 4096), (4096, 2048)]  # (N, K)
MS = (128, 200, 1024)
TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
CASES = [("w4a16", 128), ("w4a16", None), ("w4a16-zp", 128), ("w4a16-zp", None),  # None: per-channel scales
         ("w4a16", 64), ("w4a16-zp", 256)]


def _require_wgmma(dtype):
    caps = api.resolve_profile(None)
    act = "f16" if dtype == torch.float16 else "bf16"
    if not caps.find_mma(family="wgmma", a_type=act):
        pytest.skip(f"{caps.name} declares no wgmma {act} (the register-A wgmma kernel needs an sm_90a device)")
    if not api._wgmma_runs_here(caps):
        pytest.skip(f"the live GPU is not {caps.name}'s own target")
    return caps


def _scheme(name, group):
    sch = humming.schemes.get(name)
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _biased_layer(name, group, dtype, n: int = 1024, k: int = 4096):
    """A quantized n x k layer of the scheme with a bias (seeded per scheme), and the bias."""
    torch.manual_seed(n + (group or 1) + len(name))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    return humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias), bias


def _handles(qw, dtype):
    cache = qw.__dict__["_humming_prepared"]
    rs = next(v for key, v in cache.items() if key[0] == "wna16-wgmma-rs" and key[1] == dtype)
    base = next(v for key, v in cache.items() if not isinstance(key[0], str) and key[0] == dtype)
    return rs, base


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=[f"{n}-{'g' + str(g) if g else 'channel'}" for n, g in CASES])
def test_wgmma_rs_w4a16(name, group, dtype, n, k, monkeypatch):
    _require_wgmma(dtype)
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("HUMMING_POISON_OUTPUT", "1")
    monkeypatch.setattr(api, "_POISON", True)
    torch.manual_seed(n + k + (group or 1) + len(name))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        rs, base = _handles(qw, dtype)
        assert rs >= 0 and rs != base, "the register-A wgmma kernel was judged not eligible"
        assert api._registry[rs].packed is api._registry[base].packed  # one copy of the prepared weights
        p = api._registry[rs].launches[m].plan
        assert p.path == PATH and p.kernel_name.startswith("hm_wna16_wgmmars_"), p.explain()
        assert humming.plan(_scheme(name, group), m, n, k, act="f16" if dtype == torch.float16 else "bf16").path == PATH
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= TOL[dtype], (m, err, p.explain())


def test_wgmma_rs_default_from_m_1024(monkeypatch):
    _require_wgmma(torch.float16)
    monkeypatch.delenv(ENV, raising=False)
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, "w4a16")
    humming.gemm(torch.randn(256, 2048, device="cuda", dtype=torch.float16), qw)
    assert not any(key[0] == "wna16-wgmma-rs" for key in qw.__dict__["_humming_prepared"])  # M < 1024
    x = torch.randn(1024, 2048, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    assert any(key[0] == "wna16-wgmma-rs" for key in qw.__dict__["_humming_prepared"])
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    assert rel_error(out, ref) <= TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", [("w4a16", 128), ("w4a16-zp", None)], ids=["g128", "zp-channel"])
def test_wgmma_rs_two_warpgroup_rasterized(name, group, dtype, monkeypatch):
    """HUMMING_WGMMA_RS_RASTER=3: the two-warpgroup form takes its tiles in groups of 3 token tiles (M 1100 with 256-
    or 128-token tiles: groups that do and do not divide the grid's token tiles), every output written and right."""
    _require_wgmma(dtype)
    monkeypatch.setenv("HUMMING_WGMMA_RS_RASTER", "3")
    monkeypatch.setenv("HUMMING_POISON_OUTPUT", "1")
    monkeypatch.setattr(api, "_POISON", True)
    n, k = 1024, 2048
    torch.manual_seed(11 + (group or 1) + len(name) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in (1024, 1100):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        rs, _ = _handles(qw, dtype)
        p = api._registry[rs].launches[m].plan
        assert p.path == PATH and p.tiles.bn == 128 and p.tiles.raster == 3, p.explain()
        assert not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL[dtype], (m, err, p.explain())
