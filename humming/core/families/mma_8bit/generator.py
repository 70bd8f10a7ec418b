"""Generates the 8-bit tile kernel: W8A8 (int8 x int8 -> int32, e4m3 x e4m3 -> fp32) with mma.sync 16x8x32
steps, both operands used as stored.

Operands. A: activation codes [M, K] bytes (row-major), staged through shared memory and read with
ldmatrix (a 16x32-byte tile is an m16n8k32 A fragment). B: weight codes in the k32 atom layout of
``humming.core.common.layout.pack_codes_k32``: per 64x64 atom, lane l holds for k32 step s and n8 tile t the
two registers (k 4q..4q+3 and 16+4q..16+4q+3 of column t*8 + l/4), in 8 chunks of 16 bytes
[chunk = s*4 + t/2][lane][(t%2)*2 + r]. Epilogue: acc (as fp32) x per-token scale x per-channel scale
x out_scale (x device scalar), plus bias; split-K as in the 16-bit tile kernel. With 128x128 weight blocks
(w8a8-fp8-block) each stage's (one k block's) partial is added into fp32 sums times activation scale (row, k block) x
weight scale (n block, k block) instead, and the epilogue applies no per-token or per-channel scale.
"""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.mma_pieces import (
    PIPELINE_HEAD,
    STAGE_LOADER_HEAD,
    TILE_PREAMBLE,
    helper_prelude,
    splitk_epilogue,
    tile_place,
)


def w8a8_kernel_source(plan, backend, caps=None, rows=None) -> str:
    """The 8-bit tile kernel of a plan; ``rows`` (humming.core.families.mma_wna16.generator.RowSource): another source
    of its rows, the MoE form's (8-bit codes of row slot / a_div, per-token scales GS; no 128x128 blocks)."""
    t = plan.tiles
    prelude = helper_prelude(plan, backend, caps, None)
    int4 = getattr(plan.layout, "weight_bits", 8) == 4
    group = getattr(plan.layout, "group", 0)
    widen = None
    if int4:
        prelude += _INT4_HELPERS
        widen = _WIDEN[(plan.layout.weight_format, plan.layout.a_type)]
        if (plan.layout.weight_format, plan.layout.a_type) == ("int4", "e4m3") and plan.layout.widen == "linear":
            prelude += backend.helpers("e4m3_of_labels")
            widen = "e4m3x4_of_labels"  # the layout's labels, an add and a lop3 per 4 codes
    block = getattr(plan.layout, "weight_scale", "") == "block"  # 128x128 weight blocks, activations per 128 of K
    step_body = _int4_step(group, widen) if int4 else _INT8_STEP
    atom_tail = _group_rescale("atom", group) if int4 and group >= 64 else ""
    stage_tail = _BLOCK_RESCALE if block else ""
    ts_doc, s_doc = "per-token activation scale [M] or null", "W4A8: fp32 group scales [K/group, N] (permuted columns), else null"
    if block:
        ts_doc = "activation scales per 128 of K [M, K/128] (row-major)"
        s_doc = "weight scales per 128x128 block [ceil(N/128), K/128] (row-major)"
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in bytes = elements
constexpr int WARPS_M = {t.warps_m}, WARPS_N = {t.warps_n}, WARPS_K = {t.warps_k};
constexpr int TM = BM / (16 * WARPS_M);
constexpr int TA = BN / (64 * WARPS_N);
constexpr int THREADS = 32 * WARPS_M * WARPS_N * WARPS_K;
constexpr int ATOM_WORDS = {512 if int4 else 1024};  // 32-bit words per 64x64 weight atom
constexpr int KATOMS = BK / 64, NATOMS = BN / 64;
constexpr int A_BYTES = BM * BK;
constexpr int B_BYTES = KATOMS * NATOMS * ATOM_WORDS * 4;   // ATOM_WORDS * 4 bytes per atom
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
static_assert(KATOMS % WARPS_K == 0, "k atoms per stage must split evenly across warps");
static_assert(BK >= 128, "the A swizzle needs 8 chunks of 16 bytes per row");
}}

