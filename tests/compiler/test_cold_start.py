"""CPU: the cold start of a layer. The first launch compiles its own kernel in the caller's thread and the
layer's other decode-bucket kernels in parallel on a background pool; every kernel is compiled once; NVRTC
calls release the GIL (ctypes.CDLL), so threads really compile in parallel; the disk cache stays whole."""
from __future__ import annotations

import ctypes
import threading
import time
import types

import pytest
import torch

import humming
from humming import api
from humming.capabilities import get_profile
from humming.core.compile import cache
from humming.core.compile.compiler import compile_cuda, compile_stats
from humming.core.families.mma_wna16 import tuned
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.problem import scheme_of
from humming.core.registry import family_of, refusal
from humming.core.runtime import compiled, launch, precompile
from humming.core.runtime.layer import Layer
from humming.core.tuning import entries as tuning
from humming.errors import UnsupportedOnDevice
from humming.options import DEFAULT

PROFILE = "nvidia-h200"


@pytest.fixture(autouse=True)
def _fresh_runtime_state(monkeypatch):
    """Own compiled-kernel memo and background pool for each test (nothing leaks into other tests); launches on
    this GPU-less machine: stream 0, workspaces of their own, no TMA tensor maps (they need libcuda)."""
    monkeypatch.setattr(compiled, "_compiled", {})
    monkeypatch.setattr(compiled, "_locks", {})
    monkeypatch.setattr(launch, "current_stream", lambda device: 0)
    monkeypatch.setattr(launch, "workspaces", {})
    monkeypatch.setattr(launch, "retired_workspaces", [])
    monkeypatch.setattr(launch, "tma_boxes", lambda plan: (None, None))
    monkeypatch.delenv(precompile.ENV_PRECOMPILE, raising=False)
    precompile._forget_precompiles()
    yield
    precompile.wait_precompiled(timeout=120)
    precompile._forget_precompiles()


def _need_nvrtc(arch: str):
    from humming.core.compile.nvrtc import select_toolchain

    try:
        return select_toolchain(arch)
    except UnsupportedOnDevice as exc:
        pytest.skip(f"no NVRTC for {arch}: {str(exc).splitlines()[0]}")


def _layer(n: int, k: int, profile: str = PROFILE) -> Layer:
    """A prepared WnA16 weight without tensors (planning and compiling only need its shape and scheme; its packed
    weights are a stand-in)."""
    lay = Layer.__new__(Layer)
    lay.qw = types.SimpleNamespace(shape=(n, k), g_idx=None)
    lay.scheme, lay.n, lay.k, lay.act_order = scheme_of("w4a16"), n, k, False
    lay.dtype, lay.device, lay.act = torch.float16, torch.device("cpu", 0), "f16"
    lay.caps, lay.options, lay.run_arch = get_profile(profile), DEFAULT, None
    lay.plans, lay.launches, lay.packed, lay._weight_only = {}, {}, {}, None
    lay.packed_for = lambda plan, inputs: types.SimpleNamespace(out_scale=1.0)
    return lay


def _decode_kernels(lay: Layer) -> set[str]:
    return {lay.plan_for(m).kernel_name for m in range(1, tuning.DECODE_MAX_M + 1)}


def _first_launch(lay: Layer, m: int):
    """The runtime's first launch of the layer for M (Layer.spec: its kernel compiled here, then the layer's other
    bucket kernels scheduled in the background); no GPU needed to build the launch."""
    assert not lay.launches
    return lay.spec(m).plan


class _FakeCompiler:
    """Stands in for the NVRTC compile (compiled._compile_now): records which thread compiled which kernel, and can
    hold every compile until ``parties`` of them run at the same time (a serial pool would time out)."""

    def __init__(self, parties: int = 0):
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(parties) if parties > 1 else None
        self.background_started = threading.Event()

    def __call__(self, p, caps, run_arch):
        name = threading.current_thread().name
        with self.lock:
            self.calls.append((p.kernel_name, name))
        if name.startswith("humming-precompile"):
            self.background_started.set()
            if self.barrier is not None:
                try:
                    self.barrier.wait(timeout=30)
                except threading.BrokenBarrierError:
                    pass  # counted below: the test fails on the broken barrier
        else:
            time.sleep(0.05)
        return (object(), None)


