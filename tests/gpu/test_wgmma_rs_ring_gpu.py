"""The two-warpgroup register-A form with a weight ring of 5 atoms (the default, RING_2WG) and of 4
(HUMMING_WGMMA_RS_PF=4: the computed slots): with 6 activation stages the ring of 5 makes a trip of 12 stages, every
slot index and phase a constant of the unrolled stage. Through humming.gemm against the reference: plain tiles in
pairs (M 1024, 2048), fitted tiles (M 600), a last tile partly past M (M 1100), K whose stage count is not a multiple
of the trip, groups of 128 / 64 and zero points, f16 and bf16; the output NaN-poisoned before each launch (conftest).
First run 2026-12-01 (the ring of 5 forced by the switch: passed)."""
import pytest
import torch

import humming
from humming.core.families.register_a.planner import RING_ENV

from .conftest import rel_error
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("ring", [5, 4])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name, group, m, n, k", [("w4a16", 128, 1024, 4096, 4096), ("w4a16", 128, 2048, 2048, 2944),
                                                  ("w4a16", 64, 1100, 1024, 2048), ("w4a16-zp", 128, 600, 1024, 2048)])
def test_ring_matches_reference(name, group, m, n, k, dtype, ring, monkeypatch):
    _require_wgmma(dtype)
    if ring != 5:
        monkeypatch.setenv(RING_ENV, str(ring))
    torch.manual_seed(m + n + k + group)
    act = "f16" if dtype == torch.float16 else "bf16"
    sch = _scheme(name, group)
    p = humming.plan(sch, m, n, k, act=act)
    assert p.path == "wgmma-rs" and p.tiles.bn == 128 and p.tiles.prefetch == ring, p.explain()
    if ring == 5 and not p.tiles.streamk and p.tiles.stages == 6:  # the constant slots
        assert "(u % STAGES)" in humming.api.source(p)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch)
    for _ in range(2):  # fresh activations each time
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype]
