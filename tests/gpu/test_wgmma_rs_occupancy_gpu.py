"""The small register-A wgmma form's occupancy option (TileConfig.occupancy: registers budgeted for 6-8 blocks per SM,
a shallow weight ring, each stage waiting for its own wgmmas) against the reference: token tiles of 16-64, fold 0/1,
groups and per-channel scales, zero points, 1 to 8 splits (workspace and split clusters), PDL as the runtime
launches it, repeated launches and CUDA-graph replay. Outputs are NaN-poisoned before each launch (conftest), data is
fresh random per case, and every case checks that the occupancy kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import plan_wna16_wgmma_rs
from humming.core.plan import launch_options
from humming.errors import ShapeError

from .conftest import forced_repeats_and_replay, run_forced_plans
from .test_wgmma_rs_gpu import TOL, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu

# (scheme, group, token tile, fold, occupancy, prefetch, stages, splits)
CONFIGS = [("w4a16", 128, 16, 1, 7, 0, 8, 2), ("w4a16", 128, 16, 0, 8, 0, 4, 2), ("w4a16", 128, 32, 0, 7, 4, 8, 4),
           ("w4a16-zp", 128, 16, 1, 6, 2, 6, 1), ("w4a16", None, 32, 0, 6, 0, 8, 8), ("w4a16", 64, 48, 0, 6, 0, 4, 2),
           ("w4a16-zp", None, 64, 0, 6, 3, 8, 2), ("w4a16", 256, 16, 1, 7, 3, 4, 4)]


def _plan(prep, m, bt, fold, occupancy, prefetch, stages, splits, act):
    p = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="", bt=bt, splits=splits, stages=stages,
                            fold=fold, small=True, occupancy=occupancy, prefetch=prefetch)
    return launch_options(prep.caps, p)  # PDL and split clusters, as the runtime launches it


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=["-".join(str(v) for v in c) for c in CONFIGS])
def test_occupancy_plans_match_reference(cfg, dtype):
    name, group, bt, fold, occupancy, prefetch, stages, splits = cfg
    _require_wgmma(dtype)
    torch.manual_seed(bt + 7 * occupancy + splits)
    n, k = 1024, 4096
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group))
    act = "f16" if dtype == torch.float16 else "bf16"
    kernels = []

    def plans_for(prep, base, m):
        try:
            p = _plan(prep, m, bt, fold, occupancy, prefetch, stages, splits, act)
        except ShapeError as exc:  # e.g. fold at 48 tokens: the planner says why
            pytest.fail(f"{cfg}: {exc}")
        assert p.tiles.occupancy == occupancy and f"o{occupancy}" in p.kernel_name
        assert f"__launch_bounds__(cfg::THREADS, {occupancy})" in api.source(p)
        kernels.append(p.kernel_name)
        yield p

    ms = [m for m in (bt - 15, bt - 1, bt) if m >= 9]
    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


def test_occupancy_repeats_and_graph_replay():
    """20 launches in a row of a split-cluster occupancy plan (its slots and counters reset themselves), then CUDA-graph
    replay with fresh activations."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(5)
    qw = humming.quantize(torch.randn(2048, 8192, device="cuda") * 0.05, "w4a16")
    x = torch.randn(16, 8192, device="cuda", dtype=dtype)
    humming.gemm(x, qw)
    handle = api.prepared(qw, dtype, x.device)
    p = _plan(api._registry[handle], 16, 16, 1, 7, 0, 8, 2, "f16")
    forced_repeats_and_replay(qw, handle, p, x, TOL[dtype])
