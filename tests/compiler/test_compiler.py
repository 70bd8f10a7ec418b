"""compile_cuda across targets and both NVRTC majors, CompileError, and the kernel cache (CPU only)."""
from __future__ import annotations

import multiprocessing as mp
import os
import struct
from pathlib import Path

import pytest

from humming.core.compile import cache as kcache
from humming.core.compile import nvrtc
from humming.core.compile.compiler import compile_cuda, compile_stats, reset_compile_stats
from humming.errors import CompileError, UnsupportedOnDevice

TOOLCHAINS = nvrtc.available_toolchains()
pytestmark = pytest.mark.skipif(not TOOLCHAINS, reason="no NVRTC library installed (pip install nvidia-cuda-nvrtc)")

KERNEL = "humming_test_mma"

# One warp computes one 16x8 tile with f16 inputs and f32 accumulation. No headers: self-contained.
MMA_K16 = r"""
extern "C" __global__ void humming_test_mma(const unsigned* __restrict__ a, const unsigned* __restrict__ b,
                                            float* __restrict__ c) {
  const unsigned lane = threadIdx.x & 31u;
  unsigned a0 = a[lane * 4 + 0], a1 = a[lane * 4 + 1], a2 = a[lane * 4 + 2], a3 = a[lane * 4 + 3];
  unsigned b0 = b[lane * 2 + 0], b1 = b[lane * 2 + 1];
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  c[lane * 4 + 0] = d0; c[lane * 4 + 1] = d1; c[lane * 4 + 2] = d2; c[lane * 4 + 3] = d3;
}
"""

# Turing has only the k8 shape for f16.
MMA_K8 = r"""
extern "C" __global__ void humming_test_mma(const unsigned* __restrict__ a, const unsigned* __restrict__ b,
                                            float* __restrict__ c) {
  const unsigned lane = threadIdx.x & 31u;
  unsigned a0 = a[lane * 2 + 0], a1 = a[lane * 2 + 1];
  unsigned b0 = b[lane];
  float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "r"(a0), "r"(a1), "r"(b0));
  c[lane * 4 + 0] = d0; c[lane * 4 + 1] = d1; c[lane * 4 + 2] = d2; c[lane * 4 + 3] = d3;
}
"""

TARGETS = [
    "sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100a", "sm_103a", "sm_107a", "sm_110a",
    "sm_120a", "sm_121a", "sm_100f", "sm_103f",
]


def kernel_for(arch: str) -> tuple[str, str]:
    """(source, instruction the PTX must hold) for a target."""
    base, _ = nvrtc.parse_arch(arch)
    if base < 80:
        return MMA_K8, "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32"
    return MMA_K16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"


def cubin_sm(cubin: bytes) -> int:
    """The SM number recorded in a CUDA ELF's e_flags (the layout changed with ELF ABI version 8)."""
    (flags,) = struct.unpack_from("<I", cubin, 48)
    return (flags >> 8) & 0xFF if cubin[8] >= 8 else flags & 0xFF


def check_cubin(cubin: bytes, arch: str) -> None:
    assert cubin[:4] == b"\x7fELF", "CUBIN is not an ELF file"
    assert cubin[4] == 2, "CUBIN is not ELF64"
    assert struct.unpack_from("<H", cubin, 18)[0] == 190, "ELF machine is not EM_CUDA (190)"
    assert cubin_sm(cubin) == nvrtc.parse_arch(arch)[0]


# ---------------------------------------------------------------------------------------------------------
# Targets x toolchains
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", TARGETS)
def test_mma_kernel_compiles_for_target_with_every_supporting_nvrtc(arch, monkeypatch):
    supporting = [t for t in TOOLCHAINS if t.supports(arch)]
    if not supporting:
        installed = ", ".join(f"{t.version[0]}.{t.version[1]}" for t in TOOLCHAINS)
        pytest.skip(f"no installed NVRTC ({installed}) accepts {arch}")
    source, instruction = kernel_for(arch)
    for t in supporting:
        monkeypatch.setenv("HUMMING_NVRTC", f"{t.version[0]}.{t.version[1]}")
        mod = compile_cuda(source, [KERNEL], arch, cache=False)
        assert mod.nvrtc_version == t.version
        check_cubin(mod.cubin, arch)
        assert mod.ptx is not None and instruction in mod.ptx
        assert f".target {arch}" in mod.ptx
        assert f".entry {KERNEL}(" in mod.ptx  # extern "C": unmangled
        assert not mod.cache_hit and mod.compile_seconds > 0


@pytest.mark.parametrize("major", [12, 13])
def test_each_major_exercised_explicitly(major, monkeypatch):
    if not any(t.version[0] == major for t in TOOLCHAINS):
        pytest.skip(f"NVRTC {major} not installed (pip install {nvrtc.PIP_PACKAGE[major]})")
    monkeypatch.setenv("HUMMING_NVRTC", str(major))
    for arch in ("sm_80", "sm_90a", "sm_120a"):
        mod = compile_cuda(kernel_for(arch)[0], [KERNEL], arch)
        assert mod.nvrtc_version[0] == major
        check_cubin(mod.cubin, arch)


