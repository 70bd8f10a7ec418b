"""The register-A W4A16 forms with the stmatrix staging (the default where stmatrix is declared) and without it
(HUMMING_WGMMA_RS_STSM=0: the 16-bit shared stores) against the reference through humming.gemm: the small form (M 16,
64, 128), fitted tiles (M 600), plain tiles in pairs (M 1024), stream-K in pairs (M 4096), a bias, groups of 128 and
zero points, f16 and bf16; the output NaN-poisoned before each launch (conftest). First run 2026-12-01 (23 passed)."""
import pytest
import torch

import humming
from humming.core.families.register_a.planner import STSM_ENV

from .conftest import rel_error
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("stsm", ["1", "0"], ids=["stmatrix", "sts16"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name, m, n, k", [("w4a16", 16, 2048, 2048), ("w4a16", 64, 2048, 2048),
                                           ("w4a16-zp", 128, 2048, 2048), ("w4a16", 600, 2048, 2048),
                                           ("w4a16", 1024, 4096, 2048), ("w4a16-zp", 4096, 4096, 2048)])
def test_stmatrix_staging_matches_reference(name, m, n, k, dtype, stsm, monkeypatch):
    _require_wgmma(dtype)
    monkeypatch.setenv(STSM_ENV, stsm)
    torch.manual_seed(m + n)
    act = "f16" if dtype == torch.float16 else "bf16"
    sch = _scheme(name, 128)
    p = humming.plan(sch, m, n, k, act=act)
    assert p.path == "wgmma-rs" and p.tiles.stsm == int(stsm), p.explain()
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch, bias=bias)
    for _ in range(2):  # fresh activations each time
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]


@pytest.mark.parametrize("scheme, m", [("w4a8-fp8", 4096), ("w4a8-fp8", 128), ("w4a8-int8", 1024)])
def test_stmatrix_staging_of_the_w4a8_forms(scheme, m, monkeypatch):
    """The register-A W4A8 wide form (M 1024, 4096) and the widened path's W4A16 kernel with per-token scales (M 128)
    with the stmatrix staging, activation quantization included, against the reference (which quantizes the
    activations the same way)."""
    _require_wgmma(torch.float16)
    monkeypatch.setenv(STSM_ENV, "1")
    torch.manual_seed(m)
    n, k = 2048, 2048
    p = humming.plan(scheme, m, n, k)  # the native register-A W4A8 kernel, or (M 128 here) the widened W4A16 one
    assert p.path in ("wgmma-rs8", "wgmma-rs") and p.tiles.stsm, p.explain()  # with its per-token scales
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 5e-3
