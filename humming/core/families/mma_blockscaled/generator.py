"""Generates the block-scaled mma.sync tile kernel: W4A4 NVFP4 (kind::mxf4nvf4, scale_vec::4X, ue4m3 per 16) and
MXFP4 (kind::mxf4, scale_vec::2X, ue8m0 per 32) with m16n8k64 e2m1 x e2m1 -> f32 steps (sm_120a/121a).

Operands (see ``humming.core.families.mma_blockscaled.layout``). A: packed activation codes [M, K/2] bytes, staged through
shared memory (128-byte rows, 16-byte chunks XOR-swizzled by row) and read with ldmatrix: a 16x32-byte tile is an
m16n8k64 A fragment. SA: activation block scales as stored, [M, K/vec] bytes, staged per row. B: weight codes in
the k32 atom layout of the packed bytes (atom = 64 columns x 128 k; chunk s*4 + t/2 of k64 step s holds n8 tiles
t, one 16-byte load per lane per two tiles). SB: weight block scales per atom in the lanes' order (one 16-byte load
per lane per four tiles). The block scales multiply inside the MMA; the epilogue applies out_scale (the weight's
global scale) x GS (the activation's global scale, a device scalar) and the bias; split-K as the other tile kernels.
Never run on hardware (no sm_120 device was available): selected at run time only with HUMMING_UNVERIFIED_KERNELS=1.
"""
from __future__ import annotations

from humming.core.common.mma_pieces import PIPELINE_HEAD, TILE_PREAMBLE, splitk_epilogue
from humming.devices.base import HelperRequest


def _step(ks: int, recipe: str) -> str:
    """One k64 step (ks = 0 or 1 inside the 128-wide atom), spelled out so the selector is a constant."""
    if recipe == "nvfp4":  # 4X: the 4 scale bytes of this step; byte-id 0
        sa = f"sa_base + row * SA_ROW + (ka * 2 + {ks}) * 4"
        sb = f"sb_atom + (({ks} * 2 + h) * 8 + (lane >> 2)) * 16"
        bid = 0
    else:  # 2X: one word holds both steps of the atom; byte-id selects the pair of this step
        sa = "sa_base + row * SA_ROW + ka * 4"
        sb = "sb_atom + (h * 8 + (lane >> 2)) * 16"
        bid = 2 * ks
    return f"""\
      {{  // k64 step {ks} of the atom
        const int kk = ka * 64 + {ks} * 32;  // byte offset inside the stage row
        uint32_t a[TM][4], sfa[TM];
        #pragma unroll
        for (int tm = 0; tm < TM; ++tm) {{
          const int row_l = (wm * TM + tm) * 16 + (lane & 15);
          const int ch = kk / 16 + (lane >> 4);
          ldmatrix_x4(a[tm], base + row_l * BKB + ((ch ^ (row_l & 7)) * 16));
          // SF_A: lanes 4g, 4g+2 hold row g; lanes 4g+1, 4g+3 row g+8
          const int row = (wm * TM + tm) * 16 + (lane >> 2) + ((lane & 1) << 3);
          sfa[tm] = lds_32({sa});
        }}
        #pragma unroll
        for (int ta = 0; ta < TA; ++ta) {{
          const int na = wn * TA + ta;
          const uint32_t atom = base + A_BYTES + (ka * NATOMS + na) * 4096 + lane * 16;
          const uint32_t sb_atom = base + A_BYTES + B_BYTES + SA_BYTES + (ka * NATOMS + na) * ATOM_SB;
          uint32_t sfb[8];  // SF_B of column t*8 + lane/4 for the 8 n8 tiles (every lane of a quad alike)
          #pragma unroll
          for (int h = 0; h < 2; ++h) {{
            uint32_t s4[4];
            lds_128(s4, {sb});
            #pragma unroll
            for (int e = 0; e < 4; ++e) sfb[h * 4 + e] = s4[e];
          }}
          #pragma unroll
          for (int c = 0; c < 4; ++c) {{   // chunk c: n8 tiles 2c and 2c + 1
            uint32_t q[4];
            lds_128(q, atom + ({ks} * 4 + c) * 512);
            #pragma unroll
            for (int tm = 0; tm < TM; ++tm) {{
              mma_bs<{bid}>(acc[tm][ta * 8 + 2 * c], a[tm], q[0], q[1], sfa[tm], sfb[2 * c]);
              mma_bs<{bid}>(acc[tm][ta * 8 + 2 * c + 1], a[tm], q[2], q[3], sfa[tm], sfb[2 * c + 1]);
            }}
          }}
        }}
      }}
"""


