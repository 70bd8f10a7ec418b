"""Programmatic dependent launch: planned only for the register-ring stream kernel on profiles declaring
griddepcontrol; the kernel triggers its dependents first, prefetches its weights and tables, and waits
(griddepcontrol.wait) before it loads activations or writes anything."""
import pytest

import humming
from humming import api
from humming.core.planner import PDL_ENV

N, K = 8192, 8192


@pytest.fixture(autouse=True)
def _default(monkeypatch):
    monkeypatch.delenv(PDL_ENV, raising=False)


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-b200", "nvidia-rtx-5090"])
@pytest.mark.parametrize("m", [1, 8])
def test_stream_kernels_wait_after_the_weight_prefetch(profile, m):
    p = humming.plan("w4a16", m, N, K, profile=profile)
    assert p.path == "stream" and p.pdl and "_pdl_" in p.kernel_name, p.explain()
    assert any("programmatic dependent launch" in r for r in p.reasons)
    src = api.source(p)
    trigger, wait = src.index("pdl_launch_dependents();  //"), src.index("pdl_wait();  //")
    first_weight, first_act = src.index("load_g128(buf[s][c]"), src.index("A + (size_t)")
    assert trigger < first_weight < wait < first_act
    split_write = "cluster_peer_addr(smem_u32" if p.cluster_splits else "store_f32x4(slab_ws"  # split-K partials: cluster or workspace
    assert src.index("store_act(C + ") > wait and src.index(split_write) > wait
    module = api.compile_plan(p, profile)[1]
    if module is not None and getattr(module, "ptx", None):
        assert "griddepcontrol.wait" in module.ptx and "griddepcontrol.launch_dependents" in module.ptx


@pytest.mark.parametrize("profile", ["nvidia-a100", "nvidia-l40s", "nvidia-t4", "thead-zhenwu-810e"])
def test_no_pdl_without_griddepcontrol(profile):
    p = humming.plan("w4a16", 1, N, K, profile=profile)
    assert not p.pdl and "pdl" not in api.source(p)


@pytest.mark.parametrize("m", [16, 64, 128])
def test_small_register_a_form_waits_after_its_weight_prefetch(m):
    p = humming.plan("w4a16", m, N, K, profile="nvidia-h200")
    assert p.path == "wgmma-rs" and p.tiles.bn == 64 and p.pdl, p.explain()
    src = api.source(p)
    wait = src.index("pdl_wait();  //")
    assert src.index("pdl_launch_dependents();  //") < src.index("load_g128(wq[s], p)") < wait
    assert src.index("if (s < ktiles) load_stage(s, s);") > wait  # the activation stages (TMA or cp.async)
    api.compile_plan(p, "nvidia-h200")


def test_not_the_prefill_kernels_and_the_switch(monkeypatch):
    assert not humming.plan("w4a16", 4096, N, K, profile="nvidia-h200").pdl  # producer-warpgroup prefill form
    tuned = humming.plan("w4a16", 256, N, K, profile="nvidia-h200")  # the same form, a tuned entry at M 129-256
    assert tuned.tiles.bn == 128 and not tuned.pdl
    assert not humming.plan("w4a8-int8", 4096, N, K, profile="nvidia-h200").pdl  # the native register-A W4A8 kernel
    monkeypatch.setenv(PDL_ENV, "0")
    assert not humming.plan("w4a16", 1, N, K, profile="nvidia-h200").pdl
    assert not humming.plan("w4a16", 16, N, K, profile="nvidia-h200").pdl


def test_quantization_kernels_trigger_their_dependents():
    from humming.actquant import activation_quant_source, plan_activation_quant

    for profile, has in (("nvidia-h200", True), ("nvidia-a100", False)):
        src = activation_quant_source(plan_activation_quant("w4a8-fp8", "f16", 8192, profile=profile), profile)
        assert "aq_launch_dependents();" in src
        assert ("griddepcontrol.launch_dependents" in src) == has


def test_backend_refuses_without_the_capability():
    from humming.devices.nvidia.backend import grid_dependency_helpers

    with pytest.raises(ValueError, match="griddepcontrol"):
        grid_dependency_helpers(api.resolve_profile("nvidia-a100"))
    assert "griddepcontrol.wait" in grid_dependency_helpers(api.resolve_profile("nvidia-h200"))
