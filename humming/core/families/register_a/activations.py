"""The register-A kernel's B operand: how each activation stage (BT token rows x 64 k, 128-byte-swizzled K-major
slots of X_BYTES) gets into shared memory. cp.async copies by every thread; one TMA tensor copy per stage by thread
0; in the small form's clusters, a producer warp's multicast copies shared by the cluster's blocks; in the
two-warpgroup form, a producer warpgroup that runs ahead of the consumers."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.wgmma import PRODUCER_COPIES
from humming.core.families.register_a import pair_cluster

# cp.async by every thread: ROWS token rows per pass (256 threads: 32, the small form's 128: 16), rows past M
# zero-filled; ``first_k``: the offset of the block's first k atom (the small form's split starts at kt0)
_CP_ASYNC_STAGE = Template("""  // activations: thread tid copies chunk tid % 8 of token rows tid / 8 + ${rows} i ((row mod 8) is the same for every i)
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const uint16_t* a_src = A + (size_t)(m0 + lrow) * K + ${first_k}lch * 8;
  auto load_stage = [&](int slot, int kt) {
    const uint32_t base = x0 + slot * X_BYTES;
    #pragma unroll
    for (int i = 0; i < BT / ${rows}; ++i) {
      const bool ok = m0 + lrow + ${rows} * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(base + lswz + i * ${rows} * 128, ok ? a_src + ((size_t)${rows} * i * K + kt * BK) : A, ok);
    }
  };
""", first_k="")

LOAD_STAGE = _CP_ASYNC_STAGE.fill(rows="32")  # the two-warpgroup form's
SMALL_LOAD_STAGE = _CP_ASYNC_STAGE.fill(rows="16", first_k="(size_t)kt0 * BK + ")  # the small form's


def tma_load_stage(k_coord: str) -> str:
    """Activation stages by TMA: thread 0 arms slot ``slot``'s mbarrier with the tile's bytes and starts one tensor
    copy of BT token rows x 64 k (the map's box) at k element ``k_coord``; the map swizzles it like swz128 (128-byte
    rows, 16-byte chunk c of row r at c ^ (r % 8), in 1024-byte aligned slots) and zero-fills rows past M."""
    return f"""  // activations: one tensor copy per stage (thread 0), completing on the slot's mbarrier
  __shared__ __align__(8) uint64_t xbar[STAGES];
  const uint32_t xbar0 = smem_u32(xbar);
  if (tid == 0) {{
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(xbar0 + 8 * s, 1);
    mbar_init_fence();
  }}
  __syncthreads();
  auto load_stage = [&](int slot, int kt) {{
    if (tid == 0) {{
      mbar_expect_tx(xbar0 + 8 * slot, X_BYTES);
      tma_load_2d(x0 + slot * X_BYTES, &XMAP, {k_coord}, m0, xbar0 + 8 * slot);
    }}
  }};
"""


# the cluster variant of the small-M form (RegisterATiles.cluster): CLUSTER blocks of adjacent slabs (the same token tile
# and split) share each activation stage. Stage kt is copied by the block of rank kt % CLUSTER, by one multicast
# tensor copy into the same slot of every block of the cluster (one read from L2 instead of CLUSTER), completing on
# each block's own slot mbarrier ("full"). A slot's copying block is fixed (STAGES % CLUSTER == 0); before it refills
# the slot it waits on its "empty" mbarrier for the releases of all 4 x CLUSTER consumer warps (mbar_arrive_peer after
# their wgmma wait). A fifth warp does the copies, so no consumer ever waits for a peer: a slot is refilled as soon as
# the slowest block of the cluster released it, STAGES - 2 stages before it is needed.
CLUSTER_SETUP = """  // activation slots: full mbarriers [0, STAGES) (this block's copy landed), empty [STAGES, 2 STAGES) (released)
  __shared__ __align__(8) uint64_t xbar[2 * STAGES];
  const uint32_t xbar0 = smem_u32(xbar);
  if (tid == 0) {
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(xbar0 + 8 * s, 1);
      mbar_init(xbar0 + 8 * (STAGES + s), 4 * CLUSTER);  // every consumer warp of every block of the cluster
    }
    mbar_init_fence();
  }
  cluster_sync();  // every block's mbarriers exist before a peer copies into its slots or arrives on them
"""


def cluster_producer(k_coord: str, pdl: bool) -> str:
    """Warp 4's loop (one lane): for every stage kt of the split, arm this block's full mbarrier of its slot with the
    tile's bytes (once the slot's previous phase has completed), and where this block copies kt, wait until every
    warp of the cluster released the slot, then multicast the tile."""
    wait = "      pdl_wait();  // the previous kernel's outputs (our activations) are visible\n" if pdl else ""
    return f"""  if (warp == 4) {{  // the producer warp: every activation stage of this block, and the cluster's share of copies
    if (lane == 0) {{
{wait}      const int crank = (int)cluster_rank();
      for (int kt = 0; kt < ktiles; ++kt) {{
        const int slot = kt % STAGES;
        const uint32_t phase = (uint32_t)(kt / STAGES - 1) & 1u;  // the slot's previous use (kt >= STAGES)
        if (kt >= STAGES) mbar_wait(xbar0 + 8 * slot, phase);  // its last tile landed here: arm the next phase
        mbar_expect_tx(xbar0 + 8 * slot, X_BYTES);  // this block's slot receives the whole tile, whoever copies it
        if (kt % CLUSTER == crank) {{
          if (kt >= STAGES) mbar_wait(xbar0 + 8 * (STAGES + slot), phase);  // every warp released it
          tma_load_2d_multicast(x0 + slot * X_BYTES, &XMAP, {k_coord}, m0, xbar0 + 8 * slot,
                                (uint16_t)((1u << CLUSTER) - 1));
        }}
      }}
    }}
    return;  // the consumers meet at consumer_sync() (named barrier 1) from here on
  }}
"""


# the producer warpgroup's first statement under PDL: its first copy reads activations, so it waits for the previous
# kernel (the consumers' weight prefetch runs before their own wait, and everything they write comes after it)
PDL_PRODUCER_WAIT = "      pdl_wait();  // the previous kernel's outputs (our activations) are visible\n"


def producer_warpgroup(first_atom: str, pdl: bool, pair: bool) -> str:
    """The two-warpgroup form's producer warpgroup (humming.core.common.wgmma.PRODUCER_COPIES), polling its slots'
    releases politely (mbar_wait_polite: the consumer warps of its SM sub-partition keep their issue slots);
    ``first_atom``: the block's first k atom ("": atom 0; the tail's "kt0 + "); ``pair``: the pair's barriers and
    multicast copies (humming.core.families.register_a.pair_cluster)."""
    copy = f"tma_load_2d(x0 + s * X_BYTES, &XMAP, {'(' + first_atom + 'kt)' if first_atom else 'kt'} * BK, m0, xbar0 + 8 * s);"
    slots = {"wait": "mbar_wait_polite", "copier_start": PDL_PRODUCER_WAIT if pdl else "", "copy": copy}
    if pair:
        slots.update(pair_cluster.BARRIERS, copy=pair_cluster.multicast_copy(copy))
    return PRODUCER_COPIES.fill(**slots)
