"""Generates the wgmma W8A8 kernel (sm_90a wgmma forms): e4m3 x e4m3 -> fp32 or s8 x s8 -> int32, for
prefill-sized M.

Block tile 128 x BN x 128 bytes of K, 256 threads = two warpgroups; warpgroup g owns rows 64g..64g+63 of
the tile and all BN columns (one m64nBNk32 wgmma per 32 bytes of K, four per stage).

Shared memory. Both operands are K-major tiles of 128-byte rows (A: 128 activation rows, B: BN weight rows =
output channels) with the 128-byte swizzle: chunk c (16 bytes) of row r lives at r*128 + ((c ^ (r % 8)) * 16).
Tiles are 1024-byte aligned, because wgmma applies the swizzle to address bits (bits 4-6 ^= bits 7-9). The
descriptor of an operand points at its first row (+32 bytes per k32 step) with a stride of 1024 bytes
between groups of 8 rows.

Pipeline. cp.async, STAGES slots, STAGES-2 stages in flight ahead of the one being multiplied; wgmma groups
are waited with at most one group left in flight, so the slot refilled at iteration kt (that of kt-2) is free
once the barrier of iteration kt has passed. e4m3 (unless fast accumulation is asked for) promotes: each stage's
4 k32 steps start from zero (scale-d = 0) and are waited and added into fp32 registers, because the tensor
core's fp8 accumulation keeps fewer bits than fp32 (its error would grow with K); s8 accumulates exactly in
int32 across the whole K. Before wgmma reads a stage: cp.async.wait_group, then
fence.proxy.async (cp.async writes are generic-proxy, wgmma reads through the async proxy), then the barrier.

Epilogue (registers -> global, no shared memory): accumulator as fp32 x per-token scale TS[m] x per-channel
scale CS[n] x out_scale (x *GS), + bias, stored as f16/bf16 pairs. The parameter list is the one of the
mma.sync 8-bit kernel (S, WS, CNT and k_per_split are unused), so the same launcher runs both.
"""
from __future__ import annotations

from humming.devices.base import HelperRequest


def wgmma_w8a8_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    if (t.bm, t.bk, t.threads) != (128, 128, 256) or t.stages < 3:
        raise ValueError(f"the wgmma kernel is written for 128x{t.bn}x128 tiles, 256 threads, >= 3 stages; got {t}")
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=None, async_copy=True, caps=caps)
    prelude = backend.wgmma_prelude(request, t.bn)
    promote = plan.instruction.a_type in ("e4m3", "e5m2") and not getattr(plan.layout, "fast_accum", False)
    if promote:  # fp8: each stage's 128-deep partial goes into fp32 registers (the tensor core keeps fewer bits)
        promote_decl = """\
  float facc[WG_ACC_REGS];  // fp32 sums of the per-stage partials (promotion)
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) facc[i] = 0.0f;
"""
        accumulate = "ks > 0"  # the first k32 step of a stage overwrites the partial (scale-d = 0)
        wait_body = """\
    wgmma_wait<0>();             // this stage's partial is complete (the other warpgroup keeps the tensor core busy)
    wgmma_fence_operand(acc);
    #pragma unroll
    for (int i = 0; i < WG_ACC_REGS; ++i) facc[i] += acc[i];"""

        def result(i: str) -> str:
            return f"facc[{i}]"
    else:
        promote_decl, accumulate = "", "1"
        wait_body = """\
    wgmma_wait<1>();             // the group of kt-1 has finished reading its stage
    wgmma_fence_operand(acc);"""

        def result(i: str) -> str:
            return f"wg_acc_to_f32(acc[{i}])"
    src = f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in bytes = elements
constexpr int THREADS = 256;             // two warpgroups; warpgroup g owns tile rows 64g .. 64g+63
constexpr int LOOKAHEAD = STAGES - 2;    // stages loading while one is multiplied and one may still be read
constexpr int A_BYTES = BM * BK, B_BYTES = BN * BK;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
static_assert(BK == 128, "one 128-byte swizzle row per tile row");
static_assert(STAGE_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "tiles stay 1024-byte aligned (swizzle period)");
static_assert(WG_ACC_REGS == BN / 2, "m64nBN accumulators: BN/2 registers per thread");
static_assert(LOOKAHEAD >= 1, "at least three stages");
static_assert(THREADS == 256 && BM % 32 == 0 && BN % 32 == 0, "256 threads copy 32 rows of 8 chunks at a time");
}}