def test_unsupported_target_raises_unsupported_on_device():
    with pytest.raises(UnsupportedOnDevice, match="pip install"):
        compile_cuda(MMA_K16, [KERNEL], "sm_80", min_nvrtc=(99, 0))
    rejecting = next((t for t in TOOLCHAINS if not t.supports("sm_50")), None)
    if rejecting is not None:  # CUDA 13 dropped sm_50
        with pytest.raises(UnsupportedOnDevice, match="cannot compile for sm_50"):
            compile_cuda(MMA_K8, [KERNEL], "sm_50", toolchain=rejecting)


def test_want_ptx_false_and_options(monkeypatch):
    mod = compile_cuda(MMA_K16, (KERNEL,), "sm_80", want_ptx=False, options=("--extra-device-vectorization",))
    assert mod.ptx is None and mod.cubin[:4] == b"\x7fELF"
    assert "--extra-device-vectorization" in mod.options and "--gpu-architecture=sm_80" in mod.options
    assert "-std=c++17" in mod.options and "-default-device" in mod.options
    # asking for PTX later must not be served the PTX-less entry
    again = compile_cuda(MMA_K16, (KERNEL,), "sm_80", options=("--extra-device-vectorization",))
    assert again.ptx is not None and not again.cache_hit
    monkeypatch.setenv("HUMMING_LINEINFO", "1")
    line = compile_cuda(MMA_K16, (KERNEL,), "sm_80")
    assert "-lineinfo" in line.options and not line.cache_hit


# ---------------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------------


def test_compile_error_carries_log_and_saved_source(tmp_path):
    broken = MMA_K16.replace("float d0 = 0.f", "float d0 = undefined_symbol")
    with pytest.raises(CompileError) as e:
        compile_cuda(broken, [KERNEL], "sm_80")
    err = e.value
    assert "undefined_symbol" in err.log and "error" in err.log
    assert err.source_path and Path(err.source_path).read_text() == broken
    assert Path(err.source_path).parent == tmp_path / "kernels" / "failed"
    assert Path(err.source_path).with_suffix(".log").read_text() == err.log
    assert "compiler log" in str(err) and "sm_80" in str(err)
    assert compile_stats()[-1].ok is False


def test_missing_kernel_name_is_a_compile_error():
    with pytest.raises(CompileError, match="not_there"):
        compile_cuda(MMA_K16, [KERNEL, "not_there"], "sm_80")


# ---------------------------------------------------------------------------------------------------------
# Cache
# ---------------------------------------------------------------------------------------------------------


def test_cache_hit_from_memory_then_disk(tmp_path):
    reset_compile_stats()
    first = compile_cuda(MMA_K16, [KERNEL], "sm_90a")
    assert not first.cache_hit and first.compile_seconds > 0
    assert first.source_path and Path(first.source_path).read_text() == MMA_K16
    second = compile_cuda(MMA_K16, [KERNEL], "sm_90a")
    assert second.cache_hit and second.cache_level == "memory" and second.compile_seconds == 0
    assert second.original_compile_seconds == pytest.approx(first.compile_seconds)
    kcache.clear_memory_caches()
    third = compile_cuda(MMA_K16, [KERNEL], "sm_90a")
    assert third.cache_hit and third.cache_level == "disk" and third.compile_seconds == 0
    assert third.cubin == first.cubin and third.ptx == first.ptx and third.key == first.key
    assert third.original_compile_seconds == pytest.approx(first.compile_seconds)
    entries = kcache.get_cache().entries()
    assert len(entries) == 1 and entries[0].is_relative_to(tmp_path / "kernels")
    stats = compile_stats()
    assert [s.cache_level for s in stats] == [None, "memory", "disk"]
    assert stats[0].seconds > 0 and stats[1].seconds == 0 and stats[0].kernel_names == (KERNEL,)
    # a different target or option is a different key
    assert compile_cuda(MMA_K16, [KERNEL], "sm_80").key != first.key