def test_first_launch_compiles_its_kernel_here_and_the_other_decode_kernels_in_the_background(monkeypatch):
    fake = _FakeCompiler()
    monkeypatch.setattr(compiled, "_compile_now", fake)
    lay = _layer(8192, 8192)
    expected = _decode_kernels(lay)
    assert len(expected) > 2  # stream kernels for M <= 8, register-A / tile kernels above
    p = _first_launch(lay, 1)
    assert precompile.wait_precompiled(timeout=60)
    names = [n for n, _ in fake.calls]
    assert sorted(names) == sorted(expected)  # each decode kernel exactly once
    threads = dict(fake.calls)
    assert not threads[p.kernel_name].startswith("humming-precompile")  # the requested one: the caller's thread
    assert all(t.startswith("humming-precompile") for n, t in threads.items() if n != p.kernel_name)
    assert precompile.pending_precompiles() == 0
    # the layer's later launches schedule nothing (their kernels are compiled: nothing is compiled again)
    lay.spec(33)
    assert len(fake.calls) == len(expected)
    # a second weight of the same shape schedules nothing new
    lay2 = _layer(8192, 8192)
    assert precompile.precompile_on_first_launch(lay2, lay2.plan_for(1)) == []


def test_background_kernels_compile_in_parallel(monkeypatch):
    lay = _layer(8192, 8192)
    background = len(_decode_kernels(lay)) - 1
    monkeypatch.setattr(precompile, "background_workers", lambda: background)
    fake = _FakeCompiler(parties=background)  # every background compile waits until all of them run at once
    monkeypatch.setattr(compiled, "_compile_now", fake)
    _first_launch(lay, 1)
    assert precompile.wait_precompiled(timeout=60)
    assert not fake.barrier.broken, "the background compiles did not run at the same time"
    assert len(fake.calls) == background + 1


def test_a_call_for_a_kernel_compiling_in_the_background_waits_for_it(monkeypatch):
    gate = threading.Event()
    fake = _FakeCompiler()

    def slow(p, caps, run_arch):
        if threading.current_thread().name.startswith("humming-precompile"):
            fake.background_started.set()
            gate.wait(timeout=30)
        return fake(p, caps, run_arch)

    monkeypatch.setattr(compiled, "_compile_now", slow)
    monkeypatch.setattr(precompile, "background_workers", lambda: 1)
    lay = _layer(8192, 8192)
    p33 = lay.plan_for(33)
    precompile.compile_in_background([p33], lay.caps)
    assert fake.background_started.wait(timeout=30)
    result = []
    waiter = threading.Thread(target=lambda: result.append(compiled.compile_plan(p33, lay.caps)))
    waiter.start()
    time.sleep(0.1)
    assert waiter.is_alive()  # waiting for the running compile, not compiling a second copy
    gate.set()
    waiter.join(timeout=30)
    assert [n for n, _ in fake.calls] == [p33.kernel_name]
    assert result and result[0] is compiled._compiled[(PROFILE, p33.kernel_name, None)]


def test_precompile_switch(monkeypatch):
    monkeypatch.setattr(compiled, "_compile_now", _FakeCompiler())
    monkeypatch.setenv(precompile.ENV_PRECOMPILE, "0")
    lay = _layer(4096, 4096)
    assert precompile.precompile_on_first_launch(lay, lay.plan_for(1)) == []
    assert precompile.precompile_ms() == []
    _first_launch(lay, 1)  # the first launch schedules nothing either
    assert precompile.pending_precompiles() == 0 and len(compiled._compiled) == 1
    monkeypatch.setenv(precompile.ENV_PRECOMPILE, "all")
    assert max(precompile.precompile_ms()) > 1024 and 1024 in precompile.precompile_ms()
    monkeypatch.delenv(precompile.ENV_PRECOMPILE)
    assert precompile.precompile_ms() == list(range(1, tuning.DECODE_MAX_M + 1))


