"""Generates the CUDA C++ of a WnA16 mma-family kernel from a Plan.

The kernel body below is written only in terms of named helpers (mma_k16, ldmatrix_x4,
copy_16_async, dq_raw, act2_add, ...); the device backend supplies their definitions.

Work split. Block (x, y, z) computes rows [x*BM, +BM) and columns [y*BN, +BN) of C over the K
range of split z. Warp (wm, wn, wk) owns a (TM*16) x (TA*64) sub-tile and every WARPS_K-th
64-wide k atom of each stage; warps with wk > 0 fold their sums into wk == 0 at the end.
Split-K partials go to a fp32 workspace; the last block of a tile (found with a self-resetting
counter) adds them in a fixed order, so results are deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.common.layout import pair_index_c
from humming.core.common.mma_pieces import (
    PIPELINE_HEAD,
    STAGE_LOADER_HEAD,
    TILE_PLACE,
    gs_epilogue_parts,
    helper_prelude,
    pair_decode,
    splitk_epilogue,
    tile_place,
)

# The rows of A a dense tile reads: rows m0 .. m0 + BM of x [M, K] (those past M read as zeros).
DENSE_ROWS = """\
      const bool ok = m0 + r < M;
      const uint16_t* src = A + (size_t)(ok ? m0 + r : 0) * K + k0 + ch * 8;
"""


# A padded weight (humming.core.quant.padding): rows of x [M, K_ACT]; columns past K_ACT read as zeros.
PADDED_ROWS = """\
      const bool ok = m0 + r < M && k0 + ch * 8 < K_ACT;
      const uint16_t* src = ok ? A + (size_t)(m0 + r) * K_ACT + k0 + ch * 8 : A;