extern "C" __global__ void __launch_bounds__(cfg::THREADS) {plan.kernel_name}(
{_MOE_PARAMS.format(s_doc=s_doc, moe=rows.params) if rows else _PARAMS.format(ts_doc=ts_doc, s_doc=s_doc)}
{rows.head + tile_place(rows.block_m, rows.block_n) + rows.setup + STAGE_LOADER_HEAD if rows else TILE_PREAMBLE}    #pragma unroll
    for (int c = tid; c < BM * (BK / 16); c += THREADS) {{
      const int r = c / (BK / 16), ch = c % (BK / 16);
{rows.rows if rows else _DENSE_ROWS}      copy_16_async(base + r * BK + ((ch ^ (r & 7)) * 16), src, ok);
    }}
    #pragma unroll
    for (int c = tid; c < NATOMS * KATOMS * (ATOM_WORDS / 4); c += THREADS) {{
      const int a = c / (ATOM_WORDS / 4), w = c % (ATOM_WORDS / 4);
      const int na = a / KATOMS, ka = a % KATOMS;
      const uint32_t* src = B + ((size_t)(n0 / 64 + na) * katoms_total + k0 / 64 + ka) * ATOM_WORDS + w * 4;
      copy_16_async(base + A_BYTES + ((ka * NATOMS + na) * ATOM_WORDS + w * 4) * 4, src, true);
    }}
  }};

  acc_t acc[TM][TA * 8][4];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;
{_FACC_INIT if int4 or block else ""}
{PIPELINE_HEAD}    #pragma unroll
    for (int i = 0; i < KATOMS / WARPS_K; ++i) {{
      const int ka = i * WARPS_K + wk;
      const int katom = (k_begin + kt * BK) / 64 + ka;  // global index of this 64-wide k atom
      #pragma unroll
      for (int ks = 0; ks < 2; ++ks) {{
        const int kk = ka * 64 + ks * 32;  // byte offset inside the stage
        uint32_t a[TM][4];
        #pragma unroll
        for (int tm = 0; tm < TM; ++tm) {{
          const int row = (wm * TM + tm) * 16 + (lane & 15);
          const int ch = kk / 16 + (lane >> 4);
          ldmatrix_x4(a[tm], base + row * BK + ((ch ^ (row & 7)) * 16));
        }}
{step_body}
      }}
{atom_tail}
    }}
{stage_tail}  }}
  copy_wait<0>();
  __syncthreads();

