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
scale CS[n] x out_scale (x *GS), + bias, stored as f16/bf16 pairs. Block scales (128x128 weight blocks,
activations per 128 of K): applied at each stage's promotion instead (see ``wgmma_w8a8_kernel_source``). The parameter list is the one of the
mma.sync 8-bit kernel (S, WS, CNT and k_per_split are unused), so the same launcher runs both.
"""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.common.kernel_params import _S_DOC, _TS_DOC, eight_bit_params
from humming.core.common.wgmma import swizzled_stage_loader
from humming.core.families.wgmma_8bit.pieces import (
    _ROW_SCALE,
    W4A8_ACC_DECL,
    W4A8_PARAM_DOCS,
    _facc,
    w4a8_group_loop,
    w4a8_group_steps,
    w4a8_widen,
    wgmma_epilogue,
)
from humming.devices.base import HelperRequest


@dataclass(frozen=True)
class W8A8Rows:
    """Where the W8A8 kernel's token rows come from and go to, other than rows m0 .. m0 + BM of A and C (the MoE form,
    humming.core.families.moe_wgmma_8bit; the lock-step cp.async kernel only). ``params``: the whole parameter list
    (signature line through the opening brace); ``tile``: m0 / n0 and what follows from them (may return early; ends
    with the barrier its shared state needs); ``load_stage``: the ``load_stage(stage, kt)`` lambda and its setup;
    ``block_rows``: ts_lo / ts_hi, the activation block scales of the thread's rows (128x128 weight blocks);
    ``epilogue(result, block)``: the scales and stores of the accumulators."""

    params: str
    tile: str
    load_stage: str
    block_rows: str
    epilogue: object


# the dense kernel's rows: block tile (blockIdx.x, blockIdx.y), rows past M zero-filled and not stored
DENSE_BLOCK_ROWS = """\
  const int arow = m0 + warp * 16 + (lane >> 2);
  const float* ts_lo = TS + (size_t)min(arow, M - 1) * ktiles;
  const float* ts_hi = TS + (size_t)min(arow + 8, M - 1) * ktiles;
