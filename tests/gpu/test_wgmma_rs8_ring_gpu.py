"""The register-A W4A8 narrow form with other weight rings (HUMMING_WGMMA_W4A8_RS_PF: weight stages in flight per
lane; the default 6 runs in test_wgmma_rs8_gpu) against the reference: 128 and 200 tokens (a last tile partly past M), K whose stage count is not a multiple of
the ring, groups of 128 and per channel, e4m3 and s8, f16 and bf16. Outputs NaN-poisoned before each launch, fresh
random data per case, and every case checks that the narrow form with that ring ran."""
import pytest
import torch

import humming
from humming.core.families.register_a8.planner import NARROW_PF_ENV, PATH

from .conftest import fresh_gemm, launch_spec, rel_error
from .test_wgmma_rs8_gpu import TOL, _require_wgmma, _scheme

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened


@pytest.mark.parametrize("ring", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", [("w4a8-fp8", 128), ("w4a8-int8", 128), ("w4a8-fp8", None)],
                         ids=["fp8-g128", "int8-g128", "fp8-channel"])
def test_narrow_ring_matches_reference(name, group, dtype, ring, monkeypatch):
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    monkeypatch.setenv(NARROW_PF_ENV, str(ring))
    monkeypatch.setattr(humming.api, "_POISON", True)
    n, k = 2048, 128 * 37  # 37 stages: not a multiple of the ring (3 or 5)
    torch.manual_seed(n + k + ring + (group or 1) + len(name) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in (128, 200):
        x, out = fresh_gemm(qw, m, k, dtype)
        p = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m).plan
        assert p.path == PATH and p.tiles.bm == 128 and p.tiles.prefetch == ring, p.explain()
        assert not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
