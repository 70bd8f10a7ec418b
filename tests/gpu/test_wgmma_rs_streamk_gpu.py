"""The two-warpgroup register-A form's stream-K option (TileConfig.streamk: persistent blocks take whole tiles in
waves, then split the left-over tiles' k atoms evenly; a split tile's partials added by the block that completes it)
against the reference: token tiles of 128 and 256 (one or three per channel tile), groups, per-channel scales, zero
points, bias, f16 and bf16; block counts that leave whole waves and a few tiles, only split tiles, or fewer left-over
atoms than blocks (blocks without any); rasterized and launch-order tiles; repeated launches (the per-tile counters
reset themselves) and CUDA-graph replay. Outputs are NaN-poisoned before each launch (conftest), data is fresh random
per case, and every case checks that the stream-K kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.planner_wgmma_rs import RASTER, plan_wna16_wgmma_rs

from .conftest import forced_repeats_and_replay, run_forced_plans
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu

# (scheme, group, token tile, persistent blocks, K): N = 1024 (8 channel tiles)
CONFIGS = [("w4a16", 128, 128, 3, 4096), ("w4a16", None, 128, 132, 4096), ("w4a16-zp", 128, 256, 5, 4096),
           ("w4a16-zp", None, 128, 7, 2048), ("w4a16", 64, 256, 132, 2048), ("w4a16-zp", 256, 128, 11, 4096),
           ("w4a16", 128, 128, 7, 256)]  # the last: 1 tile of 4 atoms left for 7 blocks (3 without any)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(str(v) for v in c) for c in CONFIGS])
def test_streamk_plans_match_reference(cfg, dtype):
    name, group, bt, blocks, k = cfg
    _require_wgmma(dtype)
    torch.manual_seed(bt + 13 * blocks + k)
    n = 1024
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = "f16" if dtype == torch.float16 else "bf16"

    def plans_for(prep, base, m):
        p = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="", bt=bt, small=False, streamk=blocks)
        assert p.tiles.streamk == blocks and f"k{blocks}" in p.kernel_name and p.grid == (1, blocks, 1)
        assert "struct StreamK" in api.source(p)
        yield p

    ms = (bt // 2 + 1, bt, 2 * bt + 5)  # the last: three token tiles, the last one partly past M
    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


@pytest.mark.parametrize("m", [128, 1100])
def test_streamk_repeats_and_graph_replay(m):
    """A wide layer (224 channel tiles on 132 blocks: one wave, 92 tiles split; at M=1100 five token tiles, raster
    groups) launched 20 times in a row, then CUDA-graph replay with fresh activations."""
    dtype = torch.float16
    caps = _require_wgmma(dtype)
    torch.manual_seed(m)
    n, k = 28672, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    p = plan_wna16_wgmma_rs(caps, api._registry[handle].packed.layout, m, "f16", scheme="", bt=128 if m == 128 else 256,
                            small=False, streamk=caps.limits.sms)
    assert p.tiles.raster == RASTER and p.grid == (1, caps.limits.sms, 1)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    forced_repeats_and_replay(qw, handle, p, x, TOL[dtype])
