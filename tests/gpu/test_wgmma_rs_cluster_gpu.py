"""The small-M register-A wgmma form with thread-block clusters (TileConfig.cluster = 2 / 4: adjacent slabs share
each activation stage through one multicast tensor copy; slots released by peer mbarrier arrivals, no block barrier
per stage) against the reference on fresh random data, outputs NaN-poisoned (conftest): token tiles 16-128, split-K
(also splits shorter than the slot ring), fold, both activation types, zero points, PDL launches back to back, and
CUDA-graph replay."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import plan_wna16_wgmma_rs
from humming.core.plan import with_pdl

from .conftest import graph_replay_error, rel_error
from .test_wgmma_rs_gpu import TOL, _biased_layer, _require_wgmma

pytestmark = pytest.mark.gpu

# (M, token tile, splits, stages, fold, cluster)
CLUSTER_CASES = [(9, 16, 1, 8, 0, 2), (16, 16, 4, 8, 1, 4), (24, 32, 2, 8, 0, 4), (33, 48, 1, 4, 0, 2),
                 (64, 64, 2, 4, 0, 4), (100, 128, 1, 6, 0, 2), (128, 128, 2, 4, 0, 4), (300, 128, 4, 6, 0, 2),
                 (16, 16, 16, 8, 0, 2)]  # the last: 4 k atoms per split, fewer stages than slots


def _force(qw, m: int, dtype, pdl: bool = False, **options):
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    act = "f16" if dtype == torch.float16 else "bf16"
    p = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="w4a16", tma=True, small=True, **options)
    prep.plans[m] = with_pdl(prep.caps, p) if pdl else p
    prep.launches.pop(m, None)
    return handle, prep.plans[m]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", [("w4a16", 128), ("w4a16-zp", 128), ("w4a16", None)],
                         ids=["w4a16-g128", "w4a16-zp-g128", "w4a16-channel"])
def test_cluster_small_form(name, group, dtype):
    _require_wgmma(dtype)
    k = 4096
    qw, bias = _biased_layer(name, group, dtype, k=k)
    for m, bt, splits, stages, fold, cluster in CLUSTER_CASES:
        if fold and (group is None or name.endswith("zp")):
            fold = 0
        handle, p = _force(qw, m, dtype, bt=bt, splits=splits, stages=stages, fold=fold, cluster=cluster)
        assert p.cluster_dims == (1, cluster, 1)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert api._registry[handle].launches[m].cluster == (1, cluster, 1)
        assert not torch.isnan(out).any(), ("output not fully written", p.kernel_name)
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL[dtype], (m, err, p.explain())


def test_cluster_pdl_back_to_back_and_graph_replay():
    """Many PDL cluster launches in a row on one stream (each reads the previous one's output as its input, so a
    missing wait or a slot released too early shows), then CUDA-graph replay."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(5)
    n = k = 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    for m, bt, splits, stages, cluster in ((16, 16, 2, 8, 4), (128, 128, 1, 4, 2)):
        _, p = _force(qw, m, dtype, pdl=True, bt=bt, splits=splits, stages=stages, cluster=cluster)
        assert p.pdl and p.cluster_dims == (1, cluster, 1)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        outs, ys = [x], []
        for _ in range(20):
            y = humming.gemm(outs[-1], qw)
            ys.append(y)
            outs.append(y / y.float().abs().amax().clamp_min(1e-3).to(dtype))  # keep the chain in range
        torch.cuda.synchronize()
        for inp, y in zip(outs[:-1], ys):
            assert not torch.isnan(y).any()
            assert rel_error(y, humming.reference_gemm(inp, qw, out_dtype=torch.float32)) <= TOL[dtype]
        err = graph_replay_error(lambda s: humming.gemm(s, qw), x,
                                 lambda t: humming.reference_gemm(t, qw, out_dtype=torch.float32))
        assert err <= TOL[dtype], (m, err)