def test_nvrtc_is_called_without_the_gil():
    tc = _need_nvrtc("sm_80")
    lib = tc._lib.lib
    assert isinstance(lib, ctypes.CDLL) and not isinstance(lib, ctypes.PyDLL)
    assert not lib.nvrtcCompileProgram._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # ctypes drops the GIL for the call


def test_decode_kernels_of_a_layer_compile_in_parallel_with_nvrtc(monkeypatch):
    """Real NVRTC, small layer on the A100 profile: every decode kernel ends up compiled and in the disk cache,
    and at least two compiles overlapped in time."""
    _need_nvrtc("sm_80")
    monkeypatch.setattr(precompile, "background_workers", lambda: 4)
    lay = _layer(256, 512, "nvidia-a100")
    expected = _decode_kernels(lay)
    assert len(expected) >= 3
    before = len(compile_stats())
    _first_launch(lay, 1)
    assert precompile.wait_precompiled(timeout=300)
    stats = [s for s in compile_stats()[before:] if s.seconds > 0]
    assert {s.kernel_names[0] for s in stats} == expected and len(stats) == len(expected)
    spans = sorted((s.timestamp - s.seconds, s.timestamp) for s in stats)
    assert any(b0 < a1 for (_, a1), (b0, _) in zip(spans, spans[1:])), f"no two compiles overlapped: {spans}"
    assert len(cache.get_cache().entries()) == len(expected)


SOURCE = 'extern "C" __global__ void cold_start_probe(float* p) {{ p[threadIdx.x] = {v}.0f; }}\n'


