"""Generates the wgmma WnA16 kernel (sm_90a wgmma forms): f16/bf16 activations x int4 weights dequantized into
shared memory, fp32 accumulators, for prefill-sized M.

Block tile 128 x BN x 64 (k), 256 threads = two warpgroups; warpgroup g owns rows 64g..64g+63 of the tile and
all BN columns (one m64nBNk16 wgmma per 16 of K, four per stage). Every thread both copies/dequantizes and issues
wgmma (no warp specialisation).

Shared memory (all tiles 1024-byte aligned: wgmma applies the 128-byte swizzle to address bits 4-6 ^= 7-9):
  * BQ = 3 dequantized B tiles: BN rows (output channels) x 64 values = 128 bytes, K-major, 128-byte swizzle
    (16-byte chunk c of row r at r*128 + ((c ^ (r % 8)) * 16)), the layout the wgmma descriptor reads;
  * STAGES cp.async slots, each: A tile (128 activation rows x 128 bytes, same swizzle), the stage's raw int4
    codes (BN/64 blocks of 2 KB as stored, see humming.core.families.wgmma_dequant.layout), its group-scale rows (BN values
    each).

Dequantization. Thread tid owns raw chunk c = tid + 256 i (i < BN/128): 16 bytes = 4 words = channel n = c/2,
k 32h .. 32h+31 of the stage (h = c % 2). The same thread copies that chunk with cp.async and reads it back, so
its own copy_wait is enough for the codes. Word j becomes chunk 4h + j of row n: pair J = dq_raw(word, J) (the
codes of k 8j+2J and 8j+2J+1 OR-ed into the magic number 1024 (f16) / 128 (bf16)), plus -(magic + 8) (exact),
times the group scale of (n, k), stored with one 16-byte shared store.

Pipeline, iteration kt (groups of cp.async = stages; LOOKAHEAD = STAGES - 2 stages ahead):
  wait for this thread's copies of stage kt+1 (A of kt is older) -> fence.proxy.async (A copies and the dequant
  stores of stage kt, made in iteration kt-1, become visible to wgmma) -> __syncthreads -> refill the slot of kt-2
  -> wgmma of stage kt (A slot kt % STAGES, B tile kt % 3), commit -> dequantize stage kt+1 into B tile (kt+1) % 3
  while the tensor core works -> wgmma_wait<1> (the group of kt-1 is done).
Why three B tiles: the tile written in iteration kt was last read by the wgmma of kt-2. This warpgroup waited for
it at the end of iteration kt-1; the other warpgroup did too, before it reached the barrier of iteration kt. With
two tiles the wgmma of kt-1 (of the other warpgroup) could still be reading it. The copy slot refilled in
iteration kt (that of kt-2) is free for the same reason.

Epilogue (registers -> global): accumulator x out_scale (x *GS) x per-channel scale CS[n], + bias, stored as
f16/bf16 pairs. The parameter list is that of the mma.sync tile kernel (Z, WS, CNT and k_per_split are unused),
so the same launcher runs both.
"""
from __future__ import annotations

from humming.core.families.wgmma_dequant.planner import BQ, PATH, scale_rows, stage_bytes
from humming.devices.base import HelperRequest


def _c(v: float) -> str:
    return repr(float(v)) + "f"


def wna16_params(kernel_name: str, extra: str = "") -> str:
    """The kernel's signature line and the mma.sync tile kernel's parameter list, through the opening brace (shared
    by the wgmma and tcgen05 WnA16 kernels: one launcher runs them all); ``extra``: parameters after GS (starting
    with ",", e.g. a routing's)."""
    return f"""extern "C" __global__ void __launch_bounds__(cfg::THREADS, 1) {kernel_name}(
    const uint16_t* __restrict__ A,      // activations [M, K], row-major (K-major)
    const uint32_t* __restrict__ B,      // int4 codes, 64x64 blocks of 2 KB (humming.core.families.wgmma_dequant.layout)
    const uint16_t* __restrict__ S,      // group scales [K/group, N] (act type, natural columns) or null
    const uint16_t* __restrict__ Z,      // unused (no zero points)
    const float* __restrict__ CS,        // per-channel fp32 scale [N] or null
    const uint16_t* __restrict__ BIAS,   // [N] or null
    uint16_t* __restrict__ C,            // output [M, N], row-major
    float* __restrict__ WS, int* __restrict__ CNT,   // unused (no split-K)
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS{extra}) {{        // GS: a device scalar multiplying the output (activation global scale) or null
"""


