"""The wide register-A W4A8 form with warpgroup 1 starting 1, 2 or 3 chains behind warpgroup 0
(HUMMING_WGMMA_W4A8_RS_STAGGER), plain and as stream-K, against the reference: M 512 (two 256-token tiles) and 470
(rows past M), groups of 128 and per channel, f16 and bf16. Outputs NaN-poisoned before each launch, fresh random
data per case, and every case checks the plan it ran."""
import pytest
import torch

import humming
from humming.core.families.register_a8.planner import PATH, STAGGER_CHAINS_ENV, STREAMK_ENV, WIDE_FROM_ENV

from .conftest import biased_weight, fresh_gemm, launch_spec, rel_error
from .test_wgmma_rs8_gpu import TOL, _require_wgmma, _scheme

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened


@pytest.mark.parametrize("behind", ["1", "2", "3"])
@pytest.mark.parametrize("streamk", ["0", "132"], ids=["plain", "streamk"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", [("w4a8-fp8", 128), ("w4a8-fp8", None)], ids=["fp8-g128", "fp8-channel"])
def test_staggered_wide_form_matches_reference(name, group, dtype, streamk, behind, monkeypatch):
    _require_wgmma("e4m3")
    monkeypatch.setenv(WIDE_FROM_ENV, "256")
    monkeypatch.setenv(STREAMK_ENV, streamk)
    monkeypatch.setenv(STAGGER_CHAINS_ENV, behind)
    monkeypatch.setattr(humming.api, "_POISON", True)
    n, k = 2048, 4096
    seed = n + k + int(streamk) + (group or 1) + 7 * int(behind) + (dtype == torch.bfloat16)
    qw = biased_weight(_scheme(name, group), n, k, dtype, seed)
    for m in (512, 470):
        x, out = fresh_gemm(qw, m, k, dtype)
        p = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m).plan
        assert p.path == PATH and p.tiles.bm == 256 and p.tiles.streamk == int(streamk), p.explain()
        assert p.tiles.stagger == int(behind), p.explain()
        assert not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
