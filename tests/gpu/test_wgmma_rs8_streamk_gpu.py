"""The wide register-A W4A8 form with stream-K (TileConfig.streamk: persistent blocks take whole 256-token tiles in
waves, then split the left-over tiles' k atoms evenly; a split tile's partials added by the block that completes it)
against the reference: e4m3 and s8, groups of 128 and per-channel scales, chains of 64 and 128 tokens, launch order
and rasterized tiles, f16 and bf16, a bias; block counts that leave whole waves and a few tiles, only split tiles, or
fewer left-over atoms than blocks (blocks without any); token tiles partly past M; repeated launches (the per-tile
counters reset themselves) and CUDA-graph replay. Outputs are NaN-poisoned before each launch, data is fresh random
per case, and every case checks that the stream-K kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a8.planner import ENV, PATH, STREAMK_ENV

from .conftest import fresh_gemm, graph_replay_error, launch_spec, rel_error
from .test_wgmma_rs8_gpu import TOL, _require_wgmma, _scheme

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]

# (scheme, group, persistent blocks, chain, raster, N, K); M in MS: tiles = ceil(M / 256) x N / 128
CONFIGS = [("w4a8-fp8", 128, 5, 64, 4, 768, 33 * 128),     # 6 / 12 / 24 tiles on 5 blocks: waves, then splits
           ("w4a8-fp8", None, 132, 64, 4, 1024, 4096),      # fewer tiles than blocks: every tile split
           ("w4a8-int8", 128, 7, 128, 0, 768, 2048),        # chains of 128 tokens, launch order
           ("w4a8-int8", None, 11, 64, 3, 1024, 4096),
           ("w4a8-fp8", 128, 13, 64, 0, 256, 256)]          # 2 atoms per tile: at M=300 8 atoms, so 8 blocks
MS = (300, 777, 1024)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(str(v) for v in c) for c in CONFIGS])
def test_streamk_matches_reference(cfg, dtype, monkeypatch):
    name, group, blocks, chain, raster, n, k = cfg
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_BT", "256")
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CHAIN", str(chain))
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_RASTER", str(raster))
    monkeypatch.setenv(STREAMK_ENV, str(blocks))
    monkeypatch.setenv("HUMMING_POISON_OUTPUT", "1")
    monkeypatch.setattr(api, "_POISON", True)
    torch.manual_seed(n + k + blocks + (group or 1) + (dtype == torch.bfloat16))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    for m in MS:
        x, out = fresh_gemm(qw, m, k, dtype)
        spec = launch_spec(qw, "w4a8-wgmma-rs8", dtype, m)
        p = spec.plan
        planned = min(blocks, -(-m // 256) * (n // 128) * (k // 128))  # no more blocks than k atoms
        assert p.path == PATH and p.tiles.streamk == planned and p.grid == (1, planned, 1), p.explain()
        assert p.tiles.bm == 256 and p.instruction.shape[1] == chain and p.tiles.raster == raster
        assert "streamk_segment" in api.source(p) and f"k{planned}" in p.kernel_name
        assert not torch.isnan(out).any(), (m, "output not fully written")
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())
    # the last M again 10 times (counters reset themselves), then CUDA-graph replay on fresh activations
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
    for _ in range(10):
        assert rel_error(humming.gemm(x, qw), ref) <= TOL
    err = graph_replay_error(lambda s: humming.gemm(s, qw), x,
                             lambda x2: humming.reference_gemm(x2, qw, bias=bias, out_dtype=torch.float32))
    assert err <= TOL


@pytest.mark.parametrize("scheme", ["w4a8-fp8", "w4a8-int8"])
def test_default_rule_through_gemm(scheme, monkeypatch):
    """Without the switches: 8192 channels at M=768 give 192 wide tiles (1.45 a SM, rounds 73% full): stream-K over
    one block per SM by default; at M=4096 (1024 tiles, 97% full) not; 4096 channels at M=768 run the wide form
    (96 tiles: one round, where 128-token tiles take two) without stream-K; a narrow layer (8 channel tiles) at M=512
    neither. Checked against the reference."""
    caps = _require_wgmma("e4m3" if scheme.endswith("fp8") else "s8")
    for var in (ENV, STREAMK_ENV, "HUMMING_WGMMA_W4A8_RS_BT", "HUMMING_WGMMA_W4A8_RS_CHAIN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HUMMING_POISON_OUTPUT", "1")
    monkeypatch.setattr(api, "_POISON", True)
    torch.manual_seed(len(scheme))
    for n, k, m, expect, bt in ((8192, 1024, 768, True, 256), (8192, 1024, 4096, False, 256),
                                (4096, 1024, 768, False, 256), (1024, 2048, 512, False, 128)):
        qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, scheme)
        x, out = fresh_gemm(qw, m, k, torch.float16)
        p = launch_spec(qw, "w4a8-wgmma-rs8", torch.float16, m).plan
        assert bool(p.tiles.streamk) == expect and (not expect or p.tiles.streamk == caps.limits.sms), p.explain()
        assert p.tiles.bm == bt, p.explain()
        assert not torch.isnan(out).any()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL, p.explain()