"""


def wgmma_w8a8_kernel_source(plan, backend, caps=None, rows: W8A8Rows | None = None) -> str:
    """The W8A8 kernel (W4A8 layouts go to ``wgmma_w4a8_kernel_source``). With 128x128 weight blocks (layout
    ``weight_scale == "block"``, the w8a8-fp8-block / DeepSeek-V3 recipe) each stage is one 128-deep k block: its
    partial (started with scale-d = 0) is waited and added into fp32 registers times activation scale (row, k
    block) x weight scale (n block, k block); TS is then the [M, K/128] activation table, S the [N/128, K/128]
    weight table, and the epilogue applies only out_scale, bias (CS is null). BN must be 128. ``rows``: the MoE
    form's rows (W8A8Rows)."""
    if getattr(plan.layout, "weight_bits", 8) == 4:
        return wgmma_w4a8_kernel_source(plan, backend, caps, rows=rows)
    t = plan.tiles
    if t.bulk and rows is None:  # the warp-specialised kernel with TMA tensor copies
        from humming.core.families.wgmma_8bit.generator_tma import wgmma_w8a8_tma_kernel_source

        return wgmma_w8a8_tma_kernel_source(plan, backend, caps)
    if (t.bm, t.bk, t.threads) != (128, 128, 256) or t.stages < 3:
        raise ValueError(f"the wgmma kernel is written for 128x{t.bn}x128 tiles, 256 threads, >= 3 stages; got {t}")
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=None, async_copy=True, caps=caps)
    prelude = backend.helpers("wgmma_k32", request, n=t.bn)
    block = getattr(plan.layout, "weight_scale", "") == "block"  # 128x128 weight blocks, activations per 128 of K
    promote = plan.instruction.a_type in ("e4m3", "e5m2") and not getattr(plan.layout, "fast_accum", False)
    row_scale = _ROW_SCALE
    ts_doc, s_doc = _TS_DOC, _S_DOC
    if block:  # each stage's partial (one 128-deep k block) times its activation and weight block scales
        if t.bn != 128:
            raise ValueError(f"the wgmma kernel with 128x128 weight blocks needs BN = 128 (one n block); got {t.bn}")
        promote_decl = """\
  float facc[WG_ACC_REGS];  // fp32 sums of the per-stage partials times their block scales
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) facc[i] = 0.0f;
  // block scales (a stage is one k block, BK = 128): the activations' [rows, K/128] for this thread's rows
  // (two: 8 apart; padding rows read a valid row's, their codes are zero), weights S [N/128, K/128] for this
  // tile's n block (BN = 128: n0 / 128)
""" + (rows.block_rows if rows else DENSE_BLOCK_ROWS) + """\
  const float* ws_blk = S + (size_t)(n0 / 128) * ktiles;
"""
        accumulate = "ks > 0"  # the first k32 step of a stage overwrites the partial (scale-d = 0)
        wait_body = """\
    const float wsc = load_f32(ws_blk + kt);  // the block scales of k block kt (loaded while the wgmma runs)
    const float bs_lo = load_f32(ts_lo + kt) * wsc, bs_hi = load_f32(ts_hi + kt) * wsc;
    wgmma_wait<0>();             // this stage's partial is complete (the other warpgroup keeps the tensor core busy)
    wgmma_fence_operand(acc);
    #pragma unroll
    for (int i = 0; i < WG_ACC_REGS; ++i)  // acc[4j + 2h + e] is row arow + 8h
      facc[i] += wg_acc_to_f32(acc[i]) * ((i & 2) ? bs_hi : bs_lo);"""
        row_scale = "scale;  // the activation scales were applied per k block"
        ts_doc = "activation scales per 128 of K [M, K/128] (row-major)"
        s_doc = "weight scales per 128x128 block [N/128, K/128] (row-major)"

        def result(i: str) -> str:
            return f"facc[{i}]"
    elif promote:  # fp8: each stage's 128-deep partial goes into fp32 registers (the tensor core keeps fewer bits)
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
    if rows:
        params, tile, epilogue = rows.params, rows.tile, rows.epilogue(result, block)
    else:
        params = eight_bit_params(plan.kernel_name, ts_doc=ts_doc, s_doc=s_doc)
        tile = "  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;"
        epilogue = wgmma_epilogue("warp", result, row_scale, volatile_note=True)
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

{params}  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const unsigned char* B = reinterpret_cast<const unsigned char*>(Bw);
{tile}
  const int ktiles = K / BK;
  // the swizzle repeats every 1024 bytes of address: start the stages on such a boundary (1 KiB is reserved)
  const uint32_t smem0 = (smem_u32(smem) + 1023u) & ~1023u;

{rows.load_stage if rows else swizzled_stage_loader(32)}
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
{epilogue}}}
"""
    return src


_W4A8_LOCKSTEP_UNDER_WGMMA = """\
      if (gi == 0) {  // while the tensor core works: refill, widen stage kt+1, barrier
        const int next = kt + LOOKAHEAD;  // refills the slot of kt-2
        if (next < ktiles) load_stage(next % STAGES, next);
        copy_commit();
        if (kt + 1 < ktiles) {
          copy_wait<LOOKAHEAD - 1>();   // this thread's copies of stage kt+1 have landed
          widen_stage((kt + 1) % STAGES, (kt + 1) % WBUFS);
          fence_proxy_async();          // the widened bytes (and A kt+1) become visible to wgmma (async proxy)
        }
        __syncthreads();                // B(kt): tile kt+1 complete; everyone is past its wait of kt-1
      }
"""


# the W4A8 kernel's raw B copy of a stage (inside load_stage: base = the slot, k0 = its first k): thread tid copies
# chunk tid % 4 (k 32c .. 32c+31) of weight rows tid / 4 + 64 i to raw + tid*16 + i*4096
W4A8_RAW_B_COPY = """\
    const uint32_t raw = base + A_BYTES + tid * 16;
    #pragma unroll
    for (int i = 0; i < BN / 64; ++i)
      copy_16_async(raw + i * THREADS * 16, b_src + ((size_t)64 * i * (K / 2) + k0 / 2), true);"""

_W4A8_DENSE_LOAD_STAGE = f"""\
  // A: thread tid copies chunk tid % 8 of rows tid / 8 + 32 i (swizzled, as the W8A8 kernel)
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const unsigned char* a_src = A + (size_t)(m0 + lrow) * K + lch * 16;
  auto load_stage = [&](int slot, int kt) {{
    const uint32_t base = smem0 + slot * SLOT_BYTES;
    const int k0 = kt * BK;
    #pragma unroll
    for (int i = 0; i < BM / 32; ++i) {{
      const bool ok = m0 + lrow + 32 * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(base + lswz + i * 32 * 128, ok ? a_src + (32 * i * K + k0) : A, ok);
    }}
{W4A8_RAW_B_COPY}
  }};
