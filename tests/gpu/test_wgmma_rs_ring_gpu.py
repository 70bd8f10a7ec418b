"""The two-warpgroup register-A form with a weight ring of 5 atoms (HUMMING_WGMMA_RS_PF=5): with 6 activation stages
its trip of 12 stages makes every slot index and phase a constant of the unrolled stage. Through humming.gemm against
the reference: plain tiles in pairs (M 1024, 2048), fitted tiles (M 600), a last tile partly past M (M 1100), K whose
stage count is not a multiple of the trip, groups of 128 / 64 and zero points, f16 and bf16; the output NaN-poisoned
before each launch (conftest). Written in the twenty-fourth session, not run there (no device time left)."""
import pytest
import torch

import humming
from humming.core.planner_wgmma_rs import RING_ENV

from .conftest import rel_error
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name, group, m, n, k", [("w4a16", 128, 1024, 4096, 4096), ("w4a16", 128, 2048, 2048, 2944),
                                                  ("w4a16", 64, 1100, 1024, 2048), ("w4a16-zp", 128, 600, 1024, 2048)])
def test_ring_of_five_matches_reference(name, group, m, n, k, dtype, monkeypatch):
    _require_wgmma(dtype)
    monkeypatch.setenv(RING_ENV, "5")
    torch.manual_seed(m + n + k + group)
    act = "f16" if dtype == torch.float16 else "bf16"
    sch = _scheme(name, group)
    p = humming.plan(sch, m, n, k, act=act)
    assert p.path == "wgmma-rs" and p.tiles.bn == 128 and p.tiles.prefetch == 5, p.explain()
    if not p.tiles.streamk and p.tiles.stages == 6:  # the constant slots
        assert "(u % STAGES)" in humming.api.source(p)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch)
    for _ in range(2):  # fresh activations each time
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]
