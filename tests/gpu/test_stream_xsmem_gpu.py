"""The stream kernel's x_smem variant (tiles.option("x_smem"): the block's activations and table rows copied once into shared
memory, read with shared loads per atom) against the reference: every fold form, split-K with the fix-up, PDL on and
off, token counts up to the staging limit, CUDA-graph replay. Outputs are NaN-poisoned before each launch
(conftest), data is fresh random per case, and every case checks that the x_smem kernel is the one that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.core.plan import with_pdl
from humming.errors import ShapeError

from .conftest import graph_replay_error, run_forced_plans

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
# (warps per slab, stages, fold, split-K, pdl)
CONFIGS = [(4, 3, 1, 1, False), (4, 3, 2, 2, True), (8, 4, 0, 1, True), (2, 2, 1, 4, False), (4, 4, 2, 1, True),
           (8, 2, 1, 2, True)]


def _plan(prep, base, m, wk, stages, fold, splits, pdl):
    p = plan_wna16(prep.caps, base.layout, m, base.act, scheme=base.scheme, path="stream", splits=splits,
                   tiles=MmaWnA16Tiles(base.tiles.bm, 64, 64 * wk, stages, 1, 1, wk, 0, fold, x_smem=1))
    return with_pdl(prep.caps, p) if pdl else p


def _run(qw, dtype, ms, configs):
    def plans(prep, base, m):
        for wk, stages, fold, splits, pdl in configs:
            try:
                p = _plan(prep, base, m, wk, stages, fold, splits, pdl)
            except ShapeError:  # fold with float codes, groups under 64, too many tokens to stage, a split that does not divide
                continue
            assert p.tiles.option("x_smem") and "stage_rows<XS_TOKENS" in api.source(p), p.kernel_name
            yield p
    return run_forced_plans(qw, dtype, ms, plans, TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w8a16", "w4a16[group_size=-1]", "w4a16[group_size=64]",
                                    "w4a16[group_size=256]", "w4a16-fp4[group_size=128]", "w2a16"])
def test_stream_x_smem(scheme, dtype):
    torch.manual_seed(hash((scheme, str(dtype), "xs")) % 2**31)
    qw = humming.quantize(torch.randn(512, 4096, device="cuda") * 0.05, scheme)
    assert _run(qw, dtype, (1, 2, 3, 5), CONFIGS)


def test_stream_x_smem_refuses_small_groups():
    qw = humming.quantize(torch.randn(256, 2048, device="cuda") * 0.05, "w4a16[group_size=32]")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    with pytest.raises(ShapeError, match="groups"):
        _plan(prep, api.plan_for(handle, 1), 1, 4, 3, 0, 1, False)


def test_stream_x_smem_wide_layer_and_graph():
    """A wide layer (several blocks per SM, the fix-up of many slabs) and CUDA-graph replay with fresh activations."""
    torch.manual_seed(11)
    qw = humming.quantize(torch.randn(8192, 4096, device="cuda") * 0.05, "w4a16")
    assert _run(qw, torch.float16, (1, 4), [(4, 3, 1, 2, True), (4, 3, 2, 1, True)])
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    prep.plans[1] = _plan(prep, api.plan_for(handle, 1), 1, 4, 3, 1, 2, True)
    prep.launches.pop(1, None)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    api.gemm_prepared(x, handle)  # compiled and launched once before the capture
    torch.cuda.synchronize()
    assert prep.launches[1].plan is prep.plans[1]  # the forced x_smem kernel is what ran
    err = graph_replay_error(lambda xs: api.gemm_prepared(xs, handle), x,
                             lambda fresh: humming.reference_gemm(fresh, qw, out_dtype=torch.float32))
    assert err <= TOL[torch.float16]
    prep.plans.pop(1, None)
    prep.launches.pop(1, None)
