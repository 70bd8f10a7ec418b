"""The register-A kernel's frame: its constants (namespace cfg), its parameter list (that of the mma.sync tile kernel,
so that the same launcher and prepared weights serve both), the start of its body (the block's tile, its k range,
the activation slots and their loads), and the start of the tile body (the weights' addresses, the tables, the
accumulators). The main loop (stage_loop) and the epilogue follow; with stream-K the tile body runs once per segment
(streamk.segment_open / SEGMENT_CLOSE around it, ``indented``)."""
from __future__ import annotations

from humming.core.common.emit import Template

HEAD = Template("""// ===== humming generated kernel: ${name}
// ${summary}
${prelude}

namespace cfg {
constexpr int BT = ${bt}, BC = ${bc}, BK = ${bk}, STAGES = ${stages};   // tokens, channels, k per stage
${threads_line}${producer_threads}
constexpr int RASTER = ${raster};             // token tiles per rasterization group (0: launch order)${cluster_line}${tail_line}
constexpr int LOOKAHEAD = STAGES - 2;    // activation stages loading while one is multiplied and one may still be read
constexpr int PF = ${pf}, R = PF + 1;           // weight atoms in flight per lane, register ring size
constexpr int U = ${unroll};                 // stages per trip of the main loop (unrolled: ring slots are constants)
constexpr int X_BYTES = BT * BK * 2;     // one activation tile: BT rows x 128 bytes
constexpr int ATOM_WORDS = 32 * 4 * 4;   // 32-bit words of one 64 x 64 int4 atom (2 KB)
constexpr int OUT_LD = BC + ${out_pad};         // staging pitch (16-bit values): 272 bytes, conflict-free stores
static_assert(BK == 64, "one 128-byte swizzle row of 16-bit values per token per stage");
static_assert(X_BYTES % 1024 == 0, "1024-byte aligned activation tiles");
static_assert(WG_ACC_REGS == BT / 2, "m64nBT accumulators: BT/2 registers per thread");
static_assert(LOOKAHEAD >= 2, "at least four stages");
static_assert(BT * OUT_LD * 2 <= STAGES * X_BYTES, "the staging tile fits in the activation slots");
static_assert((BT * (BC / 8)) % THREADS == 0, "whole copy-out passes");
}
${schedule}
extern "C" __global__ void __launch_bounds__(cfg::${block_threads}, ${blocks_per_sm}) ${name}(
    const uint16_t* __restrict__ A,      // activations [M, K], row-major (K-major)
    const uint32_t* __restrict__ B,      // int4 codes in the mma.sync atom layout (humming.core.common.layout)
    const uint16_t* __restrict__ S,      // group scales [K/group, N] (act type, permuted columns) or null
    const uint16_t* __restrict__ Z,      // -(magic + zero) [K/group or 1, N] (act type, permuted columns) or null
    const float* __restrict__ CS,        // per-channel fp32 scale [N] or null
    const uint16_t* __restrict__ BIAS,   // [N] or null
    uint16_t* __restrict__ C,            // output [M, N], row-major
    float* __restrict__ WS, int* __restrict__ CNT,   ${workspace_doc}
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS${params_end}
  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, w = warp & 3;
  const int g = lane >> 2, q = lane & 3;
${tile}${pdl_trigger}
  ${ktiles}
${slab}  // the swizzle repeats every 1024 bytes of address: start on such a boundary (1 KiB is reserved)
  const uint32_t x0 = (smem_u32(smem) + 1023u) & ~1023u;         // STAGES activation slots, then the staging tile
${desc0}
${load_stages}
""", producer_threads="", cluster_line="", tail_line="", schedule="", pdl_trigger="", slab="", desc0="")

# the tile body's start: this warpgroup's slab (per segment with stream-K) and staging tile, the weights' address,
# the tables, the weight ring, the accumulators
TILE_START = Template("""${slab}  ${weights_doc}
  ${wsrc}
  ${tab}                     // tables: n8 tiles 2w (low half), 2w + 1 (high)${row_ptrs}
${zero_decl}${ring}${fixed}

  float acc[WG_ACC_REGS];
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) acc[i] = 0.0f;${fold_decl}
${desc0}
""", slab="", row_ptrs="", ring="", fixed="", fold_decl="", desc0="")

SLAB = "  const int slab = n0 / 64 + wg;                                 // this warpgroup's 64-channel atom row\n"
# N an odd number of 64-channel slabs (the MoE form): warpgroup 1 of the last block repeats the last slab (its
# channels past N are neither scaled from the tables nor stored)
RAGGED_SLAB = ("  const int slab = min(n0 / 64 + wg, N / 64 - 1);               // this warpgroup's 64-channel atom row "
               "(the last block of an odd slab count: warpgroup 1 repeats the last, nothing of it is stored)\n")


def ragged_n(plan) -> bool:
    """A 128-channel form over an odd number of 64-channel slabs: its last block holds one (the MoE form only)."""
    return plan.tiles.bn == 128 and plan.layout.n % 128 != 0
STAGING_AFTER_SLOTS = "  const uint32_t stg0 = x0 + STAGES * X_BYTES;                  // the staging tile\n"


def indented(text: str, by: str = "  ") -> str:
    """``text`` with every non-empty line indented by ``by`` (the tile body inside the stream-K segment loop)."""
    return "\n".join(by + ln if ln else ln for ln in text.split("\n"))