extern "C" __global__ void __launch_bounds__(cfg::THREADS, 1) {plan.kernel_name}(
    const unsigned char* __restrict__ A,  // activation codes [M, K], row-major (K-major)
    const uint32_t* __restrict__ Bw,      // weight codes [N, K] bytes, row-major (K-major)
    const float* __restrict__ TS,         // per-token activation scale [M] or null
    const float* __restrict__ S,          // unused (group scales of W4A8)
    const float* __restrict__ CS,         // per-channel weight scale [N] or null
    const uint16_t* __restrict__ BIAS,    // [N] or null
    uint16_t* __restrict__ C,             // output [M, N]
    float* __restrict__ WS, int* __restrict__ CNT,   // unused (no split-K)
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS) {{      // a device scalar multiplying the output (per-tensor activation scale) or null
  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int ktiles = K / BK;
  const unsigned char* B = reinterpret_cast<const unsigned char*>(Bw);
  // the swizzle repeats every 1024 bytes of address: start the stages on such a boundary (1 KiB is reserved)
  const uint32_t smem0 = (smem_u32(smem) + 1023u) & ~1023u;

  // stage layout: A tile (BM rows x 128 B) then B tile (BN rows x 128 B), both 128-byte swizzled.
  // Thread tid copies chunk tid % 8 of rows tid / 8 + 32 i: (row mod 8) is the same for every i, so the
  // swizzled offset inside a group of 32 rows is one constant and row i adds i * 32 * 128 bytes.
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const unsigned char* a_src = A + (size_t)(m0 + lrow) * K + lch * 16;
  const unsigned char* b_src = B + (size_t)(n0 + lrow) * K + lch * 16;
  auto load_stage = [&](int stage, int kt) {{
    const uint32_t a_tile = smem0 + stage * STAGE_BYTES + lswz, b_tile = a_tile + A_BYTES;
    const int k0 = kt * BK;
    #pragma unroll
    for (int i = 0; i < BM / 32; ++i) {{
      const bool ok = m0 + lrow + 32 * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(a_tile + i * 32 * 128, ok ? a_src + (32 * i * K + k0) : A, ok);
    }}
    #pragma unroll
    for (int i = 0; i < BN / 32; ++i)
      copy_16_async(b_tile + i * 32 * 128, b_src + (32 * i * K + k0), true);
  }};

  wg_acc_t acc[WG_ACC_REGS];
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) acc[i] = 0;
{promote_decl}
  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {{
    if (s < ktiles) load_stage(s, s);
    copy_commit();
  }}

  for (int kt = 0; kt < ktiles; ++kt) {{
    copy_wait<LOOKAHEAD - 1>();  // this thread's copies of stage kt have landed
    fence_proxy_async();         // ... and are visible to wgmma (async proxy)
    __syncthreads();             // everyone's copies; both warpgroups are done with the wgmmas of kt-2
    {{
      const int next = kt + LOOKAHEAD;  // refills the slot of kt-2
      if (next < ktiles) load_stage(next % STAGES, next);
      copy_commit();
    }}
    const uint32_t a_tile = smem0 + (kt % STAGES) * STAGE_BYTES + wg * 64 * 128;  // this warpgroup's 64 rows
    const uint32_t b_tile = smem0 + (kt % STAGES) * STAGE_BYTES + A_BYTES;
    const uint64_t desc_a = make_smem_desc(a_tile), desc_b = make_smem_desc(b_tile);
    wgmma_fence_operand(acc);
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < BK / 32; ++ks)  // k32 steps: +32 bytes inside the swizzled rows = +2 in the address field
      wgmma_k32(acc, desc_a + 2 * ks, desc_b + 2 * ks, {accumulate});
    wgmma_commit();
{wait_body}
  }}
  wgmma_wait<0>();
  wgmma_fence_operand(acc);
  // accumulator fragment of m64nBN: warp w (of the warpgroup) holds rows 16w .. 16w+15; for n8 chunk j,
  // acc[4j + 2h + e] is row lane/4 + 8h, column 8j + 2*(lane%4) + e
  const float scale = GS ? out_scale * load_f32(GS) : out_scale;
  const int row0 = m0 + warp * 16 + (lane >> 2);
  float rs[2];
  #pragma unroll
  for (int h = 0; h < 2; ++h) rs[h] = (TS && row0 + 8 * h < M) ? scale * load_f32(TS + row0 + 8 * h) : scale;
  #pragma unroll
  for (int j = 0; j < BN / 8; ++j) {{
    const int col = n0 + 8 * j + 2 * (lane & 3);
    // (volatile loads, so the compiler keeps them next to their use instead of hoisting all BN/8 of them)
    float c0 = 1.0f, c1 = 1.0f, b0 = 0.0f, b1 = 0.0f;
    if (CS) {{ c0 = u32_as_f32(load_g32(CS + col)); c1 = u32_as_f32(load_g32(CS + col + 1)); }}
    if (BIAS) {{
      const uint32_t bb = load_g32(BIAS + col);  // the two 16-bit biases of columns col, col + 1
      b0 = act_to_f32((uint16_t)(bb & 0xFFFFu)); b1 = act_to_f32((uint16_t)(bb >> 16));
    }}
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
      const int row = row0 + 8 * h;
      if (row < M) {{
        const float v0 = {result('4 * j + 2 * h')} * rs[h] * c0 + b0;
        const float v1 = {result('4 * j + 2 * h + 1')} * rs[h] * c1 + b1;
        store_u32(C + (size_t)row * N + col, f32x2_to_act2(v0, v1));
      }}
    }}
  }}
}}
"""
    return src