# the A rows of a stage: rows m0 .. m0 + BM of A [M, K] (rows past M zero-filled) ...
_A_ROWS = """    #pragma unroll
    for (int i = 0; i < BM / {r}; ++i) {{
      const bool ok = m0 + lrow + {r} * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(slot_base + lswz + i * {r} * 128, ok ? a_src + ((size_t){r} * i * K + k0) : A, ok);
    }}
"""
# ... or gathered: block row r is row a_row[r] of A [rows, KA] (-1: a padding row), columns past KA zero-filled
_GATHERED_A_ROWS = """    #pragma unroll
    for (int i = 0; i < BM / {r}; ++i) {{
      const int ar = a_row[lrow + {r} * i];
      const bool ok = ar >= 0 && k0 + lch * 8 < KA;  // padding rows and columns past the real K zero-filled
      copy_16_async(slot_base + lswz + i * {r} * 128, ok ? A + (size_t)ar * KA + k0 + lch * 8 : A, ok);
    }}
"""


def wna16_stage_lambdas(lay, threads: int, gathered: bool = False) -> str:
    """CUDA of ``load_stage(slot, kt)`` (A rows, raw int4 codes and group-scale rows of a stage, cp.async) and
    ``dequant_stage(kt)`` (this thread's raw chunks -> the swizzled dequantized B tile kt % BQ) for ``threads``
    threads (shared by the wgmma and tcgen05 WnA16 kernels). ``gathered``: block row r is row ``a_row[r]`` of A
    (a shared array the kernel fills; -1: a padding row), A having KA columns (the MoE form)."""
    r, cpp = threads // 8, threads // 2  # A rows per pass; channels of codes per pass
    group = lay.scale_group
    s_rows = scale_rows(group)
    if s_rows:
        # the scale of (n, k 32h..32h+31): its row in this stage's table (group 32: two rows, else one)
        s_row = "h" if s_rows == 2 else "0"
        scale_decl = f"""\
      const uint16_t s16 = *reinterpret_cast<const uint16_t*>(sgen + slot * STAGE_BYTES + S_OFF + ({s_row} * BN + n) * 2);
      const uint32_t ss = dup_lo((uint32_t)s16);"""
        scale_math = "v = act2_mul(v, ss);"
        row = f"(k0 / {group} + r)" if s_rows > 1 else f"(k0 / {group})"
        scale_load = f"""\
    #pragma unroll
    for (int c = tid; c < S_ROWS * (BN / 8); c += THREADS) {{  // group-scale rows of this stage (BN values each)
      const int r = c / (BN / 8), ch = c % (BN / 8);
      copy_16_async(slot_base + S_OFF + (r * BN + ch * 8) * 2, S + (size_t){row} * N + n0 + ch * 8, true);
    }}
"""
    else:
        scale_decl = scale_math = scale_load = ""
    a_src = "" if gathered else "  const uint16_t* a_src = A + (size_t)(m0 + lrow) * K + lch * 8;\n"
    a_rows = (_GATHERED_A_ROWS if gathered else _A_ROWS).format(r=r)
    return f"""  // A: thread tid copies chunk tid % 8 of rows tid / 8 + {r} i ((row mod 8) is the same for every i)
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
{a_src}  // codes: raw chunk c = tid + {threads} i of a stage is 16 bytes of block (c / 128), i.e. channel n = c / 2
  const unsigned char* b_src = reinterpret_cast<const unsigned char*>(B) + (size_t)(n0 / 64) * (K / 64) * 2048;
  auto load_stage = [&](int slot, int kt) {{
    const uint32_t slot_base = slot0 + slot * STAGE_BYTES;
    const int k0 = kt * BK;
{a_rows}    #pragma unroll
    for (int i = 0; i < BN / {cpp}; ++i) {{
      const int c = tid + {threads} * i;
      copy_16_async(slot_base + A_BYTES + c * 16, b_src + ((size_t)(c >> 7) * (K / 64) + kt) * 2048 + (c & 127) * 16, true);
    }}
{scale_load}  }};

  // raw codes of stage kt (this thread's own chunks, landed) -> dequantized B tile kt % BQ
  const uint32_t zz = f32x2_to_act2({_c(lay.zero_const)}, {_c(lay.zero_const)});  // -(magic + 8), exact
  auto dequant_stage = [&](int kt) {{
    const int slot = kt % STAGES;
    const uint32_t raw = slot0 + slot * STAGE_BYTES + A_BYTES;
    const uint32_t bq = bq0 + (kt % BQ) * BQ_BYTES;
    #pragma unroll
    for (int i = 0; i < BN / {cpp}; ++i) {{
      const int c = tid + {threads} * i;
      const int n = c >> 1, h = c & 1;       // channel n (tile row), k 32h .. 32h+31 of the stage
      uint32_t q[4];
      lds_128(q, raw + c * 16);
{scale_decl}
      #pragma unroll
      for (int j = 0; j < 4; ++j) {{          // word j: k 32h+8j .. +7 -> 16-byte chunk 4h+j of row n
        uint32_t o[4];
        #pragma unroll
        for (int J = 0; J < 4; ++J) {{
          uint32_t v = dq_raw(q[j], J);       // (magic + u) for k 32h+8j+2J (low half) and +1 (high half)
          v = act2_add(v, zz);
          {scale_math}
          o[J] = v;
        }}
        sts_128(bq + swz128(n, 4 * h + j), o[0], o[1], o[2], o[3]);
      }}
    }}
  }};
"""


