"""The stream kernel's bulk-copy variant (tiles.option("bulk"): weights, tables and activations reach a per-warp shared-memory
ring by cp.async.bulk, completion on mbarriers) against the reference, on a GPU whose profile declares tma and
mbarrier. Outputs are NaN-poisoned before each launch (conftest), data is fresh random per case, and every case
checks that the bulk kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.devices.current import runs_here
from humming.errors import ShapeError

from .conftest import graph_replay_error, rel_error, run_forced_plans

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
# (warps per slab, ring slots, fold, split-K): every fold variant, short and long rings, split-K with the fix-up
CONFIGS = [(4, 2, 0, 1), (8, 4, 1, 1), (4, 8, 2, 2), (2, 6, 1, 4), (4, 3, 0, 2)]


def _require_bulk():
    caps = api.resolve_profile(None)
    if not (caps.memory.tma and caps.memory.mbarrier):
        pytest.skip(f"{caps.name} declares no tma/mbarrier (the bulk-copy stream kernel needs sm_90 or later)")
    if not runs_here(caps):
        pytest.skip(f"the live GPU is not {caps.name}'s own target")
    return caps


def _run(qw, dtype, ms, configs):
    def plans(prep, base, m):
        for wk, slots, fold, splits in configs:
            try:
                p = plan_wna16(prep.caps, base.layout, m, base.act, scheme=base.scheme, path="stream",
                               splits=splits, tiles=MmaWnA16Tiles(base.tiles.bm, 64, 64 * wk, slots, 1, 1, wk, 0, fold, 1))
            except ShapeError:  # fold with groups of 32 or float codes, or a split that does not divide the atoms
                continue
            assert p.tiles.option("bulk") and p.kernel_name.split("_")[-2].endswith("b"), p.kernel_name
            yield p
    return run_forced_plans(qw, dtype, ms, plans, TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w8a16", "w4a16[group_size=-1]", "w4a16[group_size=32]",
                                    "w4a16[group_size=64]", "w4a16-fp4", "w2a16"])
def test_stream_bulk(scheme, dtype):
    _require_bulk()
    torch.manual_seed(hash((scheme, str(dtype))) % 2**31)
    qw = humming.quantize(torch.randn(512, 4096, device="cuda") * 0.05, scheme)
    assert _run(qw, dtype, (1, 3, 8, 9, 16), CONFIGS)


def test_stream_bulk_wide_layer_and_graph():
    """A wider layer (many slabs, several blocks per SM) and CUDA-graph replay of the bulk kernel."""
    _require_bulk()
    torch.manual_seed(7)
    qw = humming.quantize(torch.randn(4096, 2048, device="cuda") * 0.05, "w4a16")
    assert _run(qw, torch.float16, (1, 16), [(4, 4, 1, 1), (8, 4, 0, 2)])
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    base = api.plan_for(handle, 5)
    prep.plans[5] = plan_wna16(prep.caps, base.layout, 5, base.act, scheme=base.scheme, path="stream", splits=2,
                               tiles=MmaWnA16Tiles(base.tiles.bm, 64, 256, 4, 1, 1, 4, 0, 1, 1))
    prep.launches.pop(5, None)
    x = torch.randn(5, 2048, device="cuda", dtype=torch.float16)
    eager = api.gemm_prepared(x, handle).clone()
    torch.cuda.synchronize()
    assert prep.launches[5].plan is prep.plans[5]  # the forced bulk kernel is what ran
    err = graph_replay_error(lambda xs: api.gemm_prepared(xs, handle), x,
                             lambda fresh: humming.reference_gemm(fresh, qw, out_dtype=torch.float32))
    assert err <= TOL[torch.float16]
    assert rel_error(eager, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16]
    prep.plans.pop(5, None)
    prep.launches.pop(5, None)
