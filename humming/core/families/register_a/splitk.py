"""The register-A forms that split K and add the parts: the small form's splits over the grid's z (through a
workspace, or in a thread-block cluster through the first block's shared memory), and the two-warpgroup form's tail
option (the last TAIL tiles run as TAIL_SPLITS blocks each, a quarter of K apiece: their tile, k range and fix-up)."""
from __future__ import annotations

from humming.core.common.wgmma import add_partial, claim_tile, store_partial


# split-K of the small-M form: every block stores its fp32 partial (common.wgmma.store_partial; the channel-major
# layout before, one 4-byte store per register N apart, cost up to a third of the kernel: 8192x8192 M=64 26.3 us, 20.9
# without any fix-up), WS[tile][split][chunk][thread]; the last block of the tile (self-resetting counter) adds the
# splits 0, 1, ... in that order.
def small_splitk(own: bool, sync: str = "__syncthreads") -> str:
    """The small form's split-K step (``own``: the block's own partial added from its registers, see
    common.wgmma.claim_tile; ``sync``: the barrier of the threads that hold accumulators)."""
    keep = "own" if own else ""
    return ("""  if (gridDim.z > 1) {
    __shared__ int last_block;
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_FLOATS = WG_ACC_REGS * 128;  // one split's partial of the tile
    float* tile_ws = WS + (size_t)(blockIdx.x * gridDim.y + blockIdx.y) * gridDim.z * SPLIT_FLOATS + tid * 4;
""" + store_partial("tile_ws + (size_t)blockIdx.z * SPLIT_FLOATS", "512")
        + claim_tile("CNT + blockIdx.x * gridDim.y + blockIdx.y", "1", "(int)gridDim.z", sync, "return;", own=keep)
        + """    #pragma unroll 1
    for (int z = 0; z < (int)gridDim.z; ++z) {  // rolled: the loads of one pass overlap (one L2 round trip per split)
""" + add_partial("tile_ws + (size_t)z * SPLIT_FLOATS", "512", own=keep, is_own="z == (int)blockIdx.z") + """    }
  }
""")


# split-K of the small-M form in a thread-block cluster (1 x 1 x splits; Plan.cluster_splits): once every block of the
# cluster is past its main loop, the first block's activation slots are free; the other splits store their
# accumulators there (register order, [split - 1][chunk v][thread] x 16 bytes), and the first block adds them in split
# order before the slots become its staging tile. No workspace, no fence, no counter.
SMALL_SPLITK_CLUSTER = """  if (gridDim.z > 1) {
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_BYTES = WG_ACC_REGS * 128 * 4;
    const uint32_t rank = cluster_rank();  // = blockIdx.z (the cluster spans the grid's z)
    cluster_sync();  // every block of the cluster is past its main loop: the first block's slots are free
    if (rank > 0) {
      const uint32_t dst = cluster_peer_addr(x0, 0) + (rank - 1) * SPLIT_BYTES + tid * 16;
      #pragma unroll
      for (int v = 0; v < CHUNKS; ++v)
        st_cluster_f32x4(dst + v * 2048, acc[4 * v], acc[4 * v + 1], acc[4 * v + 2], acc[4 * v + 3]);
    }
    cluster_sync();  // the other splits' partials are in the first block
    if (rank > 0) return;
    #pragma unroll 1
    for (int z = 1; z < (int)gridDim.z; ++z)
      #pragma unroll
      for (int v = 0; v < CHUNKS; ++v) {
        uint32_t r[4];
        lds_128(r, x0 + (z - 1) * SPLIT_BYTES + v * 2048 + tid * 16);
        #pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * v + e] += u32_as_f32(r[e]);
      }
    __syncthreads();  // every partial is read before the staging tile overwrites the slots
  }
"""

# the small form's k range: a split of k_per_split over the grid's z
SMALL_KTILES = ("const int katoms = K / BK, ktiles = k_per_split / BK;   // k atoms of a slab, of this split\n"
                "const int kt0 = blockIdx.z * ktiles;                        // this split's first k atom")


# the tail option of the two-warpgroup form (launch order): blocks 0 .. tiles - TAIL - 1 take whole tiles (token tile
# fastest), the rest are the TAIL_SPLITS quarters of K of each of the last TAIL tiles
TAIL_TILE = """  // tail: blocks before `full` take whole tiles; each of the last TAIL tiles runs as TAIL_SPLITS blocks
  const int tiles_x = (M + BT - 1) / BT, full = tiles_x * (N / BC) - TAIL, unit = blockIdx.y;
  const int tail = unit < full ? -1 : (unit - full) / TAIL_SPLITS;   // this block's tail tile, or -1
  const int tile = tail < 0 ? unit : full + tail;
  const int m0 = tile % tiles_x * BT, n0 = tile / tiles_x * BC;"""
TAIL_KTILES = ("const int katoms = K / BK, ktiles = tail < 0 ? katoms : katoms / TAIL_SPLITS;   // k atoms of a slab, of "
               "this block\n"
               "const int zsplit = tail < 0 ? 0 : (unit - full) % TAIL_SPLITS, kt0 = zsplit * ktiles;   // this block's "
               "first k atom")


# split-K of the tail tiles (the consumer warpgroups; the producer has returned): as small_splitk, for 256 threads,
# WS[tail tile][split][chunk v][thread], a counter per tail tile
def tail_splitk(own: bool) -> str:
    """The tail tiles' split-K step (``own``: as small_splitk's)."""
    keep = "own" if own else ""
    return ("""  if (tail >= 0) {
    __shared__ int last_block;
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_FLOATS = WG_ACC_REGS * THREADS;  // one split's partial of the tile
    float* tile_ws = WS + (size_t)tail * TAIL_SPLITS * SPLIT_FLOATS + tid * 4;
""" + store_partial("tile_ws + (size_t)zsplit * SPLIT_FLOATS", "4 * THREADS")
        + claim_tile("CNT + tail", "1", "TAIL_SPLITS", "consumer_sync", "return;", own=keep)
        + """    #pragma unroll 1
    for (int z = 0; z < TAIL_SPLITS; ++z) {  // in split order: the sum does not depend on which block came last
""" + add_partial("tile_ws + (size_t)z * SPLIT_FLOATS", "4 * THREADS", own=keep, is_own="z == zsplit") + """    }
  }
""")
