"""The CUDA C++ of the MoE WnA16 kernel: the mma.sync WnA16 tile kernel (humming.core.families.mma_wna16.generator)
with its rows taken from a routing (humming.core.moe.routing).

A block takes token tile mb, entries [mb*BM, +BM) of the routing's sorted slots, all of one expert (EXPERT_IDS[mb];
-1 or past the used length NPAD: the block has nothing to do), and channel tile nb, channels [nb*BN, +BN) (MOE_PLACE
orders the tiles). Row r of the block is slot
s = SORTED[x*BM + r] (the sentinel num_slots pads an expert's run): it reads row s / a_div of A (a_div = top_k when
A is the tokens [T, K], 1 when it holds one row per slot) and writes row s of C [slots, n_out], times the slot's
router weight TOPK_W[s] where given. The expert's weights, tables, bias and global factor sit at fixed strides."""
from __future__ import annotations

from humming.core.families.mma_wna16.generator import RowSource, tile_kernel_source

MOE_PARAMS = """,
    const int* __restrict__ SORTED,      // routing: slot of each entry, by expert, padded with num_slots
    const int* __restrict__ EXPERT_IDS,  // routing: expert of each block of BM entries (-1: none)
    const int* __restrict__ NPAD,        // routing: entries in use
    const float* __restrict__ TOPK_W,    // router weight of each slot, or null
    const float* __restrict__ ES,        // each expert's global factor [E]
    int num_slots, int a_div, int KA, int n_out, int b_stride, int s_stride, int z_stride, int raster"""

# A 1-D grid of token tiles x channel tiles: groups of `raster` token tiles take every channel tile in turn, token
# tiles fastest, so that a group's activations stay in the L2 while its experts' weights stream (0: one group)
def moe_place(width: str, ragged: bool = False) -> str:
    """The block's (mb, nb) in the 1-D grid, channel tiles of ``width`` (a C constant; ``ragged``: the last one
    partly past N)."""
    n_tiles = f"(N + {width} - 1) / {width}" if ragged else f"N / {width}"
    return f"""
  const int n_tiles = {n_tiles}, m_tiles = gridDim.x / n_tiles;
  const int group = raster > 0 && raster < m_tiles ? raster : m_tiles;
  const int first_m = blockIdx.x / (group * n_tiles) * group;
  const int group_rows = min(group, m_tiles - first_m);
  const int in_group = blockIdx.x - first_m * n_tiles;
  const int mb = first_m + in_group % group_rows, nb = in_group / group_rows;
"""


MOE_PLACE = moe_place("cfg::BN")


def routed_rows(rows: str) -> str:
    """A block's expert, the slot of each of its ``rows`` rows and the row of A each reads (-1: a padding row), in
    shared memory; returns early for a block past the routing's used length or of no expert (both block-uniform).
    Needs m0, mb, tid and THREADS; ends before the barrier that publishes the arrays."""
    return f"""  // this block's expert, the slot of each of its rows and the row of A it reads (-1: a padding row)
  __shared__ int slot_of_row[{rows}], a_row[{rows}];
  if (m0 >= NPAD[0]) return;
  const int expert = EXPERT_IDS[mb];
  if (expert < 0) return;
  for (int r = tid; r < {rows}; r += THREADS) {{
    const int s = SORTED[m0 + r];
    slot_of_row[r] = s;
    a_row[r] = s < num_slots ? s / a_div : -1;
  }}
"""

# the block's expert's weights, tables, bias and global factor (each at its fixed stride)
EXPERT_OPERANDS = """  B += (size_t)expert * b_stride;
  if (S) S += (size_t)expert * s_stride;
  if (Z) Z += (size_t)expert * z_stride;
  if (CS) CS += (size_t)expert * N;
  if (BIAS) BIAS += (size_t)expert * N;
  out_scale *= ES[expert];
"""

MOE_SETUP = """
  // this block's expert and the slot of each of its rows
  __shared__ int slot_of_row[BM];
  if (m0 >= NPAD[0]) return;
  const int expert = EXPERT_IDS[mb];
  if (expert < 0) return;
  for (int r = tid; r < BM; r += THREADS) slot_of_row[r] = SORTED[m0 + r];
""" + EXPERT_OPERANDS + """  __syncthreads();
"""

# A row per slot (a_div 1) or per token (a_div top_k); columns past the real K (KA) read as zeros
MOE_ROWS = """\
      const int slot = slot_of_row[r];
      const bool ok = slot < num_slots && k0 + ch * 8 < KA;
      const uint16_t* src = A + (ok ? (size_t)(slot / a_div) * KA + k0 + ch * 8 : 0);
"""

INDEXED = RowSource(params=MOE_PARAMS, setup=MOE_SETUP, rows=MOE_ROWS, head=MOE_PLACE, block_m="mb", block_n="nb")


def moe_kernel_source(plan, backend, caps=None) -> str:
    return tile_kernel_source(plan, backend, caps, rows=INDEXED)
