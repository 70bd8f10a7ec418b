"""The wide register-A W4A8 form with its weights widened by converter warps into 1 or 2 shared-memory slots of
fragments (HUMMING_WGMMA_W4A8_RS_WIDENED) against the reference: M 512 (two 256-token tiles) and 470 (rows past M),
K of 4096 (32 stages: every slot and phase many times over) and 384 (3 stages, fewer than the ring), FP8 and INT8,
groups of 128 and per channel, f16 and bf16. Outputs NaN-poisoned before each launch, fresh random data per case, and
every case checks the plan it ran."""
import pytest
import torch

import humming
from humming.core.families.register_a8.planner import PATH, STREAMK_ENV, WIDE_FROM_ENV, WIDENED_ENV

from .conftest import biased_weight, fresh_gemm, launch_spec, rel_error
from .test_wgmma_rs8_gpu import TOL, _require_wgmma, _scheme

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened


@pytest.mark.parametrize("slots", ["1", "2"])
@pytest.mark.parametrize("k", [4096, 384])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", [("w4a8-fp8", 128), ("w4a8-fp8", None), ("w4a8-int8", 128)],
                         ids=["fp8-g128", "fp8-channel", "int8-g128"])
def test_widened_wide_form_matches_reference(name, group, dtype, k, slots, monkeypatch):
    _require_wgmma("e4m3" if "fp8" in name else "s8")
    monkeypatch.setenv(WIDE_FROM_ENV, "256")
    monkeypatch.setenv(STREAMK_ENV, "0")
    monkeypatch.setenv(WIDENED_ENV, slots)
    monkeypatch.setattr(humming.api, "_POISON", True)
    n = 2048
    seed = n + k + (group or 1) + 7 * int(slots) + (dtype == torch.bfloat16) + len(name)
    qw = biased_weight(_scheme(name, group), n, k, dtype, seed)
    for m in (512, 470):
        x, out = fresh_gemm(qw, m, k, dtype)
        p = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m).plan
        assert p.path == PATH and p.tiles.bm == 256 and p.tiles.widened == int(slots), p.explain()
        assert not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