"""


@dataclass(frozen=True)
class RowSource:
    """Where a tile kernel's rows come from and go to, other than rows m0 .. m0 + BM of A and C (the MoE forms,
    humming.core.families.moe_wna16): kernel parameters after the dense ones, the block's tile (``head`` code and
    the ``block_m`` / ``block_n`` expressions), code after the block's placement (``setup``), the A-row load (``r``: the block row, ``ch``: the 16-byte chunk, ``k0``: the stage's K; sets ``ok`` and
    ``src``) and whether the epilogue stores through ``slot_of_row`` (mma_pieces.splitk_epilogue)."""

    params: str
    setup: str
    rows: str
    indexed: bool = True
    head: str = ""  # code before the placement, which may compute the tile's place
    block_m: str = "blockIdx.x"  # the block's token tile (C expression)
    block_n: str = "blockIdx.y"  # the block's channel tile


def tile_kernel_source(plan, backend, caps=None, rows: RowSource | None = None) -> str:
    """The tile kernel of a WnA16 plan (path dequant-to-activation); ``rows``: another source of its rows (MoE)."""
    t = plan.tiles
    lay = plan.layout
    dec = lay.decode
    cb = dec.container
    ppw = 16 // cb
    prelude = helper_prelude(plan, backend, caps, dec)

    s_group = lay.scale_group
    z_group = lay.zero_group
    s_rows = 0 if not s_group else max(1, t.bk // s_group)
    z_rows = 0 if z_group == 0 else (1 if z_group < 0 else max(1, t.bk // z_group))

    def row_expr(group: int, rows: int, what: str) -> str:
        # global row of a scale/zero table for local row r of stage starting at k0
        if group < 0:
            return "0"
        return f"(k0 / {group} + r)" if rows > 1 else f"(k0 / {group})"

    def local_row(group: int) -> str:
        if group < 0 or group >= t.bk:
            return "0"
        return f"(kk / {group})"

    pick, decode_body, zero_const_bits = pair_decode(lay, bool(s_rows), bool(z_rows))
    load_words, word = _tile_weight_words(cb, lay.tile_major)

    src = f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};
constexpr int WARPS_M = {t.warps_m}, WARPS_N = {t.warps_n}, WARPS_K = {t.warps_k};
constexpr int TM = BM / (16 * WARPS_M);        // m16 tiles per warp
constexpr int TA = BN / (64 * WARPS_N);        // n64 atoms per warp
constexpr int THREADS = 32 * WARPS_M * WARPS_N * WARPS_K;
constexpr int CB = {cb};                         // container bits per code
constexpr int ATOM_WORDS = 128 * CB;             // 32-bit words per 64x64 weight atom
constexpr int KATOMS = BK / 64, NATOMS = BN / 64;
constexpr int S_ROWS = {s_rows}, Z_ROWS = {z_rows};
constexpr int A_BYTES = BM * BK * 2;
constexpr int B_BYTES = KATOMS * NATOMS * ATOM_WORDS * 4;
constexpr int S_BYTES = S_ROWS * BN * 2;
constexpr int Z_BYTES = Z_ROWS * BN * 2;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES + S_BYTES + Z_BYTES;
static_assert(KATOMS % WARPS_K == 0, "k atoms per stage must split evenly across warps");
static_assert(STAGE_BYTES % 128 == 0, "stages stay 128-byte aligned");{padded_dims(plan)}
}}

extern "C" __global__ void __launch_bounds__(cfg::THREADS) {plan.kernel_name}(
    const uint16_t* __restrict__ A,      // activations [M, K], row-major
    const uint32_t* __restrict__ B,      // weights, atom layout
    const uint16_t* __restrict__ S,      // group scales [K/group, N] (permuted columns) or null
    const uint16_t* __restrict__ Z,      // -(magic + zero) [rows, N] (permuted columns) or null
    const float* __restrict__ CS,        // per-column fp32 scale or null
    const uint16_t* __restrict__ BIAS,   // [N] or null
    uint16_t* __restrict__ C,            // output [M, N], row-major
    float* __restrict__ WS,              // split-K partials [splits, gridDim.x*BM, N]
    int* __restrict__ CNT,               // one counter per output tile, zero between launches
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS{rows.params if rows else ""}) {{        {gs_epilogue_parts(plan, "row")[0]}

{rows.head + tile_place(rows.block_m, rows.block_n) + rows.setup if rows else TILE_PLACE}{STAGE_LOADER_HEAD}    // activations: BM rows x BK/8 chunks of 16 bytes, chunk index XOR-swizzled by row (conflict-free ldmatrix)
    #pragma unroll
    for (int c = tid; c < BM * (BK / 8); c += THREADS) {{
      const int r = c / (BK / 8), ch = c % (BK / 8);
{rows.rows if rows else PADDED_ROWS if plan.padded else DENSE_ROWS}      copy_16_async(base + r * BK * 2 + ((ch ^ (r & 7)) * 16), src, ok);
    }}
    // weights: NATOMS x KATOMS atoms, each contiguous in global memory
    #pragma unroll
    for (int c = tid; c < NATOMS * KATOMS * (ATOM_WORDS / 4); c += THREADS) {{
      const int a = c / (ATOM_WORDS / 4), w = c % (ATOM_WORDS / 4);
      const int na = a / KATOMS, ka = a % KATOMS;
      const uint32_t* src = B + ((size_t)(n0 / 64 + na) * katoms_total + k0 / 64 + ka) * ATOM_WORDS + w * 4;
      copy_16_async(base + A_BYTES + ((ka * NATOMS + na) * ATOM_WORDS + w * 4) * 4, src, true);
    }}
{_table_load("S", "S_ROWS", "A_BYTES + B_BYTES", row_expr(s_group, s_rows, "S")) if s_rows else ""}\
{_table_load("Z", "Z_ROWS", "A_BYTES + B_BYTES + S_BYTES", row_expr(z_group, z_rows, "Z")) if z_rows else ""}\
  }};

  float acc[TM][TA * 8][4];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
{zero_const_bits}
{PIPELINE_HEAD}    #pragma unroll
    for (int i = 0; i < KATOMS / WARPS_K; ++i) {{
      const int ka = i * WARPS_K + wk;
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks) {{
        const int kk = ka * 64 + ks * 16;  // k offset inside the stage
        uint32_t a[TM][4];
        #pragma unroll
        for (int tm = 0; tm < TM; ++tm) {{
          const int row = (wm * TM + tm) * 16 + (lane & 15);
          const int ch = kk / 8 + (lane >> 4);
          ldmatrix_x4(a[tm], base + row * BK * 2 + ((ch ^ (row & 7)) * 16));
        }}
        #pragma unroll
        for (int ta = 0; ta < TA; ++ta) {{
          const int na = wn * TA + ta;
{load_words}
{_per_tile_table("S", "ss", "A_BYTES + B_BYTES", local_row(s_group)) if s_rows else ""}\
{_per_tile_table("Z", "zz", "A_BYTES + B_BYTES + S_BYTES", local_row(z_group)) if z_rows else ""}\
          #pragma unroll
          for (int nt = 0; nt < 8; ++nt) {{
            uint32_t b[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) {{
              const int p = {pair_index_c("ks", "nt", "r", lay.tile_major)};  // the lane's pair index in the atom
              uint32_t v = dq_raw({word}, p % {ppw});
              {pick}
              {decode_body}
              b[r] = v;
            }}
            #pragma unroll
            for (int tm = 0; tm < TM; ++tm) mma_k16(acc[tm][ta * 8 + nt], a[tm], b[0], b[1]);
          }}
        }}
      }}
    }}
  }}
  copy_wait<0>();
  __syncthreads();

{splitk_epilogue('acc', row_scale='GS' if plan.row_scale else None, indexed=bool(rows and rows.indexed),
                 padded=plan.padded)}}}
"""
    return src


