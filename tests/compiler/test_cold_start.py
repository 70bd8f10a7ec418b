"""CPU: the cold start of a layer. The first launch compiles its own kernel in the caller's thread and the
layer's other decode-bucket kernels in parallel on a background pool; every kernel is compiled once; NVRTC
calls release the GIL (ctypes.CDLL), so threads really compile in parallel; the disk cache stays whole."""
from __future__ import annotations

import ctypes
import threading
import time
import types

import pytest

from humming import aot, api
from humming.capabilities import get_profile
from humming.core.common.layout import layout_for
from humming.core.compile import cache
from humming.core.compile.compiler import compile_cuda, compile_stats
from humming.core.tuning import entries as tuning
from humming.errors import UnsupportedOnDevice

PROFILE = "nvidia-h200"


@pytest.fixture(autouse=True)
def _fresh_runtime_state(monkeypatch):
    """Own compiled-kernel memo and background pool for each test (nothing leaks into other tests)."""
    monkeypatch.setattr(api, "_compiled", {})
    monkeypatch.setattr(api, "_compile_locks", {})
    monkeypatch.delenv(aot.ENV_PRECOMPILE, raising=False)
    aot._forget_precompiles()
    yield
    aot.wait_precompiled(timeout=120)
    aot._forget_precompiles()


def _need_nvrtc(arch: str):
    from humming.core.compile.nvrtc import select_toolchain

    try:
        return select_toolchain(arch)
    except UnsupportedOnDevice as exc:
        pytest.skip(f"no NVRTC for {arch}: {str(exc).splitlines()[0]}")


def _handle(n: int, k: int, profile: str = PROFILE) -> int:
    """A registered WnA16 weight without tensors: planning and compiling only need its layout."""
    caps = get_profile(profile)
    packed = types.SimpleNamespace(layout=layout_for(api._scheme("w4a16"), n, k, "f16"))
    return api._register(packed, caps, None)


def _decode_kernels(handle: int) -> set[str]:
    return {api.plan_for(handle, m).kernel_name for m in range(1, tuning.DECODE_MAX_M + 1)}


def _first_launch(handle: int, m: int):
    """What the runtime's first launch does for M before it builds the launch (no GPU needed)."""
    p = api.plan_for(handle, m)
    aot.precompile_on_first_launch(handle, m, p)
    return p, api.compile_plan(p, api._registry[handle].caps)


class _FakeCompiler:
    """Stands in for the NVRTC compile: records which thread compiled which kernel, and can hold every compile
    until ``parties`` of them run at the same time (a serial pool would time out)."""

    def __init__(self, parties: int = 0):
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(parties) if parties > 1 else None
        self.background_started = threading.Event()

    def __call__(self, p, caps, key, run_arch):
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
        entry = (object(), None)
        with api._lock:
            api._compiled[key] = entry
        return entry


def test_first_launch_compiles_its_kernel_here_and_the_other_decode_kernels_in_the_background(monkeypatch):
    fake = _FakeCompiler()
    monkeypatch.setattr(api, "_compile_plan_now", fake)
    h = _handle(8192, 8192)
    expected = _decode_kernels(h)
    assert len(expected) > 2  # stream kernels for M <= 16, tile kernels above
    p, _ = _first_launch(h, 1)
    assert aot.wait_precompiled(timeout=60)
    names = [n for n, _ in fake.calls]
    assert sorted(names) == sorted(expected)  # each decode kernel exactly once
    threads = dict(fake.calls)
    assert not threads[p.kernel_name].startswith("humming-precompile")  # the requested one: the caller's thread
    assert all(t.startswith("humming-precompile") for n, t in threads.items() if n != p.kernel_name)
    assert aot.pending_precompiles() == 0
    # a second weight of the same shape schedules nothing new
    h2 = _handle(8192, 8192)
    assert aot.precompile_on_first_launch(h2, 1, api.plan_for(h2, 1)) == []


def test_background_kernels_compile_in_parallel(monkeypatch):
    h = _handle(8192, 8192)
    background = len(_decode_kernels(h)) - 1
    monkeypatch.setattr(aot, "background_workers", lambda: background)
    fake = _FakeCompiler(parties=background)  # every background compile waits until all of them run at once
    monkeypatch.setattr(api, "_compile_plan_now", fake)
    _first_launch(h, 1)
    assert aot.wait_precompiled(timeout=60)
    assert not fake.barrier.broken, "the background compiles did not run at the same time"
    assert len(fake.calls) == background + 1


def test_a_call_for_a_kernel_compiling_in_the_background_waits_for_it(monkeypatch):
    gate = threading.Event()
    fake = _FakeCompiler()

    def slow(p, caps, key, run_arch):
        if threading.current_thread().name.startswith("humming-precompile"):
            fake.background_started.set()
            gate.wait(timeout=30)
        return fake(p, caps, key, run_arch)

    monkeypatch.setattr(api, "_compile_plan_now", slow)
    monkeypatch.setattr(aot, "background_workers", lambda: 1)
    h = _handle(8192, 8192)
    p33 = api.plan_for(h, 33)
    aot.compile_in_background([p33], api._registry[h].caps)
    assert fake.background_started.wait(timeout=30)
    result = []
    waiter = threading.Thread(target=lambda: result.append(api.compile_plan(p33, api._registry[h].caps)))
    waiter.start()
    time.sleep(0.1)
    assert waiter.is_alive()  # waiting for the running compile, not compiling a second copy
    gate.set()
    waiter.join(timeout=30)
    assert [n for n, _ in fake.calls] == [p33.kernel_name]
    assert result and result[0] is api._compiled[(PROFILE, p33.kernel_name, None)]


