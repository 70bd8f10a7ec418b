"""CPU: split-K clusters of the stream kernel and the small register-A form (Plan.cluster_splits): where the planner applies them (profiles
declaring cluster_dsmem, 2..8 splits, no balance or bulk, room in shared memory, the knob launch.cluster_splits), the launch
shape, and NVRTC compilation (no spills; distributed-shared-memory stores and a cluster barrier in the PTX, no
workspace counter) for Hopper and Blackwell. The GPU test (tests/gpu/test_stream_cluster_splits_gpu.py) checks the
results."""

import pytest

import humming
from humming import api
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.core.plan import CLUSTER_SPLITS_KNOB, cluster_splits_bytes, launch_options
from humming.core.tuning import knobs
from humming.errors import ProfileError


def _stream(caps, n, k, m, splits, **tiles):
    base = dict(bm=8 if m <= 8 else 16, bn=64, bk=512, stages=3, warps_m=1, warps_n=1, warps_k=8, fold=2, x_smem=1)
    base.update(tiles)
    lay = layout_for(humming.schemes.get("w4a16"), n, k, "f16", caps=caps)
    return plan_wna16(caps, lay, m, "f16", scheme="w4a16", path="stream", splits=splits, tiles=MmaWnA16Tiles(**base))


def test_plan_shape_and_reasons(set_knobs):
    caps = api.resolve_profile("nvidia-h200")
    base = _stream(caps, 4096, 14336, 1, 2)
    p = launch_options(caps, base)
    assert p.cluster_splits and p.cluster_dims == (1, 1, 2) and p.grid == (1, 64, 2) and p.partials == 1
    assert p.smem_bytes == base.smem_bytes + cluster_splits_bytes(p) and cluster_splits_bytes(p) == 2048
    assert p.kernel_key != base.kernel_key
    assert "_cs_" in p.kernel_name and any("split-K in clusters" in r for r in p.reasons)
    assert p.to_dict()["cluster_splits"] is True and "cluster_splits" not in base.to_dict()
    src = api.source(p, caps)
    assert f"constexpr int CS_OFFSET = {base.smem_bytes};" in src and "int* counter = CNT + slab;" not in src
    assert "int* counter = CNT + slab;" in api.source(base, caps)  # the workspace path without the option
    # 4 splits: the workspace by default (measured slower in a cluster), a cluster with the knob launch.cluster_splits 4;
    # two token tiles: 4 KiB per other split
    four = _stream(caps, 4096, 14336, 16, 4, fold=1, x_smem=0, x_ring=1)
    assert not launch_options(caps, four).cluster_splits and launch_options(caps, four).partials == 4
    set_knobs({CLUSTER_SPLITS_KNOB: 4})
    assert launch_options(caps, four).cluster_splits and cluster_splits_bytes(launch_options(caps, four)) == 3 * 4096


def test_where_it_does_not_apply():
    h200 = api.resolve_profile("nvidia-h200")
    assert not launch_options(h200, _stream(h200, 4096, 14336, 1, 1)).cluster_splits  # no split
    with knobs.override({CLUSTER_SPLITS_KNOB: 8}):
        assert not launch_options(h200, _stream(h200, 4096, 16384, 1, 16, warps_k=2, bk=128)).cluster_splits  # > 8
    balanced = _stream(h200, 8192, 8192, 1, 1, balance=4)
    assert not launch_options(h200, balanced).cluster_splits and launch_options(h200, balanced).partials == 2
    for name in ("thead-zhenwu-810e", "nvidia-a100", "nvidia-rtx-5090"):  # no cluster_dsmem declared
        caps = api.resolve_profile(name)
        assert not caps.memory.cluster_dsmem
        assert not launch_options(caps, _stream(caps, 4096, 14336, 1, 2, x_smem=0, x_ring=1, fold=1)).cluster_splits
    assert launch_options(h200, _stream(h200, 4096, 14336, 1, 2)).cluster_splits  # (the default: 2 splits)
    with knobs.override({CLUSTER_SPLITS_KNOB: 0}):
        assert not launch_options(h200, _stream(h200, 4096, 14336, 1, 2)).cluster_splits
    with pytest.raises(ProfileError, match="launch.cluster_splits = 9"):
        with knobs.override({CLUSTER_SPLITS_KNOB: 9}):
            launch_options(h200, _stream(h200, 4096, 14336, 1, 2))


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-b200"])
@pytest.mark.parametrize("m,splits,form", [(1, 2, dict()), (4, 4, dict(x_smem=0, x_ring=1, fold=1, warps_k=4, bk=256)),
                                           (16, 8, dict(x_smem=0, fold=0, warps_k=2, bk=128))])
def test_compiles_with_cluster_stores(profile, m, splits, form, set_knobs, compiled_without_spills):
    set_knobs({CLUSTER_SPLITS_KNOB: 8})
    caps = api.resolve_profile(profile)
    p = launch_options(caps, _stream(caps, 4096, 14336, m, splits, **form))
    assert p.cluster_splits
    mod = compiled_without_spills(p, caps)
    assert "mapa.shared::cluster.u32" in mod.ptx and "st.shared::cluster.v4.f32" in mod.ptx
    assert "barrier.cluster.arrive.release.aligned" in mod.ptx and "barrier.cluster.wait.acquire.aligned" in mod.ptx
    assert "atom.global.add" not in mod.ptx  # no workspace counter


def test_small_register_a_form_splits_in_clusters(set_knobs, compiled_without_spills):
    """The small-M register-A wgmma form: 2 splits (the default) meet in the first block's activation slots; not with
    its multicast cluster option, nor where the other splits' accumulators would not fit the slots."""
    from humming.core.families.register_a.planner import plan_wna16_wgmma_rs

    caps = api.resolve_profile("nvidia-h200")
    lay = layout_for(humming.schemes.get("w4a16"), 8192, 8192, "f16", caps=caps)

    def small(m, **kw):
        return plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", tma=True, small=True, **kw)

    p = launch_options(caps, small(128, bt=128, splits=2, stages=6))
    assert p.cluster_splits and p.cluster_dims == (1, 1, 2) and p.partials == 1 and "_cs_" in p.kernel_name
    assert p.smem_bytes == small(128, bt=128, splits=2, stages=6).smem_bytes  # the slots hold the partials
    assert not any("added by the last block" in r for r in p.reasons), p.explain()
    assert any("added by the last block" in r for r in small(16, bt=16, splits=4, stages=8).reasons)
    src = api.source(p, caps)
    assert "cluster_peer_addr(x0, 0)" in src and "atomic_add_i32(counter" not in src
    assert not launch_options(caps, small(16, bt=16, splits=4, stages=8)).cluster_splits  # 4 splits: workspace
    set_knobs({CLUSTER_SPLITS_KNOB: 8})
    assert launch_options(caps, small(16, bt=16, splits=4, stages=8)).cluster_splits
    assert not launch_options(caps, small(16, bt=16, splits=8, stages=8)).cluster_splits  # 7 partials > 8 slots / 2
    assert not launch_options(caps, small(16, bt=16, splits=2, stages=8, cluster=2)).cluster_splits  # multicast
    mod = compiled_without_spills(p, caps)
    assert "st.shared::cluster.v4.f32" in mod.ptx and "barrier.cluster.wait.acquire.aligned" in mod.ptx
    assert "atom.global.add" not in mod.ptx