{"" if int4 or block else _TO_FLOAT}{splitk_epilogue("facc", row_scale="GS" if rows else None if block else "TS",
                                                     indexed=bool(rows))}
}}
"""


_PARAMS = """\
    const unsigned char* __restrict__ A,  // activation codes [M, K]
    const uint32_t* __restrict__ B,       // weight codes, k32 atom layout
    const float* __restrict__ TS,         // {ts_doc}
    const float* __restrict__ S,          // {s_doc}
    const float* __restrict__ CS,         // per-channel weight scale [N] or null
    const uint16_t* __restrict__ BIAS,    // [N] or null
    uint16_t* __restrict__ C,             // output [M, N]
    float* __restrict__ WS, int* __restrict__ CNT,
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS) {{      // a device scalar multiplying the output (per-tensor activation scale) or null"""

# the MoE form's parameters: the MoE kernels' list (humming.core.families.moe_wna16.generator), 8-bit codes as A
_MOE_PARAMS = """\
    const unsigned char* __restrict__ A,  // activation codes [rows, KA] (row s / a_div of slot s)
    const uint32_t* __restrict__ B,       // weight codes, k32 atom layout, per expert
    const float* __restrict__ S,          // {s_doc}, per expert
    const uint16_t* __restrict__ Z,       // unused
    const float* __restrict__ CS,         // per-channel weight scales [E, N] or null
    const uint16_t* __restrict__ BIAS,    // [E, N] or null
    uint16_t* __restrict__ C,             // output [slots, n_out]
    float* __restrict__ WS, int* __restrict__ CNT,
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS{moe}) {{   // GS: the activations' per-token scales [rows]"""

_DENSE_ROWS = """\
      const bool ok = m0 + r < M;
      const unsigned char* src = A + (size_t)(ok ? m0 + r : 0) * K + k0 + ch * 16;
"""

_TO_FLOAT = """\
  float facc[TM][TA * 8][4];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) facc[i][j][e] = acc_to_f32(acc[i][j][e]);
"""

_FACC_INIT = """\
  float facc[TM][TA * 8][4];  // fp32 sums of the int32 group partials times their group scales
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) facc[i][j][e] = 0.0f;
"""

# 128x128 block scales, at the end of each stage (BK = 128: the stage is one k block, and every atom a warp
# multiplied in it belongs to that block): facc += float(acc) x activation scale (row, k block) x weight scale
# (n block, k block), then acc = 0. A lane's accumulator rows are lane/4 (+8 for e >= 2) of each m16 tile; an
# n64 atom lies inside one 128-wide n block. Rows past M read row M - 1 (their sums are zeros, never stored).
_BLOCK_RESCALE = """\
    {
      static_assert(BK == 128, "one k block of the 128x128 weight blocks per stage");
      const int kb = (k_begin + kt * BK) / 128, kblocks = K / 128;
      float ra[TM][2];
      #pragma unroll
      for (int tm = 0; tm < TM; ++tm)
        #pragma unroll
        for (int h = 0; h < 2; ++h)
          ra[tm][h] = load_f32(TS + (size_t)min(m0 + (wm * TM + tm) * 16 + (lane >> 2) + 8 * h, M - 1) * kblocks + kb);
      #pragma unroll
      for (int ta = 0; ta < TA; ++ta) {
        const float wsc = load_f32(S + (size_t)((n0 + (wn * TA + ta) * 64) >> 7) * kblocks + kb);
        #pragma unroll
        for (int t = 0; t < 8; ++t)
          #pragma unroll
          for (int e = 0; e < 4; ++e)
            #pragma unroll
            for (int tm = 0; tm < TM; ++tm) {
              facc[tm][ta * 8 + t][e] += acc_to_f32(acc[tm][ta * 8 + t][e]) * (ra[tm][e >> 1] * wsc);
              acc[tm][ta * 8 + t][e] = 0;
            }
      }
    }
"""

# 8-bit weights as stored: chunk c of step ks holds n8 tiles 2c and 2c + 1 (b0, b1 each)
_INT8_STEP = """\
        #pragma unroll
        for (int ta = 0; ta < TA; ++ta) {
          const int na = wn * TA + ta;
          const uint32_t atom = base + A_BYTES + (ka * NATOMS + na) * ATOM_WORDS * 4 + lane * 16;
          #pragma unroll
          for (int c = 0; c < 4; ++c) {   // chunk c: n8 tiles 2c and 2c + 1
            uint32_t q[4];
            lds_128(q, atom + (ks * 4 + c) * 512);
            #pragma unroll
            for (int tm = 0; tm < TM; ++tm) {
              mma_k32(acc[tm][ta * 8 + 2 * c], a[tm], q[0], q[1]);
              mma_k32(acc[tm][ta * 8 + 2 * c + 1], a[tm], q[2], q[3]);
            }
          }
        }"""

_INT4_HELPERS = r"""
// four 4-bit two's-complement codes (one per byte, low nibbles) -> four s8: OR in 0xF0 where bit 3 is set
// (0x08 * 0x1E = 0xF0 stays inside its byte, so one multiply extends all four)
__device__ __forceinline__ uint32_t sext4x4(uint32_t t) { return t | ((t & 0x08080808u) * 0x1Eu); }
// the four low-nibble codes of t as a 16-bit byte-permute selector (nibble i = code of byte i)
__device__ __forceinline__ uint32_t nibble_selector(uint32_t t) {
  const uint32_t u = t | (t >> 4);             // bytes 0 and 2 now hold two codes each
  return (u & 0xFFu) | ((u >> 8) & 0xFF00u);
}
// int4 (two's complement) -> e4m3, exactly: 16-entry table in two byte permutes, chosen by the code's bit 3
__device__ __forceinline__ uint32_t int4x4_to_e4m3x4(uint32_t t) {
  const uint32_t sel = nibble_selector(t) & 0x7777u;
  const uint32_t pos = prmt_b32(0x44403800u, 0x4E4C4A48u, sel);   // 0 1 2 3 | 4 5 6 7
  const uint32_t neg = prmt_b32(0xCACCCED0u, 0xB8C0C4C8u, sel);   // -8 -7 -6 -5 | -4 -3 -2 -1
  const uint32_t m = ((t >> 3) & 0x01010101u) * 0xFFu;            // 0xFF where the code is negative
  return (neg & m) | (pos & ~m);
}
// e2m1 (sign | 3-bit magnitude) -> e4m3, exactly: magnitudes through one byte permute, sign to bit 7
__device__ __forceinline__ uint32_t e2m1x4_to_e4m3x4(uint32_t t) {
  const uint32_t sel = nibble_selector(t) & 0x7777u;
  const uint32_t mag = prmt_b32(0x3C383000u, 0x4C484440u, sel);   // 0 .5 1 1.5 | 2 3 4 6
  return mag | ((t & 0x08080808u) << 4);
}
"""

# (weight format, MMA type) -> the widening of four codes (low nibbles of the bytes of t); int4 -> e4m3 with the
# layout's linear widening (W4A8Layout.widen, the default): e4m3x4_of_labels of the nvidia backend instead
_WIDEN = {("int4", "s8"): "sext4x4", ("int4", "e4m3"): "int4x4_to_e4m3x4", ("e2m1", "e4m3"): "e2m1x4_to_e4m3x4"}


def _int4_step(group: int, widen: str) -> str:
    """int4 weights: chunk c of step ks holds n8 tiles 4c..4c+3, one word each (b0 low nibbles, b1 high)."""
    per_step = _group_rescale("step", group) if group < 64 else ""
    return _INT4_STEP.fill(widen=widen) + per_step


# widen: the function that widens four int4 codes to bytes
_INT4_STEP = Template("""\
        #pragma unroll
        for (int ta = 0; ta < TA; ++ta) {
          const int na = wn * TA + ta;
          const uint32_t atom = base + A_BYTES + (ka * NATOMS + na) * ATOM_WORDS * 4 + lane * 16;
          #pragma unroll
          for (int c = 0; c < 2; ++c) {   // chunk c: n8 tiles 4c .. 4c + 3
            uint32_t q[4];
            lds_128(q, atom + (ks * 2 + c) * 512);
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
              const uint32_t b0 = ${widen}(q[e] & 0x0F0F0F0Fu), b1 = ${widen}((q[e] >> 4) & 0x0F0F0F0Fu);
              #pragma unroll
              for (int tm = 0; tm < TM; ++tm) mma_k32(acc[tm][ta * 8 + 4 * c + e], a[tm], b0, b1);
            }
          }
        }
""")


def _group_rescale(where: str, group: int) -> str:
    """facc += float(acc) * scale of the group, then acc = 0. The scales multiply accumulators, so the lane
    reads its accumulator columns t*8 + 2*(lane % 4) + {0, 1}: 16 floats, contiguous in the table's order."""
    k = "katom * 64" if where == "atom" else "(katom * 64 + ks * 32)"
    indent = "      " if where == "atom" else "        "
    body = f"""\
{{
  const int grow = {k} / {group};
  #pragma unroll
  for (int ta = 0; ta < TA; ++ta) {{
    const float* srow = S + (size_t)grow * N + n0 + (wn * TA + ta) * 64 + (lane & 3) * 16;
    uint32_t s4[4][4];  // s4[t / 2][(t % 2) * 2 + j]: scale of column t*8 + 2*(lane % 4) + j
    #pragma unroll
    for (int v = 0; v < 4; ++v) load_g128_cached(s4[v], srow + 4 * v);
    #pragma unroll
    for (int t = 0; t < 8; ++t)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {{
        const float sc = u32_as_f32(s4[t / 2][(t % 2) * 2 + (e & 1)]);
        #pragma unroll
        for (int tm = 0; tm < TM; ++tm) {{
          facc[tm][ta * 8 + t][e] += acc_to_f32(acc[tm][ta * 8 + t][e]) * sc;
          acc[tm][ta * 8 + t][e] = 0;
        }}
      }}
  }}
}}
"""
    return "\n".join(indent + line if line else line for line in body.splitlines()) + "\n"