def blockscaled_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    lay = plan.layout
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=None, async_copy=plan.async_copy, caps=caps)
    prelude = backend.helpers("blockscaled", request, scale_vec=lay.scale_vec)
    sa_copy = ("copy_16_async(base + A_BYTES + B_BYTES + r * SA_ROW, src, ok);" if lay.vec == 16 else
               "copy_8_async(base + A_BYTES + B_BYTES + r * SA_ROW, src, ok);")
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
// compiled only: not yet validated on hardware (HUMMING_UNVERIFIED_KERNELS=1 selects it at run time)
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in e2m1 elements
constexpr int WARPS_M = {t.warps_m}, WARPS_N = {t.warps_n}, WARPS_K = {t.warps_k};
constexpr int TM = BM / (16 * WARPS_M);
constexpr int TA = BN / (64 * WARPS_N);
constexpr int THREADS = 32 * WARPS_M * WARPS_N * WARPS_K;
constexpr int VEC = {lay.vec};                 // elements per block scale
constexpr int BKB = BK / 2;                    // code bytes per activation row per stage
constexpr int SA_ROW = BK / VEC;               // activation scale bytes per row per stage
constexpr int ATOM_SB = 64 * 128 / VEC;        // weight scale bytes per 64x128 atom
constexpr int KATOMS = BK / 128, NATOMS = BN / 64;
constexpr int A_BYTES = BM * BKB;
constexpr int B_BYTES = KATOMS * NATOMS * 4096;
constexpr int SA_BYTES = BM * SA_ROW;
constexpr int SB_BYTES = KATOMS * NATOMS * ATOM_SB;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES + SA_BYTES + SB_BYTES;
static_assert(KATOMS % WARPS_K == 0, "k atoms per stage must split evenly across warps");
static_assert(BKB == 128, "the A swizzle needs 8 chunks of 16 bytes per row");
static_assert(STAGE_BYTES % 128 == 0, "stages stay 128-byte aligned");
}}

extern "C" __global__ void __launch_bounds__(cfg::THREADS) {plan.kernel_name}(
    const unsigned char* __restrict__ A,   // packed e2m1 activation codes [M, K/2]
    const uint32_t* __restrict__ B,        // packed e2m1 weight codes, k32 atom layout
    const unsigned char* __restrict__ SA,  // activation block scales [M, K/VEC] ({lay.scale_format})
    const unsigned char* __restrict__ SB,  // weight block scales, per-atom lane order ({lay.scale_format})
    const float* __restrict__ CS,          // unused (null)
    const uint16_t* __restrict__ BIAS,     // [N] or null
    uint16_t* __restrict__ C,              // output [M, N]
    float* __restrict__ WS, int* __restrict__ CNT,
    int M, int N, int K, int k_per_split, float out_scale,   // out_scale: the weight's global scale
    const float* __restrict__ GS) {{       // the activation's global scale (device scalar) or null
{TILE_PREAMBLE}    const int katoms_k = K / 128;   // 128-wide weight atoms along K
    #pragma unroll
    for (int c = tid; c < BM * (BKB / 16); c += THREADS) {{
      const int r = c / (BKB / 16), ch = c % (BKB / 16);
      const bool ok = m0 + r < M;
      const unsigned char* src = A + (size_t)(ok ? m0 + r : 0) * (K / 2) + k0 / 2 + ch * 16;
      copy_16_async(base + r * BKB + ((ch ^ (r & 7)) * 16), src, ok);
    }}
    #pragma unroll
    for (int c = tid; c < NATOMS * KATOMS * 256; c += THREADS) {{
      const int a = c / 256, w = c % 256;
      const int na = a / KATOMS, ka = a % KATOMS;
      const uint32_t* src = B + ((size_t)(n0 / 64 + na) * katoms_k + k0 / 128 + ka) * 1024 + w * 4;
      copy_16_async(base + A_BYTES + ((ka * NATOMS + na) * 1024 + w * 4) * 4, src, true);
    }}
    for (int r = tid; r < BM; r += THREADS) {{
      const bool ok = m0 + r < M;
      const unsigned char* src = SA + (size_t)(ok ? m0 + r : 0) * (K / VEC) + k0 / VEC;
      {sa_copy}
    }}
    #pragma unroll
    for (int c = tid; c < NATOMS * KATOMS * (ATOM_SB / 16); c += THREADS) {{
      const int a = c / (ATOM_SB / 16), w = c % (ATOM_SB / 16);
      const int na = a / KATOMS, ka = a % KATOMS;
      const unsigned char* src = SB + ((size_t)(n0 / 64 + na) * katoms_k + k0 / 128 + ka) * ATOM_SB + w * 16;
      copy_16_async(base + A_BYTES + B_BYTES + SA_BYTES + (ka * NATOMS + na) * ATOM_SB + w * 16, src, true);
    }}
  }};

  float acc[TM][TA * 8][4];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

{PIPELINE_HEAD}    const uint32_t sa_base = base + A_BYTES + B_BYTES;
    #pragma unroll
    for (int i = 0; i < KATOMS / WARPS_K; ++i) {{
      const int ka = i * WARPS_K + wk;
{_step(0, lay.recipe)}{_step(1, lay.recipe)}    }}
  }}
  copy_wait<0>();
  __syncthreads();

{splitk_epilogue("acc")}}}
"""