def test_threads_compiling_one_source_compile_it_once_and_cache_one_entry():
    _need_nvrtc("sm_80")
    out: list = []
    threads = [threading.Thread(target=lambda: out.append(compile_cuda(SOURCE.format(v=1), ["cold_start_probe"], "sm_80")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 4 and len({m.cubin for m in out}) == 1
    assert sum(not m.cache_hit for m in out) == 1  # the others waited for it and found it in the cache
    assert len(cache.get_cache().entries()) == 1


def test_threads_compiling_different_sources_leave_valid_entries():
    _need_nvrtc("sm_80")
    out: list = []
    threads = [threading.Thread(target=lambda v=v: out.append(compile_cuda(SOURCE.format(v=v), ["cold_start_probe"], "sm_80")))
               for v in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kc = cache.get_cache()
    assert len(out) == 6 and len(kc.entries()) == 6
    kc.clear_memory()
    for m in out:
        entry, level = kc.get(m.key)
        assert level == "disk" and entry.cubin == m.cubin


def test_build_decode_builds_what_a_first_call_schedules(capsys):
    from humming.cli import main as cli

    _need_nvrtc("sm_80")
    expected = _decode_kernels(_layer(256, 512, "nvidia-a100"))
    assert cli(["build", "--shapes", "256x512", "--profile", "nvidia-a100", "--decode", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "M 1-64 (decode buckets)" in out
    assert f"built {len(expected)} kernel(s) for nvidia-a100 (sm_80): {len(expected)} compiled" in out
    assert {k[1] for k in compiled._compiled} == expected
    assert cli(["build", "--shapes", "256x512", "--profile", "nvidia-a100", "--decode", "--m", "1"]) != 0
    assert "--decode and --m exclude each other" in capsys.readouterr().err


def test_exit_drops_the_compiles_not_started(monkeypatch):
    gate = threading.Event()
    started = threading.Event()

    def blocked(p, caps, run_arch):
        started.set()
        gate.wait(timeout=30)
        return (object(), None)

    monkeypatch.setattr(compiled, "_compile_now", blocked)
    monkeypatch.setattr(precompile, "background_workers", lambda: 1)
    futures = precompile.precompile(_layer(8192, 8192))
    assert len(futures) >= 3 and started.wait(timeout=30)
    precompile._drop_queued()  # what the interpreter's exit runs
    gate.set()
    assert precompile.wait_precompiled(timeout=30)
    assert sum(f.cancelled() for f in futures) == len(futures) - 1  # only the running one finished


def test_background_compiles_what_the_layer_launches(monkeypatch):
    """HUMMING_PRECOMPILE=all: the background compiles the plan the layer launches for each M (Layer.plan_for, the
    registry's choice): from M 513 the register-A prefill family's (the live GPU of the profile's target: none here),
    below it the mma.sync family's rules (here register-A small-form plans from M 9); on an A100 profile (no wgmma)
    the mma.sync family's plan at every M."""
    fake = _FakeCompiler()
    monkeypatch.setattr(compiled, "_compile_now", fake)
    caps = get_profile("nvidia-h200")
    lay = _layer(8192, 8192, "nvidia-h200")
    layout = layout_for(scheme_of("w4a16"), 8192, 8192, "f16", caps=caps)  # as the runtime prepares it
    for m in (16, 512):
        assert lay.plan_for(m).kernel_name == tuned.choose_plan(caps, layout, m, "f16", "w4a16").kernel_name
    for m in (513, 768, 4096):
        p = lay.plan_for(m)
        assert p.kernel_name == tuned.register_a_prefill_plan(caps, layout, m, "f16", "w4a16").kernel_name
        assert family_of(p).name == "register_a" and p.path == "wgmma-rs" and p.tiles.bn == 128
    ms = (16, 512, 513, 768, 4096)
    precompile.precompile(lay, ms)
    assert precompile.wait_precompiled(timeout=60)
    assert sorted(n for n, _ in fake.calls) == sorted({lay.plan_for(m).kernel_name for m in ms})
    a100 = _layer(8192, 8192, "nvidia-a100")  # no wgmma there: the mma.sync family's plan at every M
    a100_layout = layout_for(scheme_of("w4a16"), 8192, 8192, "f16", caps=a100.caps)
    p = a100.plan_for(4096)
    assert family_of(p).name == "mma_wna16"
    assert p.kernel_name == tuned.choose_plan(a100.caps, a100_layout, 4096, "f16", "w4a16").kernel_name


def test_register_a_prefill_family_runs_where_tuning_says_it_runs():
    """One prepared weight (a Layer) runs every M; from the register-A prefill form's threshold it runs that form where
    tuned.runs_register_a_prefill says so (as the tuner and aot ask): int4 g128 on the H200 profile (no GPU here: the
    profile's target counts as live), on the packed weights its smaller M use (one copy), not on an A100 profile nor for
    a layout the form refuses by default (groups of 32). (The old separate register-A handle per weight is gone: the
    registry picks the family per M.)"""
    torch.manual_seed(0)

    def layer(profile, scheme="w4a16"):
        qw = humming.quantize(torch.randn(256, 512) * 0.05, scheme)
        handle = api.prepared(qw, torch.float16, "cpu", profile=profile)
        assert api.prepared(qw, torch.float16, "cpu", profile=profile) == handle  # kept on the weight
        return api._registry[handle]

    h200 = layer("nvidia-h200")
    layout = layout_for(h200.scheme, 256, 512, "f16", caps=h200.caps)
    assert tuned.runs_register_a_prefill(h200.caps, layout, 1024)
    big, small = h200.plan_for(1024), h200.plan_for(1)
    assert family_of(big).name == "register_a" and big.path == "wgmma-rs" and big.tiles.bn == 128
    assert family_of(small).name == "mma_wna16" and small.path == "stream"
    assert h200.packed_for(big, "x") is h200.packed_for(small, "x") and len(h200.packed) == 1
    a100 = layer("nvidia-a100")
    assert not tuned.runs_register_a_prefill(a100.caps, layout_for(a100.scheme, 256, 512, "f16", caps=a100.caps),
                                             1024)
    assert refusal("register_a", a100.problem(1024), a100.caps) is not None
    assert family_of(a100.plan_for(1024)).name == "mma_wna16"
    g32 = layer("nvidia-h200", "w4a16[group_size=32]")
    assert not tuned.runs_register_a_prefill(g32.caps, layout_for(g32.scheme, 256, 512, "f16", caps=g32.caps), 1024)
    assert refusal("register_a", g32.problem(1024), g32.caps) is not None
    assert family_of(g32.plan_for(1024)).name != "register_a"
