"""The wide register-A W4A8 form at a 128-token tile (HUMMING_WGMMA_W4A8_RS_WIDE_FROM: the wide form from that M;
TileConfig.wide), plain and as stream-K over 132 persistent blocks, against the reference: M 128 (the 128-token tile)
and 160 (a fitted tile of 192), groups of 128 and per channel, e4m3 and s8, f16 and bf16. Outputs NaN-poisoned
before each launch, fresh random data per case, and every case checks the plan it ran."""
import pytest
import torch

import humming
from humming.core.families.register_a8.planner import PATH, STREAMK_ENV, WIDE_FROM_ENV

from .conftest import fresh_gemm, launch_spec, rel_error
from .test_wgmma_rs8_gpu import TOL, _require_wgmma, _scheme

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened


@pytest.mark.parametrize("streamk", ["0", "132"], ids=["plain", "streamk"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", [("w4a8-fp8", 128), ("w4a8-int8", 128), ("w4a8-fp8", None)],
                         ids=["fp8-g128", "int8-g128", "fp8-channel"])
def test_wide_form_at_128_tokens_matches_reference(name, group, dtype, streamk, monkeypatch):
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    monkeypatch.setenv(WIDE_FROM_ENV, "128")
    monkeypatch.setenv(STREAMK_ENV, streamk)
    monkeypatch.setattr(humming.api, "_POISON", True)
    n, k = 2048, 4096
    torch.manual_seed(n + k + int(streamk) + (group or 1) + len(name) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m, tile in ((128, 128), (160, 192)):
        x, out = fresh_gemm(qw, m, k, dtype)
        p = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m).plan
        assert p.path == PATH and p.tiles.bm == tile and p.tiles.bulk == 2, p.explain()
        assert p.tiles.wide == (tile == 128) and p.tiles.streamk == int(streamk), p.explain()
        assert not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