def padded_dims(plan) -> str:
    """The real sizes of a padded weight's GEMM as constants (none for a weight of whole atoms)."""
    if not plan.padded:
        return ""
    return (f"\nconstexpr int N_OUT = {plan.n_out}, K_ACT = {plan.k_act};  // the real N and K of the padded weight "
            f"(C's and A's row lengths)")


def _table_load(ptr: str, rows: str, offset: str, row_expr: str) -> str:
    """cp.async of the scale or zero rows a stage needs (BN values each, 16 bytes per copy)."""
    return f"""\
    #pragma unroll
    for (int c = tid; c < {rows} * (BN / 8); c += THREADS) {{
      const int r = c / (BN / 8), ch = c % (BN / 8);
      const uint16_t* src = {ptr} + (size_t){row_expr} * N + n0 + ch * 8;
      copy_16_async(base + {offset} + (r * BN + ch * 8) * 2, src, true);
    }}
"""


def _tile_weight_words(cb: int, tile_major: bool) -> tuple[str, str]:
    """The tile kernel's weight words from shared memory: their loads (in the loop over k16 steps, per atom ta) and
    the expression of the word that holds pair p (n8 tile nt, step ks).
    Step-major order: one step's words are contiguous (cb / 4 16-byte loads, or the 16 bytes that hold them).
    Tile-major order (humming.core.common.layout: int4 only, on profiles with the register-A wgmma kernels, where this
    kernel runs only what those do not): one step's four words lie in four chunks, one 4-byte load each, which keeps
    the registers of one step (these kernels sit at the register limit: the atom's 16 words at once spilled more;
    ptxas still spills 4 bytes in the H200's M=128 tile, and the kernel measured 2-9% slower than step-major)."""
    if not tile_major:
        load = """          // this lane's codes for step ks: words [ks*CB, ks*CB + CB) of its stream
          uint32_t words[CB >= 4 ? CB : 4];
          {
            const uint32_t atom = base + A_BYTES + (ka * NATOMS + na) * ATOM_WORDS * 4 + lane * 16;
            #pragma unroll
            for (int c = 0; c < (CB >= 4 ? CB / 4 : 1); ++c) {
              uint32_t q[4];
              lds_128(q, atom + ((ks * CB) / 4 + c) * 512);
              #pragma unroll
              for (int e = 0; e < 4; ++e) words[c * 4 + e] = q[e];
            }
          }"""
        return load, f"words[(CB >= 4 ? 0 : (ks * CB) % 4) + (p % 16) / {16 // cb}]"
    if cb != 4:
        raise ValueError(f"the tile-major pair order is made for 4-bit containers only, not {cb}-bit")
    load = """          // this lane's codes for step ks: word ks of chunk tt = tile tt
          uint32_t words[4];
          #pragma unroll
          for (int tt = 0; tt < 4; ++tt)
            words[tt] = lds_32(base + A_BYTES + (ka * NATOMS + na) * ATOM_WORDS * 4 + tt * 512 + lane * 16 + ks * 4);"""
    return load, "words[nt >> 1]"


def _per_tile_table(name: str, var: str, offset: str, row: str) -> str:
    """16-byte shared load of the eight per-n8-tile values (scales or zeros) this lane needs."""
    return f"""\
          uint32_t {var}8[4];
          lds_128({var}8, base + {offset} + ({row} * BN + na * 64 + (lane >> 2) * 8) * 2);
"""
