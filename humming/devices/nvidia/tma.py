"""The TMA engine and mbarriers (sm_90): mbarrier init / arrive / wait (and a polite wait that sleeps between polls),
the expect-tx arrival, bulk copies global -> shared and the L2 prefetch, 2-D tensor copies through a tensor map, and
the prelude of the stream kernel whose operands arrive by bulk copy."""
from __future__ import annotations

from humming.devices.base import Backend, HelperRequest

# one poll of an mbarrier phase (done = 1 once the phase of `parity` has completed), shared by the waits below
_TRY_WAIT = r"""    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");"""

MBARRIER = r"""
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// one arrival (release: this thread's earlier shared-memory writes are visible to whoever waits on the phase)
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(bar) : "memory");
}
// wait (acquire) until the phase of the given parity has completed
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
""" + _TRY_WAIT + """
}
"""


EXPECT_TX = r"""// this thread's arrival on the barrier's current phase, announcing `bytes` of copies that will complete on it
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" :: "r"(bar), "r"(bytes) : "memory");
}
"""


# the bulk-copy engine's L2 prefetch (cp.async.bulk family, sm_90 with the tma capability) and the SM count
L2_PREFETCH = r"""// asks the L2 for `bytes` (a multiple of 16, 16-byte aligned) at p, without waiting or any shared memory
__device__ __forceinline__ void l2_prefetch(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" :: "l"(p), "r"(bytes) : "memory");
}
__device__ __forceinline__ uint32_t sm_count() { uint32_t n; asm("mov.u32 %0, %%nsmid;" : "=r"(n)); return n; }
"""


BULK_G2S = r"""// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to this block's shared memory
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// orders this thread's (and, after a warp sync, its warp's) generic-proxy shared-memory accesses before its later
// bulk copies (async proxy): a slot is read into registers before the copy that refills it
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
"""


BULK_COPY = r"""
// ---- bulk copies (sm_90: the TMA engine, no tensor map): global -> shared, completion counted in bytes on an mbarrier
""" + EXPECT_TX + BULK_G2S


TENSOR_COPY = r"""
// ---- tensor copies (sm_90: the TMA engine with a tensor map): a 2-D box of a global tensor into shared memory,
// laid out (and swizzled) as the map says, elements past the tensor's edges as zeros; completion counted in bytes on
// an mbarrier. The map (cuTensorMapEncodeTiled, 128 opaque bytes) is a __grid_constant__ kernel parameter.
struct __align__(64) TmaMap { unsigned long long bits[16]; };
// the box whose first element is (inner coordinate c0, outer coordinate c1) into shared memory at dst
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
"""


# a producer thread's wait for a released slot: as mbar_wait, sleeping ~64 ns between polls. The producer warp shares
# an SM sub-partition with consumer warps, and its tight polling took their issue slots (H200, the
# two-warpgroup W4A16 form at 128 tokens: 28672x8192 M=128 102.1 -> 98.5 us with stream-K, 102.4 -> 98.8 without;
# no change at 256 tokens)
MBAR_WAIT_POLITE = r"""
__device__ __forceinline__ void mbar_wait_polite(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (true) {
""" + _TRY_WAIT + r"""
    if (done) return;
    __nanosleep(64);
  }
}
"""


def tensor_copy_helpers(caps, mbarriers: bool = True) -> str:
    """The expect-tx arrival and the 2-D tensor copy, with the mbarrier helpers unless a prelude already has them
    (the profile must declare tma and mbarrier)."""
    if caps is not None and not (caps.memory.tma and caps.memory.mbarrier):
        raise ValueError(f"{caps.name} does not declare tma and mbarrier, which the tensor copies use")
    return (MBARRIER if mbarriers else "") + EXPECT_TX + TENSOR_COPY


def stream_bulk_prelude(backend: Backend, request: HelperRequest) -> str:
    """Helpers of the stream kernel whose weights, tables and activations arrive by bulk copy: those of the stream
    kernel, mbarriers and the bulk copy (the profile must declare tma and mbarrier)."""
    caps = request.caps
    if caps is not None and not (caps.memory.tma and caps.memory.mbarrier):
        raise ValueError(f"{caps.name} does not declare tma and mbarrier, which the bulk-copy stream kernel uses")
    return backend.prelude(request) + "\n" + MBARRIER + BULK_COPY
