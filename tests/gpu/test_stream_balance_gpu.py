"""The stream kernel's balance option (tiles.option("balance"): the last slabs run as two blocks each, one per half of K, the
second to finish adding both) against the reference: x_smem and register-ring forms, fold 0/1/2, every slab or a few
split, PDL on and off, repeated launches (the per-slab counters reset themselves), CUDA-graph replay. Outputs are
NaN-poisoned before each launch (conftest), data is fresh random per case, and every case checks that the balanced
kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.errors import ShapeError

from .conftest import forced_repeats_and_replay, run_forced_plans, stream_plan

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
# (warps per slab, stages, fold, x_ring, x_smem, balance, pdl)
CONFIGS = [(4, 3, 2, 0, 1, 3, True), (4, 3, 1, 0, 1, 8, False), (8, 4, 0, 0, 1, 1, True), (4, 3, 1, 1, 0, 5, True),
           (2, 2, 0, 0, 0, 8, False), (4, 2, 2, 1, 0, 2, False)]


def _plan(prep, base, m, wk, stages, fold, x_ring, x_smem, balance, pdl):
    return stream_plan(prep, base, m, wk, stages, fold, x_ring, x_smem, balance=balance, pdl=pdl)


def _run(qw, dtype, ms, configs):
    def plans(prep, base, m):
        for cfg in configs:
            try:
                p = _plan(prep, base, m, *cfg)
            except ShapeError:  # fold with float codes, too many tokens to stage
                continue
            assert p.grid[1] == qw.shape[0] // 64 + cfg[5] and "BALANCE" in api.source(p), p.kernel_name
            yield p
    return run_forced_plans(qw, dtype, ms, plans, TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w8a16", "w4a16[group_size=-1]", "w4a16-fp4[group_size=128]"])
def test_stream_balance(scheme, dtype):
    torch.manual_seed(hash((scheme, str(dtype), "bal")) % 2**31)
    qw = humming.quantize(torch.randn(512, 4096, device="cuda") * 0.05, scheme)
    assert _run(qw, dtype, (1, 3, 8), CONFIGS)


def test_stream_balance_refusals():
    qw = humming.quantize(torch.randn(256, 2048, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep, base = api._registry[handle], api.plan_for(handle, 1)
    with pytest.raises(ShapeError, match="between 1 and the 4 slabs"):
        _plan(prep, base, 1, 4, 3, 1, 0, 1, 5, False)
    with pytest.raises(ShapeError, match="split-K"):
        plan_wna16(prep.caps, base.layout, 1, base.act, scheme=base.scheme, path="stream", splits=2,
                   tiles=MmaWnA16Tiles(8, 64, 256, 3, 1, 1, 4, 0, 1, x_smem=1, balance=2))


def test_stream_balance_wide_layer_repeats_and_graph():
    """The tuned shape of the option (448 slabs, 80 split) launched many times in a row (the per-slab counters must
    reset), then CUDA-graph replay with fresh activations."""
    torch.manual_seed(12)
    qw = humming.quantize(torch.randn(28672, 1024, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    p = _plan(api._registry[handle], api.plan_for(handle, 1), 1, 4, 3, 2, 0, 1, 80, True)
    x = torch.randn(1, 1024, device="cuda", dtype=torch.float16)
    forced_repeats_and_replay(qw, handle, p, x, TOL[torch.float16])
