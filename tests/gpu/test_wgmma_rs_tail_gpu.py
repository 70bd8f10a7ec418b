"""The two-warpgroup register-A form's tail option (TileConfig.tail: the last tiles run as four blocks each, one per
quarter of K, the last to finish adding the fp32 partials in split order) against the reference: token tiles of 128
and 256 (one or three per channel tile), groups, per-channel scales, zero points, bias, f16 and bf16, a few tiles or every tile split;
repeated launches (the per-tile counters reset themselves) and CUDA-graph replay on the wide layer it was made for.
Outputs are NaN-poisoned before each launch (conftest), data is fresh random per case, and every case checks that the
tail kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import plan_wna16_wgmma_rs, tail_tiles
from humming.core.plan import TAIL_SPLITS

from .conftest import forced_repeats_and_replay, run_forced_plans
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu

# (scheme, group, token tile, tail tiles: of the 8 channel tiles of N=1024 per token tile)
CONFIGS = [("w4a16", 128, 128, 3), ("w4a16", None, 128, 8), ("w4a16-zp", 128, 256, 5), ("w4a16-zp", None, 128, 1),
           ("w4a16", 64, 256, 8), ("w4a16-zp", 256, 128, 6)]


def _plan(prep, m, bt, tail, act):
    return plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="", bt=bt, small=False, tail=tail)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(str(v) for v in c) for c in CONFIGS])
def test_tail_plans_match_reference(cfg, dtype):
    name, group, bt, tail = cfg
    _require_wgmma(dtype)
    torch.manual_seed(bt + 11 * tail + (group or 3))
    n, k = 1024, 4096
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = "f16" if dtype == torch.float16 else "bf16"

    def plans_for(prep, base, m):
        p = _plan(prep, m, bt, tail, act)
        assert p.tiles.tail == tail and f"q{tail}" in p.kernel_name and p.partials == TAIL_SPLITS
        tiles = -(-m // bt) * (n // 128)
        assert p.grid == (1, tiles + tail * (TAIL_SPLITS - 1), 1) and "TAIL_SPLITS" in api.source(p)
        yield p

    ms = (bt // 2 + 1, bt, 2 * bt + 5)  # the last: three token tiles, the tail's last one partly past M
    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


def test_tail_repeats_and_graph_replay():
    """The shape the option is for (224 channel tiles on 132 SMs: 92 split) launched 20 times in a row, then
    CUDA-graph replay with fresh activations."""
    dtype = torch.float16
    caps = _require_wgmma(dtype)
    torch.manual_seed(92)
    n, k = 28672, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    tail = tail_tiles(n // 128, caps.limits.sms)
    assert tail == 92
    p = _plan(api._registry[handle], 128, 128, tail, "f16")
    x = torch.randn(128, k, device="cuda", dtype=dtype)
    forced_repeats_and_replay(qw, handle, p, x, TOL[dtype])
