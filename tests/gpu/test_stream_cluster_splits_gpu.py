"""Split-K clusters of the stream kernel and the small register-A form (Plan.cluster_splits: the splits of a slab run as one thread-block cluster and
add their partials in the first block's shared memory) against the reference: register-ring and x_smem forms, fold
0/1/2, 2 to 8 splits, 1 or 2 token tiles, PDL on and off, repeated launches, CUDA-graph replay, and the same plans
through the workspace (as with the knob launch.cluster_splits 0) giving the same bits. Outputs are NaN-poisoned before each launch
(conftest), data is fresh random per case, and every case checks that the cluster kernel is the one that ran. The
small-M register-A wgmma form's split clusters (partials in the first block's activation slots) likewise."""
import pytest
import torch

import humming
from humming import api
from humming.core.plan import CLUSTER_SPLITS_KNOB, launch_options, with_pdl
from humming.devices.current import runs_here
from humming.errors import ShapeError

from .conftest import forced_repeats_and_replay, rel_error, run_forced_plans, stream_plan

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
# (warps per slab, stages, fold, x_ring, x_smem, splits, pdl)
CONFIGS = [(8, 3, 2, 0, 1, 2, True), (4, 3, 1, 1, 0, 2, True), (4, 4, 0, 0, 0, 4, False), (2, 3, 1, 0, 1, 8, True),
           (16, 3, 2, 0, 1, 2, True), (4, 2, 2, 1, 0, 8, False)]


@pytest.fixture(autouse=True)
def _clusters_up_to_8(set_knobs):
    """Clusters for every split count these tests plan (the default takes 2 splits only: 4 measured slower)."""
    set_knobs({CLUSTER_SPLITS_KNOB: 8})


def _require_clusters():
    if not api.resolve_profile(None).memory.cluster_dsmem:
        pytest.skip("the current device's profile declares no cluster_dsmem")


def _plan(prep, base, m, wk, stages, fold, x_ring, x_smem, splits, pdl, clusters=True):
    p = stream_plan(prep, base, m, wk, stages, fold, x_ring, x_smem, splits=splits, pdl=pdl)
    return launch_options(prep.caps, p) if clusters else p


def _run(qw, dtype, ms, configs):
    def plans(prep, base, m):
        for cfg in configs:
            try:
                p = _plan(prep, base, m, *cfg)
            except ShapeError:  # fold with float codes, too many tokens to stage, K not split that way
                continue
            assert p.cluster_splits and p.cluster_dims == (1, 1, cfg[5]), p.kernel_name
            assert "cluster_peer_addr(" in api.source(p) and p.partials == 1
            yield p
    return run_forced_plans(qw, dtype, ms, plans, TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w8a16", "w4a16[group_size=-1]", "w4a16-fp4[group_size=128]"])
def test_stream_cluster_splits(scheme, dtype):
    _require_clusters()
    torch.manual_seed(hash((scheme, str(dtype), "cs")) % 2**31)
    qw = humming.quantize(torch.randn(512, 8192, device="cuda") * 0.05, scheme)
    assert _run(qw, dtype, (1, 3, 8, 13), CONFIGS)


def test_stream_cluster_splits_match_workspace_bits():
    """The cluster adds the partials in split order, as the workspace path does: the same output bits."""
    _require_clusters()
    torch.manual_seed(31)
    qw = humming.quantize(torch.randn(1024, 8192, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    for m, cfg in ((1, (8, 3, 2, 0, 1, 4, True)), (5, (4, 3, 1, 1, 0, 2, True)), (16, (4, 3, 0, 0, 0, 8, False))):
        x = torch.randn(m, 8192, device="cuda", dtype=torch.float16)
        outs = []
        for clusters in (True, False):
            p = _plan(prep, api.plan_for(handle, m), m, *cfg, clusters=clusters)
            assert p.cluster_splits == clusters
            prep.plans[m], _ = p, prep.launches.pop(m, None)
            outs.append(api.gemm_prepared(x, handle).clone())
        assert torch.equal(outs[0], outs[1]), f"M={m} {cfg}"
        prep.plans.pop(m, None)
        prep.launches.pop(m, None)


def test_stream_cluster_splits_repeats_and_graph():
    """A narrow, deep layer (64 slabs x 2 splits, the shipped 4096x14336 M=1 form) launched many times in a row,
    then CUDA-graph replay with fresh activations."""
    _require_clusters()
    torch.manual_seed(13)
    qw = humming.quantize(torch.randn(4096, 14336, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    p = _plan(api._registry[handle], api.plan_for(handle, 1), 1, 16, 3, 2, 0, 1, 2, True)
    assert p.cluster_splits
    x = torch.randn(1, 14336, device="cuda", dtype=torch.float16)
    forced_repeats_and_replay(qw, handle, p, x, TOL[torch.float16])


# the small-M register-A wgmma form, split-K in a cluster: (M, token tile, splits, stages, fold, tma)
RS_CASES = [(1, 16, 2, 8, 1, True), (16, 16, 4, 8, 0, True), (24, 32, 2, 4, 1, False), (64, 64, 2, 6, 0, True),
            (100, 128, 2, 6, 0, True), (128, 128, 4, 6, 0, False), (9, 16, 2, 4, 1, True)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", [("w4a16", 128), ("w4a16-zp", 128), ("w4a16", None)],
                         ids=["w4a16-g128", "w4a16-zp-g128", "w4a16-channel"])
def test_small_register_a_cluster_splits(name, group, dtype):
    """Against the reference, and the same bits as the workspace path (both add the splits in order)."""
    from humming.core.families.register_a.planner import plan_wna16_wgmma_rs

    act = "f16" if dtype == torch.float16 else "bf16"
    caps = api.resolve_profile(None)
    if not caps.find_mma(family="wgmma", a_type=act):
        pytest.skip(f"{caps.name} declares no wgmma {act} (the register-A wgmma kernel needs an sm_90a device)")
    if not runs_here(caps):
        pytest.skip(f"the live GPU is not {caps.name}'s own target")
    _require_clusters()
    n, k = 1024, 4096
    sch = humming.schemes.get(name)
    sch = sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)
    torch.manual_seed(n + (group or 1) + len(name))
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, sch, bias=bias)
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    layout = prep.plan_for(1).layout  # the layer's one WnA16 layout: the stream and register-A kernels read it
    for m, bt, splits, stages, fold, tma in RS_CASES:
        if fold and (group is None or name.endswith("zp")):
            fold = 0
        base = with_pdl(prep.caps, plan_wna16_wgmma_rs(prep.caps, layout, m, act, scheme="w4a16", tma=tma,
                                                       small=True, bt=bt, splits=splits, stages=stages, fold=fold))
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
        outs = []
        for p, cluster in ((launch_options(prep.caps, base), (1, 1, splits)), (base, None)):
            assert p.cluster_splits == (cluster is not None), p.explain()
            prep.plans[m], _ = p, prep.launches.pop(m, None)
            out = humming.gemm(x, qw)
            torch.cuda.synchronize()
            assert prep.launches[m].plan is p and prep.launches[m].cluster == cluster
            assert not torch.isnan(out).any(), ("output not fully written", p.kernel_name)
            assert rel_error(out, ref) <= TOL[dtype], (m, p.explain())
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), (m, bt, splits)
        prep.plans.pop(m, None)
        prep.launches.pop(m, None)
