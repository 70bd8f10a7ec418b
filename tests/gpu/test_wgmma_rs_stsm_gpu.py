"""The register-A W4A16 forms with the stmatrix staging (HUMMING_WGMMA_RS_STSM=1) against the reference through
humming.gemm: the small form (M 16, 64, 128), fitted tiles (M 600), plain tiles in pairs (M 1024), stream-K in pairs
(M 4096), a bias, groups of 128 and zero points, f16 and bf16; the output NaN-poisoned before each launch (conftest).
Written in the twenty-fourth session, not run there (no device time left)."""
import pytest
import torch

import humming
from humming.core.planner_wgmma_rs import STSM_ENV

from .conftest import rel_error
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name, m, n, k", [("w4a16", 16, 2048, 2048), ("w4a16", 64, 2048, 2048),
                                           ("w4a16-zp", 128, 2048, 2048), ("w4a16", 600, 2048, 2048),
                                           ("w4a16", 1024, 4096, 2048), ("w4a16-zp", 4096, 4096, 2048)])
def test_stmatrix_staging_matches_reference(name, m, n, k, dtype, monkeypatch):
    _require_wgmma(dtype)
    monkeypatch.setenv(STSM_ENV, "1")
    torch.manual_seed(m + n)
    act = "f16" if dtype == torch.float16 else "bf16"
    sch = _scheme(name, 128)
    p = humming.plan(sch, m, n, k, act=act)
    assert p.path == "wgmma-rs" and p.tiles.stsm, p.explain()
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch, bias=bias)
    for _ in range(2):  # fresh activations each time
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]
