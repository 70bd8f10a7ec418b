"""The small-M register-A wgmma form's cluster option (TileConfig.cluster): blocks of 2 or 4 adjacent 64-channel slabs
form a thread-block cluster and share each activation stage through one multicast tensor copy. Compiled for sm_90a
with NVRTC (no GPU): the PTX holds the multicast copy, the peer mbarrier arrivals and the cluster barrier, no
block-wide barrier in the main loop; the planner refuses what the kernel cannot run with the reason; the launch
carries the cluster shape."""
import re
from dataclasses import replace

import pytest
import torch

import humming
from humming import api
from humming.core.common.layout import layout_for
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.register_a.planner import CLUSTER_SIZES, plan_wna16_wgmma_rs
from humming.core.runtime.kernel import ArgBlock, LaunchError, LoadedKernel
from humming.errors import ShapeError, UnsupportedOnDevice

H200 = "nvidia-h200"


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _layout(name="w4a16", n=2048, k=4096, act="f16"):
    return layout_for(humming.schemes.get(name), n, k, act)


def _plan(m, bt, stages, cluster, fold=0, name="w4a16", act="f16", n=2048, splits=None, caps=None):
    caps = caps or api.resolve_profile(H200)
    return plan_wna16_wgmma_rs(caps, _layout(name, n, act=act), m, act, scheme=name, bt=bt, stages=stages, fold=fold,
                               small=True, tma=True, cluster=cluster, splits=splits)


CASES = [(16, 16, 8, 2, 1, "w4a16", "f16"), (16, 16, 8, 4, 1, "w4a16", "bf16"), (48, 48, 4, 4, 0, "w4a16-zp", "f16"),
         (128, 128, 6, 2, 0, "w4a16", "f16"), (100, 128, 4, 4, 0, "w4a16[group_size=-1]", "bf16")]


@pytest.mark.parametrize("m,bt,stages,cluster,fold,name,act", CASES,
                         ids=[f"m{c[0]}-bt{c[1]}-s{c[2]}-c{c[3]}-f{c[4]}-{c[5]}-{c[6]}" for c in CASES])
def test_cluster_form_compiles(m, bt, stages, cluster, fold, name, act):
    _need_sm90a()
    caps = api.resolve_profile(H200)
    p = _plan(m, bt, stages, cluster, fold, name, act)
    plain = _plan(m, bt, stages, 0, fold, name, act)
    assert p.tiles.cluster == cluster and p.cluster_dims == (1, cluster, 1) and plain.cluster_dims is None
    assert p.kernel_name != plain.kernel_name and re.search(rf"bc{cluster}m?_", p.kernel_name)
    assert f"cluster {cluster} (cluster_multicast declared)" in p.explain()
    assert p.grid[1] % cluster == 0
    src = api.source(p, caps)
    assert f"constexpr int CLUSTER = {cluster};" in src
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    for ins in ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster",
                "mapa.shared::cluster.u32", "mbarrier.arrive.shared::cluster.b64 _",
                "barrier.cluster.arrive.release.aligned", "barrier.cluster.wait.acquire.aligned", "%cluster_ctarank",
                "bar.sync 1, 128"):
        assert ins in ptx, ins
    # the per-stage release stays CTA-scoped: a cluster-scoped release adds a GPU-wide memory barrier per stage
    assert "mbarrier.arrive.release.cluster" not in ptx
    assert p.threads == 160 and plain.threads == 128  # a producer warp issues the copies
    # no plain (unicast) tensor copy, and fewer block barriers than the plain form (none per stage)
    assert "mbarrier::complete_tx::bytes [" not in ptx
    plain_ptx = compile_cuda(api.source(plain, caps), [plain.kernel_name], "sm_90a", cache=False).ptx
    assert ptx.count("bar.sync") < plain_ptx.count("bar.sync"), (ptx.count("bar.sync"), plain_ptx.count("bar.sync"))
    assert max(int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log
    assert not re.search(r"C751\d", mod.log), mod.log


def test_cluster_refusals():
    """Only 2 or 4 blocks, only with the TMA stages, only where the profile declares cluster_multicast, the slabs a
    multiple of the cluster, the stages too (one copying block per slot); the two-warpgroup form only pairs."""
    caps = api.resolve_profile(H200)
    assert CLUSTER_SIZES == (2, 4)
    with pytest.raises(ShapeError, match="2 or 4 blocks, not 3"):
        _plan(16, 16, 8, 3)
    with pytest.raises(ShapeError, match="TMA activation stages"):
        plan_wna16_wgmma_rs(caps, _layout(), 16, "f16", scheme="w4a16", bt=16, stages=8, small=True, tma=False,
                            cluster=2)
    with pytest.raises(ShapeError, match=r"the 6 activation stages must be a multiple of 4"):
        _plan(128, 128, 6, 4)
    with pytest.raises(ShapeError, match=r"the 18 slabs of 64 channels \(N=1152\) must be a multiple of 4"):
        _plan(16, 16, 8, 4, n=1152)
    without = replace(caps, memory=replace(caps.memory, cluster_multicast=False))
    with pytest.raises(UnsupportedOnDevice, match="does not declare cluster_multicast"):
        _plan(16, 16, 8, 2, caps=without)
    # the two-warpgroup form takes pairs only (test_wgmma_rs_pair_cluster_compile)
    with pytest.raises(ShapeError, match="take 2 blocks, not 4"):
        plan_wna16_wgmma_rs(caps, _layout(), 1024, "f16", scheme="w4a16", small=False, cluster=4)


def test_profiles_declare_cluster_multicast_where_the_target_has_it():
    """Hopper profiles declare it (the kernel uses it there); the target rule refuses it below sm_90a."""
    from humming.capabilities import list_profiles

    by_name = {c.name: c for c in list_profiles(include_abstract=False)}
    for name in ("nvidia-h200", "nvidia-h100", "nvidia-h20"):
        assert by_name[name].memory.cluster_multicast, name
    for name, c in by_name.items():
        if c.memory.cluster_multicast:
            assert c.target.arch in ("sm_90a", "sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f"), name


def test_cluster_shape_must_divide_the_grid():
    """The runtime refuses a cluster launch whose grid is not a multiple of the cluster shape before it touches the
    driver (so this runs without a GPU)."""
    k = LoadedKernel(b"", "hm_test_kernel", 0)
    args = ArgBlock("i", [1])
    with pytest.raises(LaunchError, match=r"grid \(1, 3, 1\) is not a multiple of the cluster shape \(1, 2, 1\)"):
        k.launch(0, (1, 3, 1), 128, 0, args, cluster=(1, 2, 1))
    with pytest.raises(LaunchError, match="take an ArgBlock"):
        k.launch(0, (1, 2, 1), 128, 0, [torch.tensor(0)], cluster=(1, 2, 1))
    # the prepared launcher of the hot path checks the same once, when it is built
    with pytest.raises(LaunchError, match=r"grid \(1, 1, 3\) is not a multiple of the cluster shape \(1, 1, 2\)"):
        k.launcher(0, (1, 1, 3), 128, args, pdl=True, cluster=(1, 1, 2))
    with pytest.raises(LaunchError, match="takes an ArgBlock"):
        k.launcher(0, (1, 1, 2), 128, [torch.tensor(0)])
