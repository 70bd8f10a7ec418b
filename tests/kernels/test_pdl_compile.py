"""Programmatic dependent launch: planned for the register-ring stream kernel and the register-A wgmma forms (small-M
and two-warpgroup prefill) on profiles declaring griddepcontrol; the kernel triggers its dependents first, prefetches
its weights and tables, and waits (griddepcontrol.wait) before it loads activations or writes anything."""
import pytest

import humming
from humming import api
from humming.core.plan import PDL_KNOB, PDL_PREFILL_KNOB
from humming.core.tuning import knobs

N, K = 8192, 8192


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


@pytest.mark.parametrize("m, n, k, streamk", [(1024, 4096, 14336, False), (4096, 8192, 8192, True),
                                              (1024, 28672, 8192, True), (600, 8192, 8192, False)])
def test_prefill_form_waits_in_its_producer_and_consumers(m, n, k, streamk):
    """The two-warpgroup form (producer warpgroup; plain, pairs, stream-K): the copying thread waits before its first
    tensor copy of activations, the consumers after their weight prefetch and before anything they write."""
    p = humming.plan("w4a16", m, n, k, profile="nvidia-h200")
    assert p.path == "wgmma-rs" and p.tiles.bn == 128 and p.tiles.bulk == 2 and p.pdl, p.explain()
    assert bool(p.tiles.streamk) == streamk and "_pdl_" in p.kernel_name
    src = api.source(p)
    producer = src.index("if (tid == THREADS) {")
    producer_wait = src.index("pdl_wait();", producer)
    assert src.index("pdl_launch_dependents();  //") < producer < producer_wait < src.index("tma_load_2d", producer)
    consumer_wait = src.index("pdl_wait();", producer_wait + 1)
    assert src.index("load_g128(wq[s], p)") < consumer_wait < src.index("wgmma_k16_rs(acc")
    assert consumer_wait < src.index("store_g128(C + ")
    if streamk:
        assert consumer_wait < src.index("WS + ") and consumer_wait < src.index("CNT + ")
    module = api.compile_plan(p, "nvidia-h200")[1]
    if module is not None and getattr(module, "ptx", None):
        assert "griddepcontrol.wait" in module.ptx and "griddepcontrol.launch_dependents" in module.ptx


def test_prefill_knob_and_the_native_w4a8_kernel():
    assert humming.plan("w4a16", 4096, N, K, profile="nvidia-h200").pdl
    tuned = humming.plan("w4a16", 256, N, K, profile="nvidia-h200")  # the same form, a tuned entry at M 129-256
    assert tuned.tiles.bn == 128 and tuned.pdl
    assert not humming.plan("w4a8-int8", 4096, N, K, profile="nvidia-h200").pdl  # the native register-A W4A8 kernel
    with knobs.override({PDL_PREFILL_KNOB: False}):
        assert not humming.plan("w4a16", 4096, N, K, profile="nvidia-h200").pdl
        assert not humming.plan("w4a16", 256, N, K, profile="nvidia-h200").pdl
        assert humming.plan("w4a16", 16, N, K, profile="nvidia-h200").pdl  # the small forms keep theirs
    with knobs.override({PDL_KNOB: False}):
        assert not humming.plan("w4a16", 4096, N, K, profile="nvidia-h200").pdl
        assert not humming.plan("w4a16", 1, N, K, profile="nvidia-h200").pdl
        assert not humming.plan("w4a16", 16, N, K, profile="nvidia-h200").pdl


def test_quantization_kernels_trigger_their_dependents():
    from humming.actquant import activation_quant_source, plan_activation_quant

    for profile, has in (("nvidia-h200", True), ("nvidia-a100", False)):
        src = activation_quant_source(plan_activation_quant("w4a8-fp8", "f16", 8192, profile=profile), profile)
        assert "aq_launch_dependents();" in src
        assert ("griddepcontrol.launch_dependents" in src) == has


def test_backend_refuses_without_the_capability():
    from humming.devices import get_backend

    a100, h200 = api.resolve_profile("nvidia-a100"), api.resolve_profile("nvidia-h200")
    with pytest.raises(ValueError, match="griddepcontrol"):
        get_backend(a100).helpers("grid_dependency", caps=a100)
    assert "griddepcontrol.wait" in get_backend(h200).helpers("grid_dependency", caps=h200)