def wgmma_wna16_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    lay = plan.layout
    if plan.path != PATH or (t.bm, t.bk, t.threads) != (128, 64, 256) or t.stages < 4 or t.bn % 128:
        raise ValueError(f"the wgmma WnA16 kernel is written for 128x(128|256)x64 tiles, 256 threads, >= 4 stages; got {t}")
    dec = lay.decode
    if (dec.kind, dec.bits, dec.container, dec.int_path) != ("int", 4, 4, "magic") or lay.zero_group:
        raise ValueError(f"the wgmma WnA16 kernel decodes int4 codes with the magic number, not {dec}")
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=dec, async_copy=True, caps=caps)
    prelude = backend.helpers("wgmma_wna16", request, n=t.bn)
    group = lay.scale_group
    s_rows = scale_rows(group)
    src = f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in 16-bit values
constexpr int THREADS = 256;             // two warpgroups; warpgroup g owns tile rows 64g .. 64g+63
constexpr int LOOKAHEAD = STAGES - 2;    // stages loading while one is multiplied and one may still be read
constexpr int BQ = {BQ};                     // dequantized B tiles (see the module docstring for why three)
constexpr int S_ROWS = {s_rows};
constexpr int A_BYTES = BM * BK * 2, RAW_BYTES = BN * BK / 2, S_OFF = A_BYTES + RAW_BYTES;
constexpr int STAGE_BYTES = {stage_bytes(t.bn, group)};
constexpr int BQ_BYTES = BN * BK * 2;    // one dequantized B tile: BN rows x 128 bytes
static_assert(BK == 64, "one 128-byte swizzle row of 16-bit values per tile row");
static_assert(STAGE_BYTES % 1024 == 0 && BQ_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "1024-byte aligned tiles");
static_assert(STAGE_BYTES >= S_OFF + S_ROWS * BN * 2, "a slot holds A, codes and scales");
static_assert(WG_ACC_REGS == BN / 2, "m64nBN accumulators: BN/2 registers per thread");
static_assert(LOOKAHEAD >= 2, "at least four stages (stage kt+1 must be waited for while kt is multiplied)");
static_assert(BN % 128 == 0, "256 threads x 16 bytes of codes cover 128 channels per pass");
}}

{wna16_params(plan.kernel_name)}  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int ktiles = K / BK;
  // the swizzle repeats every 1024 bytes of address: start on such a boundary (1 KiB is reserved)
  const uint32_t bq0 = (smem_u32(smem) + 1023u) & ~1023u;      // BQ dequantized B tiles
  const uint32_t slot0 = bq0 + BQ * BQ_BYTES;                    // STAGES cp.async slots
  const unsigned char* sgen = smem + (slot0 - smem_u32(smem));   // generic pointer to slot 0 (scale reads)