def _corrupt_truncate(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _corrupt_flip(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[len(data) * 3 // 4] ^= 0xFF
    p.write_bytes(bytes(data))


def _corrupt_header(p: Path) -> None:
    data = bytearray(p.read_bytes())
    data[:8] = b"garbage!"
    p.write_bytes(bytes(data))


def _corrupt_empty(p: Path) -> None:
    p.write_bytes(b"")


@pytest.mark.parametrize("corrupt", [_corrupt_truncate, _corrupt_flip, _corrupt_header, _corrupt_empty])
def test_corrupt_entry_is_rebuilt(corrupt):
    good = compile_cuda(MMA_K16, [KERNEL], "sm_80")
    cache = kcache.get_cache()
    path = cache.entry_path(good.key)
    corrupt(path)
    kcache.clear_memory_caches()
    rebuilt = compile_cuda(MMA_K16, [KERNEL], "sm_80")
    assert not rebuilt.cache_hit and rebuilt.compile_seconds > 0
    assert rebuilt.cubin == good.cubin
    assert cache.counters.corrupt_removed == 1
    entry = kcache.CacheEntry.decode(path.read_bytes(), expected_key=good.key)  # valid again
    assert entry.cubin == good.cubin
    kcache.clear_memory_caches()
    assert compile_cuda(MMA_K16, [KERNEL], "sm_80").cache_level == "disk"


def test_cache_disabled_by_env(monkeypatch, tmp_path):
    monkeypatch.setenv("HUMMING_CACHE", "0")
    a = compile_cuda(MMA_K16, [KERNEL], "sm_80")
    b = compile_cuda(MMA_K16, [KERNEL], "sm_80")
    assert not a.cache_hit and not b.cache_hit and b.compile_seconds > 0
    assert a.source_path is None
    assert not (tmp_path / "kernels").exists()
    assert compile_cuda(MMA_K16, [KERNEL], "sm_80", cache=True).cache_hit is False  # explicit override
    assert compile_cuda(MMA_K16, [KERNEL], "sm_80", cache=True).cache_hit is True


def test_default_cache_dir_respects_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("HUMMING_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kcache.cache_dir() == tmp_path / "xdg" / "humming" / "kernels"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert kcache.cache_dir() == tmp_path / "home" / ".cache" / "humming" / "kernels"


def test_memory_lru_evicts_oldest(tmp_path):
    c = kcache.KernelCache(tmp_path / "lru", memory_capacity=2)
    for k in ("a" * 64, "b" * 64, "c" * 64):
        c.put(kcache.CacheEntry(k, b"\x7fELF" + k.encode(), None, {"compile_seconds": 0.1}))
    assert list(c._memory) == ["b" * 64, "c" * 64]
    assert c.get("a" * 64)[1] == "disk" and c.get("c" * 64)[1] == "memory"


def _concurrent_worker(cache_dir: str, barrier, queue) -> None:
    os.environ["HUMMING_CACHE_DIR"] = cache_dir
    os.environ.pop("HUMMING_CACHE", None)
    try:
        barrier.wait(timeout=60)
        mod = compile_cuda(MMA_K16, [KERNEL], "sm_90a")
        queue.put((True, mod.key, mod.cubin, mod.cache_hit))
    except BaseException as e:  # report, do not hang the parent
        queue.put((False, repr(e), b"", False))


def test_concurrent_writers_leave_one_valid_entry(tmp_path):
    cache_dir = str(tmp_path / "shared")
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_concurrent_worker, args=(cache_dir, barrier, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert all(ok for ok, *_ in results), results
    keys = {key for _, key, _, _ in results}
    assert len(keys) == 1 and len({cubin for *_, cubin, _ in results}) == 1
    cache = kcache.KernelCache(cache_dir)
    entries = cache.entries()
    assert entries == [cache.entry_path(keys.pop())]
    leftovers = [p for p in Path(cache_dir).rglob("*") if p.is_file() and p.name.startswith(".")]
    assert not leftovers, leftovers
    entry = kcache.CacheEntry.decode(entries[0].read_bytes(), expected_key=entries[0].stem)
    assert entry.cubin == results[0][2]


def _unwritable_cache(tmp_path: Path, how: str, monkeypatch) -> Path:
    """A cache directory that cannot be written: read-only (mode 0o500; root writes anyway, so that case is
    skipped for root) or a path through a regular file (no one can create it)."""
    if how == "read-only":
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o500)
    else:
        blocker = tmp_path / "a-file"
        blocker.write_text("not a directory")
        d = blocker / "kernels"
    monkeypatch.setenv("HUMMING_CACHE_DIR", str(d))  # (get_cache keeps one cache per directory)
    return d


@pytest.mark.parametrize("how", ["read-only", "under-a-file"])
def test_unwritable_cache_directory_compiles_without_the_disk_cache(tmp_path, monkeypatch, how, caplog):
    d = _unwritable_cache(tmp_path, how, monkeypatch)
    try:
        first = compile_cuda(MMA_K16, [KERNEL], "sm_80")
        assert not first.cache_hit and first.cubin
        assert compile_cuda(MMA_K16, [KERNEL], "sm_80").cache_level == "memory"  # the memory cache still works
        assert "continuing without the disk cache" in caplog.text
        kcache.clear_memory_caches()
        again = compile_cuda(MMA_K16, [KERNEL], "sm_80")
        assert not again.cache_hit and again.cubin == first.cubin
    finally:
        if how == "read-only":
            d.chmod(0o700)