"""


def wgmma_w4a8_kernel_source(plan, backend, caps=None, rows: W8A8Rows | None = None) -> str:
    """The wgmma W4A8 kernel: the W8A8 kernel's A operand, tiles, descriptors and epilogue; B arrives as packed
    4-bit rows ([N, K/2] bytes, see ``humming.core.families.wgmma_8bit.layout.pack_int4_kmajor``) and is widened per stage:
    s8 as 16 x code with two masks per 8 codes, e4m3 with three byte permutes per 4 codes.

    Shared memory: STAGES slots of (A tile 128 x 128 B, swizzled | raw B: BN rows x 64 B, linear), then three
    widened B tiles (BN x 128 B, swizzled) used in turn. Thread tid copies raw 16-byte chunk tid % 4 of rows
    tid / 4 + 64 i to raw + tid * 16 + i * 4096, and later widens exactly those bytes (its own cp.async group, so
    no barrier between its wait and its reads) into chunks 2c, 2c + 1 of the same rows of the widened tile.

    Iteration kt: wgmma of stage kt -> (while it runs) refill the slot of kt-2 with stage kt + STAGES - 2, wait
    for stage kt+1's copies and widen them into the next B tile, fence.proxy.async, barrier -> wait for the wgmma
    -> fp32 sums += partial x group scale (groups of 32 / 64 split the stage's four k32 steps into wgmma groups)
    -> next iteration. The barrier sits under the wgmma, not between the promotion and the next wgmma: with three
    widened tiles, the one being overwritten was last read two stages ago. ``rows``: the MoE form's rows
    (W8A8Rows; its load_stage copies the stage's raw B with W4A8_RAW_B_COPY, its epilogue gets block=False: the
    group scales are applied in the loop)."""
    t = plan.tiles
    lay = plan.layout
    if t.threads == 384 and rows is None:  # producer + two consumer warpgroups
        from humming.core.families.wgmma_8bit.generator_ws import wgmma_w4a8_ws_kernel_source

        return wgmma_w4a8_ws_kernel_source(plan, backend, caps)
    if (t.bm, t.bn, t.bk, t.threads) != (128, 128, 128, 256) or t.stages < 4:
        raise ValueError(f"the wgmma W4A8 kernel is written for 128x128x128 tiles, 256 threads, >= 4 slots; got {t}")
    group, gsteps, request = w4a8_group_steps(plan, caps)
    prelude = backend.helpers("wgmma_w4a8", request, n=t.bn)
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in bytes = elements
constexpr int THREADS = 256;             // two warpgroups; warpgroup g owns tile rows 64g .. 64g+63
constexpr int LOOKAHEAD = STAGES - 2;    // stages loading; the slot of kt-2 is refilled at iteration kt
constexpr int WBUFS = 3;                 // widened B tiles: kt multiplied, kt+1 being widened, kt-1 maybe still read
constexpr int GROUP = {group};             // weight-scale group along K
constexpr int GSTEPS = {gsteps};             // k32 steps per wgmma group (one fp32 promotion each)
constexpr int A_BYTES = BM * BK, RAW_BYTES = BN * BK / 2, SLOT_BYTES = A_BYTES + RAW_BYTES, B_BYTES = BN * BK;
constexpr int WB_OFFSET = STAGES * SLOT_BYTES;   // the WBUFS widened B tiles follow the slots
static_assert(BK == 128 && BN == 128, "one 128-byte swizzle row per tile row; 32 accumulator columns per thread");
static_assert(SLOT_BYTES % 1024 == 0 && A_BYTES % 1024 == 0 && B_BYTES % 1024 == 0, "1024-byte aligned tiles");
static_assert(WG_ACC_REGS == BN / 2, "m64nBN accumulators: BN/2 registers per thread");
static_assert(LOOKAHEAD >= 2, "at least four slots: kt-1 (maybe still read), kt, kt+1 (widened), one loading");
static_assert(BK / 32 % GSTEPS == 0, "wgmma groups split the stage's k32 steps evenly");
static_assert(RAW_BYTES == (BN / 64) * THREADS * 16, "each thread copies BN/64 raw chunks");
}}

{rows.params if rows else eight_bit_params(plan.kernel_name, **W4A8_PARAM_DOCS)}  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const unsigned char* B = reinterpret_cast<const unsigned char*>(Bw);
{rows.tile if rows else "  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;"}
  const int ktiles = K / BK;
  const uint32_t smem0 = (smem_u32(smem) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes

  // raw B: thread tid copies chunk tid % 4 (k 32c .. 32c+31) of weight rows tid / 4 + 64 i, to raw + tid*16 + i*4096
  const int brow = tid >> 2, bch = tid & 3;
  const unsigned char* b_src = B + (size_t)(n0 + brow) * (K / 2) + bch * 16;
{rows.load_stage if rows else _W4A8_DENSE_LOAD_STAGE}  // widening: the 16 raw bytes this thread copied (32 codes, k 32c .. 32c+31 of a row) become chunks 2c and
  // 2c + 1 (16 widened bytes each) of the same row of the swizzled B tile; rows + 64 i keep (row mod 8)
  const uint32_t wswz0 = swz128(brow, 2 * bch), wswz1 = swz128(brow, 2 * bch + 1);
  auto widen_stage = [&](int slot, int buf) {{
    const uint32_t raw = smem0 + slot * SLOT_BYTES + A_BYTES + tid * 16;
    const uint32_t wb = smem0 + WB_OFFSET + buf * B_BYTES;
    #pragma unroll
    for (int i = 0; i < BN / 64; ++i) {{
      uint32_t q[4], o[8];
      lds_128(q, raw + i * THREADS * 16);
{w4a8_widen(lay, "      ")}
      st_shared_128(wb + i * 64 * 128 + wswz0, o[0], o[1], o[2], o[3]);
      st_shared_128(wb + i * 64 * 128 + wswz1, o[4], o[5], o[6], o[7]);
    }}
  }};

{W4A8_ACC_DECL}
  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {{
    if (s < ktiles) load_stage(s, s);
    copy_commit();
  }}
  copy_wait<LOOKAHEAD - 1>();  // stage 0 (this thread's copies)
  widen_stage(0, 0);
  fence_proxy_async();
  __syncthreads();             // widened tile 0 and A 0 written by everyone

  // Iteration kt: wgmma(kt) -> refill the slot of kt-2 -> widen kt+1 into tile (kt+1) % 3 -> barrier B(kt) (all
  // overlapped with the wgmma) -> wait -> promote -> the next wgmma right away. Hazards: tile (kt+1) % 3 was last
  // read by wgmma(kt-2), and the slot of kt-2 by wgmma(kt-2): every thread waited for it before B(kt-1), which
  // this thread has passed. Tile kt+1 and A kt+1 are visible to wgmma(kt+1) by the fence before B(kt).
  for (int kt = 0; kt < ktiles; ++kt) {{
    const uint32_t a_tile = smem0 + (kt % STAGES) * SLOT_BYTES + wg * 64 * 128;  // this warpgroup's 64 rows
    const uint32_t b_tile = smem0 + WB_OFFSET + (kt % WBUFS) * B_BYTES;
    const uint64_t desc_a = make_smem_desc(a_tile), desc_b = make_smem_desc(b_tile);
{w4a8_group_loop(gsteps, lay.a_type, under_wgmma=_W4A8_LOCKSTEP_UNDER_WGMMA)}  }}
  // accumulator fragment of m64nBN: warp w (of the warpgroup) holds rows 16w .. 16w+15; for n8 chunk j,
  // facc[4j + 2h + e] is row lane/4 + 8h, column 8j + 2*(lane%4) + e
{rows.epilogue(_facc, False) if rows else wgmma_epilogue("warp")}}}
"""