{wna16_stage_lambdas(lay, 256)}
  wg_acc_t acc[WG_ACC_REGS];
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) acc[i] = 0.0f;

  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {{
    if (s < ktiles) load_stage(s, s);
    copy_commit();
  }}
  copy_wait<LOOKAHEAD - 1>();    // stage 0 (this thread's copies)
  __syncthreads();               // everyone's scale rows of stage 0
  dequant_stage(0);

  for (int kt = 0; kt < ktiles; ++kt) {{
    copy_wait<LOOKAHEAD - 2>();  // this thread's copies of stage kt+1 (and so of kt) have landed
    fence_proxy_async();         // A copies and dequant stores of stage kt: visible to wgmma (async proxy)
    __syncthreads();             // everyone's; both warpgroups are done with the wgmmas of kt-2
    {{
      const int next = kt + LOOKAHEAD;  // refills the slot of kt-2
      if (next < ktiles) load_stage(next % STAGES, next);
      copy_commit();
    }}
    const uint32_t a_tile = slot0 + (kt % STAGES) * STAGE_BYTES + wg * 64 * 128;  // this warpgroup's 64 rows
    const uint32_t b_tile = bq0 + (kt % BQ) * BQ_BYTES;
    const uint64_t desc_a = make_smem_desc(a_tile), desc_b = make_smem_desc(b_tile);
    wgmma_fence_operand(acc);
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < BK / 16; ++ks)  // k16 steps: +32 bytes inside the swizzled rows = +2 in the address field
      wgmma_k16(acc, desc_a + 2 * ks, desc_b + 2 * ks, 1);
    wgmma_commit();
    if (kt + 1 < ktiles) dequant_stage(kt + 1);  // overlaps the wgmma just issued
    wgmma_wait<1>();             // the group of kt-1 has finished reading its tiles
    wgmma_fence_operand(acc);
  }}
  wgmma_wait<0>();
  wgmma_fence_operand(acc);
  // accumulator fragment of m64nBN: warp w (of the warpgroup) holds rows 16w .. 16w+15; for n8 chunk j,
  // acc[4j + 2h + e] is row lane/4 + 8h (h = 0: c_row0, 1: c_row1), column 8j + 2*(lane%4) + e
  const float scale = GS ? out_scale * load_f32(GS) : out_scale;
  const int row0 = m0 + warp * 16 + (lane >> 2), col0 = n0 + 2 * (lane & 3);
  // one base pointer per row and per table: the 8j column steps become immediate offsets (no per-j addresses)
  uint16_t* const c_row0 = C + (size_t)row0 * N + col0;
  uint16_t* const c_row1 = c_row0 + (size_t)8 * N;
  const bool ok0 = row0 < M, ok1 = row0 + 8 < M;
  const float* const cs = CS ? CS + col0 : CS;
  const uint16_t* const bias = BIAS ? BIAS + col0 : BIAS;
  #pragma unroll
  for (int j = 0; j < BN / 8; ++j) {{
    // (volatile loads, so the compiler keeps them next to their use instead of hoisting all BN/8 of them)
    float c0 = scale, c1 = scale, b0 = 0.0f, b1 = 0.0f;
    if (CS) {{ c0 *= u32_as_f32(load_g32(cs + 8 * j)); c1 *= u32_as_f32(load_g32(cs + 8 * j + 1)); }}
    if (BIAS) {{
      const uint32_t bb = load_g32(bias + 8 * j);  // the two 16-bit biases of columns col0 + 8j, +1
      b0 = act_to_f32((uint16_t)(bb & 0xFFFFu)); b1 = act_to_f32((uint16_t)(bb >> 16));
    }}
    if (ok0) store_u32(c_row0 + 8 * j, f32x2_to_act2(acc[4 * j] * c0 + b0, acc[4 * j + 1] * c1 + b1));
    if (ok1) store_u32(c_row1 + 8 * j, f32x2_to_act2(acc[4 * j + 2] * c0 + b0, acc[4 * j + 3] * c1 + b1));
  }}
}}
"""
    return src
