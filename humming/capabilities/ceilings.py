"""Limits a profile may not exceed on its declared target, beyond the schema's bounds for any backend.

For the `nvidia` backend (CUDA programming guide, "Technical specifications per compute capability"):
a block has at most 1024 threads, a warp is 32 lanes, a thread has at most 255 registers, a thread-block cluster
has at most 16 blocks (8 portable; more only by a non-portable opt-in on sm_90 and later), and a block may
opt in to at most the shared memory of SMEM_PER_BLOCK_KB for its target's compute capability (a compute
capability missing from the table is held only to the schema bound). For every backend: a block holds
whole warps, so max_threads_per_block is a multiple of warp_size.
"""
from __future__ import annotations

from typing import Any

from humming.capabilities.checks import Where

Located = tuple[Any, Where]

NVIDIA_MAX_THREADS_PER_BLOCK = 1024
NVIDIA_WARP_SIZE = 32
NVIDIA_MAX_REGISTERS_PER_THREAD = 255
NVIDIA_MAX_CLUSTER_SIZE = 16
# Largest opt-in shared memory per block (KB) by compute capability.
SMEM_PER_BLOCK_KB: dict[tuple[int, int], int] = {
    (7, 5): 64, (8, 0): 163, (8, 6): 99, (8, 7): 163, (8, 9): 99, (9, 0): 227,
    (10, 0): 227, (10, 3): 227, (12, 0): 99, (12, 1): 99,
}


def _ceilings(backend: str, cc: tuple[int, int] | None) -> dict[str, tuple[int, str]]:
    if backend != "nvidia":
        return {}
    out = {
        "max_threads_per_block": (NVIDIA_MAX_THREADS_PER_BLOCK, "an NVIDIA block has at most 1024 threads"),
        "registers_per_thread": (NVIDIA_MAX_REGISTERS_PER_THREAD, "an NVIDIA thread has at most 255 registers"),
        "max_cluster_size": (NVIDIA_MAX_CLUSTER_SIZE, "an NVIDIA thread-block cluster has at most 16 blocks "
                                                      "(8 portable)"),
    }
    if cc in SMEM_PER_BLOCK_KB:
        out["smem_per_block_kb"] = (SMEM_PER_BLOCK_KB[cc], f"compute capability {cc[0]}.{cc[1]} allows a block "
                                                           f"at most {SMEM_PER_BLOCK_KB[cc]} KB")
    return out


def check_limits(limits: dict[str, Located], backend: str, arch: str | None, cc: tuple[int, int] | None,
                 locate: Any) -> None:
    """ProfileError (at the key, in the file that set it) for a limit impossible on backend/target `arch`."""
    target = f"target {arch}" if arch else f"backend {backend}"
    for key, (ceiling, why) in _ceilings(backend, cc).items():
        value, where = limits.get(key, (None, None))
        if value is not None and value > ceiling:
            locate(where).fail(f"{value} is impossible on {target}: {why}")
    warp, warp_at = limits.get("warp_size", (None, None))
    if backend == "nvidia" and warp is not None and warp != NVIDIA_WARP_SIZE:
        locate(warp_at).fail(f"{warp} is impossible on {target}: an NVIDIA warp is 32 threads")
    threads, threads_at = limits.get("max_threads_per_block", (None, None))
    if warp is not None and threads is not None and threads % warp:
        locate(threads_at).fail(f"{threads} is not a whole number of warps of {warp} threads (warp_size)")