def test_precompile_switch(monkeypatch):
    monkeypatch.setattr(api, "_compile_plan_now", _FakeCompiler())
    monkeypatch.setenv(aot.ENV_PRECOMPILE, "0")
    h = _handle(4096, 4096)
    assert aot.precompile_on_first_launch(h, 1, api.plan_for(h, 1)) == []
    assert aot.precompile_ms() == []
    monkeypatch.setenv(aot.ENV_PRECOMPILE, "all")
    assert max(aot.precompile_ms()) > 1024 and 1024 in aot.precompile_ms()
    monkeypatch.delenv(aot.ENV_PRECOMPILE)
    assert aot.precompile_ms() == list(range(1, tuning.DECODE_MAX_M + 1))


def test_nvrtc_is_called_without_the_gil():
    tc = _need_nvrtc("sm_80")
    lib = tc._lib.lib
    assert isinstance(lib, ctypes.CDLL) and not isinstance(lib, ctypes.PyDLL)
    assert not lib.nvrtcCompileProgram._flags_ & ctypes._FUNCFLAG_PYTHONAPI  # ctypes drops the GIL for the call


def test_decode_kernels_of_a_layer_compile_in_parallel_with_nvrtc(monkeypatch):
    """Real NVRTC, small layer on the A100 profile: every decode kernel ends up compiled and in the disk cache,
    and at least two compiles overlapped in time."""
    _need_nvrtc("sm_80")
    monkeypatch.setattr(aot, "background_workers", lambda: 4)
    h = _handle(256, 512, "nvidia-a100")
    expected = _decode_kernels(h)
    assert len(expected) >= 3
    before = len(compile_stats())
    _first_launch(h, 1)
    assert aot.wait_precompiled(timeout=300)
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
    h = _handle(256, 512, "nvidia-a100")
    expected = _decode_kernels(h)
    assert cli(["build", "--shapes", "256x512", "--profile", "nvidia-a100", "--decode", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "M 1-64 (decode buckets)" in out
    assert f"built {len(expected)} kernel(s) for nvidia-a100 (sm_80): {len(expected)} compiled" in out
    assert {k[1] for k in api._compiled} == expected
    assert cli(["build", "--shapes", "256x512", "--profile", "nvidia-a100", "--decode", "--m", "1"]) != 0
    assert "--decode and --m exclude each other" in capsys.readouterr().err


def test_exit_drops_the_compiles_not_started(monkeypatch):
    gate = threading.Event()
    started = threading.Event()

    def blocked(p, caps, key, run_arch):
        started.set()
        gate.wait(timeout=30)
        return (object(), None)

    monkeypatch.setattr(api, "_compile_plan_now", blocked)
    monkeypatch.setattr(aot, "background_workers", lambda: 1)
    h = _handle(8192, 8192)
    futures = aot.precompile(h)
    assert len(futures) >= 3 and started.wait(timeout=30)
    aot._drop_queued()  # what the interpreter's exit runs
    gate.set()
    assert aot.wait_precompiled(timeout=30)
    assert sum(f.cancelled() for f in futures) == len(futures) - 1  # only the running one finished


def test_background_plans_follow_the_launched_handle():
    """HUMMING_PRECOMPILE=all: from M 513 the runtime launches the register-A prefill handle's plan (the live GPU of
    the profile's target: none here), so that is what the background compiles there; below, the handle's own."""
    caps = get_profile("nvidia-h200")
    h = _handle(8192, 8192, "nvidia-h200")
    layout = api._registry[h].packed.layout
    for m in (16, 512):
        assert aot.launched_plan(h, m).kernel_name == api.plan_for(h, m).kernel_name
    for m in (513, 768, 4096):
        p = aot.launched_plan(h, m)
        assert p.kernel_name == tuning.register_a_prefill_plan(caps, layout, m, "f16", "w4a16").kernel_name
        assert p.path == "wgmma-rs" and p.tiles.bn == 128
    a100 = _handle(8192, 8192, "nvidia-a100")  # no wgmma there: the mma.sync handle's plan at every M
    assert aot.launched_plan(a100, 4096).kernel_name == api.plan_for(a100, 4096).kernel_name


def test_register_a_prefill_handle_is_made_where_tuning_says_it_runs():
    """api._wna16_wgmma_rs_handle asks tuning.runs_register_a_prefill (as the tuner and aot do): a handle of its own
    for int4 g128 on the H200 profile (no GPU here: the profile's target counts as live), none on an A100 profile or
    for a layout the form refuses by default (groups of 32); the decision is cached on the weight."""
    import torch

    def weight(n, k, profile, scheme="w4a16"):
        caps = get_profile(profile)
        sch = api._scheme(scheme)
        packed = types.SimpleNamespace(layout=layout_for(sch, n, k, "f16"))
        qw = types.SimpleNamespace(shape=(n, k), scheme=sch)
        return qw, api._register(packed, caps, None)

    x = torch.empty(1, 8192, dtype=torch.float16)
    qw, fallback = weight(8192, 8192, "nvidia-h200")
    h = api._wna16_wgmma_rs_handle(x, qw, "nvidia-h200", fallback)
    assert h != fallback and api._registry[h].packed is api._registry[fallback].packed
    assert api.plan_for(h, 1024).path == "wgmma-rs" and api.plan_for(h, 1024).tiles.bn == 128
    assert api._wna16_wgmma_rs_handle(x, qw, "nvidia-h200", fallback) == h  # cached
    qa, fa = weight(8192, 8192, "nvidia-a100")
    assert api._wna16_wgmma_rs_handle(x, qa, "nvidia-a100", fa) == fa
    q32, f32 = weight(8192, 8192, "nvidia-h200", "w4a16[group_size=32]")
    assert api._wna16_wgmma_rs_handle(x, q32, "nvidia-h200", f32) == f32
