"""Act-order experts' activations in one kernel launch: every routed slot's row of A, its columns permuted into the
order of its own expert's groups.

An act-order expert (GPTQ ``desc_act``) is prepared with its input columns sorted by group (its ``g_idx`` becomes the
natural order, ``humming.core.families.moe_wna16.layout``); the activations must then follow each expert's own
permutation ``perm[e]``, which no shared gather of x can do. So before the GEMM, for each entry i of a routing
(``humming.core.moe.routing``): slot s = SORTED[i], expert e = EXPERT_IDS[i / block_m], and

    out[s, j] = a[s / a_div, perm[e, j]]          (j < K; slots of no expert and padding entries are not written)

and the GEMM reads ``out`` with one row per slot (a_div 1). Costs slots x K x 2 bytes written and read again.
Compiled once per (device profile, live target) on the profile's compile route
(:mod:`humming.core.runtime.helper_kernels`), launched on torch's current stream (CUDA-graph capturable: the
routing's used length is read on the device).
"""
from __future__ import annotations

import ctypes

import torch

from humming.core.runtime.helper_kernels import HelperModule, device_index
from humming.errors import ShapeError, UnsupportedOnDevice

__all__ = ["permuted_rows", "permute_source", "KERNEL_NAME"]

KERNEL_NAME = "humming_moe_permute_rows"
THREADS = 256
_POISON = False  # tests set it: outputs are filled with garbage before each launch

_SOURCE = f"""// ===== humming generated kernel: act-order experts' activations, each routed row in its expert's column order
extern "C" __global__ void __launch_bounds__({THREADS}) {KERNEL_NAME}(
    const unsigned short* __restrict__ a,       // [rows, K] 16-bit activations (row s / a_div of slot s)
    unsigned short* __restrict__ out,           // [slots, K] the permuted row of every routed slot
    const int* __restrict__ sorted,             // the routing: slot of each entry (num_slots pads an expert's run)
    const int* __restrict__ expert_ids,         // expert of each block_m entries (-1: none)
    const int* __restrict__ num_padded,         // entries in use
    const int* __restrict__ perm,               // [E, K] expert e's column j reads activation column perm[e, j]
    int capacity, int block_m, int num_slots, int a_div, int k) {{
  const int used = min(num_padded[0], capacity);
  for (int i = blockIdx.x; i < used; i += gridDim.x) {{  // one routing entry per block and pass
    const int s = sorted[i];
    const int e = expert_ids[i / block_m];
    if (s >= num_slots || e < 0) continue;
    const unsigned short* src = a + (long long)(s / a_div) * k;
    const int* p = perm + (long long)e * k;
    unsigned short* dst = out + (long long)s * k;
    for (int j = threadIdx.x; j < k; j += {THREADS}) dst[j] = src[p[j]];  // gathered reads stay in one row
  }}
}}
"""


def permute_source() -> str:
    """The CUDA C++ of the kernel (plain C++: no helper group, the same on every target)."""
    return _SOURCE


def _build(cubin: bytes, device: int) -> object:
    from humming.core.runtime.kernel import LoadedKernel

    return LoadedKernel(cubin, KERNEL_NAME, 0)


_MODULE = HelperModule("act-order permutation", permute_source, (KERNEL_NAME,), _build)


def permuted_rows(a: torch.Tensor, routing, perm: torch.Tensor, a_div: int) -> torch.Tensor:
    """``[routing.num_slots, K]`` in a's dtype: row s is row ``s // a_div`` of ``a`` in the column order of slot s's
    expert (``perm`` int32 ``[E, K]``, on a's device); rows of slots no expert takes are left unwritten (the GEMM
    never reads them). ShapeError for operands that do not fit; UnsupportedOnDevice where the device has no kernel."""
    k = int(a.shape[-1])
    if (not a.is_cuda or a.dim() != 2 or a.element_size() != 2 or not a.is_contiguous() or perm.dtype != torch.int32
            or perm.dim() != 2 or perm.shape[1] != k or perm.device != a.device or not perm.is_contiguous()):
        raise ShapeError(f"the act-order permutation takes contiguous CUDA 16-bit activations [rows, K] and int32 "
                         f"permutations [E, K] on their device; got {a.dtype} {list(a.shape)} on {a.device}, "
                         f"{perm.dtype} {list(perm.shape)} on {perm.device}")
    out = torch.empty((routing.num_slots, k), dtype=a.dtype, device=a.device)
    if _POISON:
        out.fill_(-7777.0)
    if routing.capacity == 0 or k == 0 or routing.num_slots == 0:
        return out
    device = device_index(a)
    kernel = _MODULE.on(device)
    if isinstance(kernel, str):
        raise UnsupportedOnDevice(kernel)
    from humming.core.runtime.launch import current_stream

    blocks = min(routing.capacity, 1 << 16)  # the kernel strides over the rest
    args = [ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(out.data_ptr()),
            ctypes.c_void_p(routing.sorted_ids.data_ptr()), ctypes.c_void_p(routing.expert_ids.data_ptr()),
            ctypes.c_void_p(routing.num_padded.data_ptr()), ctypes.c_void_p(perm.data_ptr()),
            ctypes.c_int(routing.capacity), ctypes.c_int(routing.block_m), ctypes.c_int(routing.num_slots),
            ctypes.c_int(a_div), ctypes.c_int(k)]
    with torch.cuda.device(device):
        kernel.launch(device, (blocks, 1, 1), THREADS, current_stream(device), args)
    return out
