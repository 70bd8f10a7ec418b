"""Plans to loaded kernels: generate, compile (NVRTC, or the vendor compiler a profile names; disk-cached) and keep
one loaded kernel per (profile, kernel, compile target) for the life of the process."""
from __future__ import annotations

import threading

from humming.core.compile.compiler import compile_for_profile
from humming.core.compile.cubin import register_counts
from humming.core.registry import kernel_source
from humming.core.runtime.kernel import LoadedKernel
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

_lock = threading.Lock()
_compiled: dict[tuple, tuple] = {}  # (profile, kernel, run_arch) -> (LoadedKernel, CompiledModule or None)
_locks: dict[tuple, threading.Lock] = {}  # one per kernel: a kernel is compiled once per process


def source(plan, caps) -> str:
    """The generated CUDA C++ of a plan for a profile."""
    return kernel_source(plan, get_backend(caps), caps)


def is_compiled(caps, plan, run_arch: str | None = None) -> bool:
    return (caps.name, plan.kernel_name, run_arch) in _compiled


def compile_plan(plan, caps, run_arch: str | None = None):
    """(LoadedKernel, CompiledModule or None for a vendor-compiled one) of a plan's kernel. ``run_arch`` compiles the
    plan's source for another target: a profile *emulated* on the live GPU (a kernel planned for the T4 profile,
    spelled with its instructions, compiled to run on an H200). Threads asking for the same kernel wait for one
    compile."""
    key = (caps.name, plan.kernel_name, run_arch)
    hit = _compiled.get(key)
    if hit is not None:
        return hit
    with _lock:
        kernel_lock = _locks.setdefault(key, threading.Lock())
    with kernel_lock:
        hit = _compiled.get(key)
        if hit is None:
            hit = _compile_now(plan, caps, run_arch)
            with _lock:
                _compiled[key] = hit
        return hit


def check_registers(cubin: bytes, kernel_name: str, caps) -> None:
    """UnsupportedOnDevice where the compiled kernel uses more registers per thread than the profile declares
    (limits.registers_per_thread): the device could not launch it. Nothing to check where the profile declares no
    limit or the binary is not one whose register count can be read (a vendor compiler's)."""
    limit = caps.limits.registers_per_thread
    used = register_counts(cubin).get(kernel_name) if limit is not None else None
    if used is not None and used > limit:
        # __launch_bounds__ on every kernel makes ptxas ignore -maxrregcount, so the limit is checked, not imposed
        raise UnsupportedOnDevice(
            f"{kernel_name} uses {used} registers per thread (ptxas); {caps.name} declares registers_per_thread "
            f"{limit}, so the device could not launch it. If the device allows more, declare its true limit in "
            f"the profile ({caps.source or caps.name}); otherwise this plan cannot run on it (a smaller tile, set "
            f"through the tuning knobs, needs fewer registers).")


def _compile_now(plan, caps, run_arch: str | None):
    cubin, module = compile_for_profile(source(plan, caps), [plan.kernel_name], get_backend(caps), caps, run_arch)
    check_registers(cubin, plan.kernel_name, caps)
    return LoadedKernel(cubin, plan.kernel_name, plan.smem_bytes), module
