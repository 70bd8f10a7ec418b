"""Thread-block clusters (sm_90 and later): cluster rank and barrier, distributed shared memory (peer addresses and
stores), peer mbarrier arrivals and multicast tensor copies; and programmatic dependent launch (griddepcontrol)."""
from __future__ import annotations

CLUSTER_BASICS = r"""
// ---- thread-block clusters (sm_90 and later): blocks of one cluster run together and reach each other's shared memory.
// This block's rank in its cluster
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)); return r;
}
// every thread of every block of the cluster (release / acquire: shared-memory writes before are seen after)
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
"""


CLUSTER_DSMEM = r"""// distributed shared memory: the address of this block's shared-memory address `addr` in block `rank` of the
// cluster, and a 16-byte store there (seen by that block after a cluster_sync)
__device__ __forceinline__ uint32_t cluster_peer_addr(uint32_t addr, uint32_t rank) {
  uint32_t r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank)); return r;
}
__device__ __forceinline__ void st_cluster_f32x4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
"""


CLUSTER_MULTICAST = r"""// one arrival on the mbarrier at the same shared-memory offset in block `rank` of the cluster. It releases a slot
// whose readers were wgmmas already waited for (wgmma.wait_group), and the refill is a tensor copy: the default
// (release, CTA scope) arrival suffices; .release.cluster would add a GPU-wide memory barrier (MEMBAR.GPU, which
// waits for this warp's weight loads in flight) to every stage.
__device__ __forceinline__ void mbar_arrive_peer(uint32_t bar, uint32_t rank) {
  asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
               " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" :: "r"(bar), "r"(rank) : "memory");
}
// tma_load_2d into the same shared-memory offset of every block in `mask` (bit i: rank i), each completing on its
// own mbarrier at offset `bar`: one read of the box from L2 for all of them
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar,
                                                      uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;\n"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
"""


def cluster_dsmem_helpers(caps) -> str:
    """Cluster rank and barrier, and stores into a peer block's shared memory, for a profile that declares
    cluster_dsmem (ValueError otherwise)."""
    if caps is not None and not caps.memory.cluster_dsmem:
        raise ValueError(f"{caps.name} does not declare cluster_dsmem (thread-block clusters, distributed shared memory)")
    return CLUSTER_BASICS + CLUSTER_DSMEM


def cluster_multicast_helpers(caps) -> str:
    """Cluster rank and barrier, peer mbarrier arrivals and the multicast tensor copy (after tensor_copy_helpers),
    for a profile that declares cluster_multicast (ValueError otherwise)."""
    if caps is not None and not caps.memory.cluster_multicast:
        raise ValueError(f"{caps.name} does not declare cluster_multicast (thread-block clusters, multicast tensor copies)")
    return CLUSTER_BASICS + CLUSTER_MULTICAST


GRID_DEPENDENCY = r"""
// ---- programmatic dependent launch (griddepcontrol, sm_90 and later; no-ops without a PDL launch)
// let the next kernel of the stream start its prologue on SMs this grid frees
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// wait until the previous kernel has finished and its writes are visible (before reading its outputs or writing)
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
"""


def grid_dependency_helpers(caps) -> str:
    """The PDL helpers, for a profile that declares griddepcontrol (ValueError otherwise)."""
    if caps is not None and not caps.memory.griddepcontrol:
        raise ValueError(f"{caps.name} does not declare griddepcontrol (programmatic dependent launch)")
    return GRID_DEPENDENCY
