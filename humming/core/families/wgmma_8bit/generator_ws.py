"""Generates the warp-specialised wgmma W4A8 kernel (sm_90a): one producer warpgroup copies and widens,
two consumer warpgroups multiply and promote, and mbarriers instead of block-wide barriers connect them.

Why: in the lock-step W4A8 kernel (``generator_wgmma.wgmma_w4a8_kernel_source``) every thread copies, widens,
multiplies and promotes, with one block barrier per stage; on the H200 it issued at 0.33 instructions per cycle
and scheduler (long- and short-scoreboard stalls: each step waits for the one before) and ran at half the
speed of the W8A8 kernel. Here the widening of later stages runs on its own warps, next to the wgmmas.

Threads: 384 = three warpgroups. Warpgroup 0 (producer, ``setmaxnreg`` down to 40 registers): thread p copies
A chunk p % 8 of rows p / 8 + 16 i and raw B chunk p % 4 (32 codes) of rows p / 4 + 32 i with cp.async,
waits for its own copies, widens exactly the raw bytes it copied into the swizzled B tile of the same slot,
fences them for the async proxy and arrives on the slot's FULL barrier (128 arrivals). Warpgroups 1 and 2
(consumers, ``setmaxnreg`` up to 232): consumer c owns tile rows 64c .. 64c+63; per stage it waits on FULL,
issues the wgmma k32 steps, waits for them, arrives on the slot's EMPTY barrier (256 arrivals) and adds the
partial times its group scale into fp32 sums; then the epilogue of the lock-step kernel.

Shared memory: STAGES slots of (A 128 x 128 B swizzled | widened B BN x 128 B swizzled | raw B BN x 64 B),
then 2 x STAGES mbarriers. The producer runs LOOKAHEAD = STAGES - 2 stages of copies ahead of the stage it
widens; before copying stage j into slot j % STAGES it waits until the consumers released stage j - STAGES.
Phases: stage j is the (j / STAGES)-th use of its slot: FULL parity (j / STAGES) & 1, and the release the
producer waits for before reusing the slot for stage j has parity (j / STAGES + 1) & 1.
"""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.kernel_params import eight_bit_params
from humming.core.common.wgmma import WS_BLOCK_HEAD
from humming.core.families.wgmma_8bit.pieces import (
    W4A8_ACC_DECL,
    W4A8_PARAM_DOCS,
    w4a8_group_loop,
    w4a8_group_steps,
    w4a8_widen,
    wgmma_epilogue,
)

# a consumer's last wgmma group of a stage has read the slot: release it to the producer
_RELEASE_SLOT = "      if (gi == BK / 32 / GSTEPS - 1) mbar_arrive(empty0 + 8 * (kt % STAGES));  // the slot is free\n"


def wgmma_w4a8_ws_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    lay = plan.layout
    if (t.bm, t.bn, t.bk, t.threads) != (128, 128, 128, 384) or t.stages < 3:
        raise ValueError(f"the warp-specialised wgmma W4A8 kernel is written for 128x128x128 tiles, 384 threads, "
                         f">= 3 slots; got {t}")
    group, gsteps, request = w4a8_group_steps(plan, caps)
    prelude = backend.helpers("wgmma_ws", request, n=t.bn)
    tma = bool(t.bulk)
    widen_loop = _WIDEN_LOOP.fill(widen=w4a8_widen(lay, ""))
    if tma:  # thread 0 brings A and the packed weights in by TMA; the producer warpgroup only widens
        prelude += backend.helpers("tensor_copy", caps=caps, mbarriers=False)
        producer = _TMA_PRODUCER.fill(widen_loop=widen_loop)
        params = eight_bit_params(plan.kernel_name, **W4A8_PARAM_DOCS, tensor_maps=(
            "AMAP", "activation codes [M, K]: boxes of 128 rows x 128 bytes, 128-byte swizzle",
            "BMAP", "packed weights [N, K/2]: boxes of BN rows x 64 bytes, not swizzled"))
        load_bars = "\n      mbar_init(load0 + 8 * s, 1);    // the tensor copies of the stage (expect-tx arrival)"
        bar_doc = "FULL[STAGES], EMPTY[STAGES], then LOAD[STAGES] (8 bytes each)"
    else:
        producer = _CP_ASYNC_PRODUCER.fill(widen_loop=widen_loop)
        params = eight_bit_params(plan.kernel_name, **W4A8_PARAM_DOCS)
        load_bars = ""
        bar_doc = "FULL[STAGES], then EMPTY[STAGES] (8 bytes each)"
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in bytes = elements
constexpr int THREADS = 384;             // warpgroup 0 produces, warpgroups 1 and 2 consume (64 tile rows each)
constexpr int LOOKAHEAD = STAGES - 2;    // stages of copies in flight ahead of the one being widened
constexpr int GROUP = {group};             // weight-scale group along K
constexpr int GSTEPS = {gsteps};             // k32 steps per wgmma group (one fp32 promotion each)
constexpr int A_BYTES = BM * BK, WB_BYTES = BN * BK, RAW_BYTES = BN * BK / 2;
constexpr int SLOT_BYTES = A_BYTES + WB_BYTES + RAW_BYTES;   // A | widened B | raw B
constexpr int BAR_OFFSET = STAGES * SLOT_BYTES;              // {bar_doc}
static_assert(BK == 128 && BN == 128, "one 128-byte swizzle row per tile row; 32 accumulator columns per thread");
static_assert(SLOT_BYTES % 1024 == 0 && A_BYTES % 1024 == 0 && WB_BYTES % 1024 == 0, "1024-byte aligned tiles");
static_assert(WG_ACC_REGS == BN / 2, "m64nBN accumulators: BN/2 registers per thread");
static_assert(LOOKAHEAD >= 1, "at least three slots");
static_assert(BK / 32 % GSTEPS == 0, "wgmma groups split the stage's k32 steps evenly");
}}

{params}{WS_BLOCK_HEAD}{", load0 = empty0 + 8 * STAGES" if tma else ""};
  if (tid == 0) {{
    #pragma unroll 1
    for (int s = 0; s < STAGES; ++s) {{
      mbar_init(full0 + 8 * s, 128);   // every producer thread arrives once its part of the stage is written
      mbar_init(empty0 + 8 * s, 256);  // every consumer thread arrives once its wgmmas of the stage are done{load_bars}
    }}
    mbar_init_fence();
  }}
  __syncthreads();

{producer}
  // ---------------- consumers: wgmma, release, promotion, epilogue
  setmaxnreg_inc<232>();
  const int cw = warp - 4;  // consumer warp 0..7; consumer warpgroup cw / 4 owns tile rows 64 (cw / 4) ..
{W4A8_ACC_DECL}  #pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {{
    const uint32_t slot = smem0 + (kt % STAGES) * SLOT_BYTES;
    const uint64_t desc_a = make_smem_desc(slot + (cw >> 2) * 64 * 128), desc_b = make_smem_desc(slot + A_BYTES);
    mbar_wait(full0 + 8 * (kt % STAGES), (kt / STAGES) & 1);
{w4a8_group_loop(gsteps, lay.a_type, after_wait=_RELEASE_SLOT)}  }}
  // accumulator fragment of m64nBN: consumer warp cw holds tile rows 16 cw .. 16 cw + 15; for n8 chunk j,
  // facc[4j + 2h + e] is row lane/4 + 8h, column 8j + 2*(lane%4) + e
{wgmma_epilogue("cw")}}}
"""


# both producers: widen the 16 raw bytes per row this thread owns (32 codes, at raw + i * 2048) into chunks 2c, 2c + 1
# of the same rows of the slot's swizzled B tile
_WIDEN_LOOP = Template("""#pragma unroll
for (int i = 0; i < BN / 32; ++i) {
  uint32_t q[4], o[8];
  lds_128(q, raw + i * 128 * 16);
  ${widen}
  st_shared_128(wb + i * 32 * 128 + wswz0, o[0], o[1], o[2], o[3]);
  st_shared_128(wb + i * 32 * 128 + wswz1, o[4], o[5], o[6], o[7]);
}""")

# the producer with cp.async: every producer thread copies its chunks of A and of the packed weights, waits for its
# own copies, widens exactly the raw bytes it copied into the swizzled B tile of the slot, then arrives on FULL
_CP_ASYNC_PRODUCER = Template("""  if (wg == 0) {  // ---------------- producer: copies, widening, FULL arrivals
    setmaxnreg_dec<40>();
    const int p = tid;
    // A: chunk p % 8 of rows p / 8 + 16 i (swizzled; (row mod 8) is the same for every i)
    const int lrow = p >> 3, lch = p & 7;
    const uint32_t lswz = swz128(lrow, lch);
    const unsigned char* a_src = A + (size_t)(m0 + lrow) * K + lch * 16;
    // raw B: chunk p % 4 (k 32c .. 32c+31) of weight rows p / 4 + 32 i, to raw + p * 16 + i * 2048
    const int brow = p >> 2, bch = p & 3;
    const unsigned char* b_src = reinterpret_cast<const unsigned char*>(Bw) + (size_t)(n0 + brow) * (K / 2) + bch * 16;
    const uint32_t wswz0 = swz128(brow, 2 * bch), wswz1 = swz128(brow, 2 * bch + 1);
    auto load_stage = [&](int kt) {
      const uint32_t slot = smem0 + (kt % STAGES) * SLOT_BYTES;
      const uint32_t a_tile = slot + lswz, raw = slot + A_BYTES + WB_BYTES + p * 16;
      const int k0 = kt * BK;
      #pragma unroll
      for (int i = 0; i < BM / 16; ++i) {
        const bool ok = m0 + lrow + 16 * i < M;  // rows past M are zero-filled (the source stays a valid address)
        copy_16_async(a_tile + i * 16 * 128, ok ? a_src + (16 * i * K + k0) : A, ok);
      }
      #pragma unroll
      for (int i = 0; i < BN / 32; ++i)
        copy_16_async(raw + i * 128 * 16, b_src + ((size_t)32 * i * (K / 2) + k0 / 2), true);
    };
    #pragma unroll 1
    for (int j = 0; j < LOOKAHEAD; ++j) {  // the first slots are free
      if (j < ktiles) load_stage(j);
      copy_commit();
    }
    #pragma unroll 1
    for (int kt = 0; kt < ktiles; ++kt) {
      const int next = kt + LOOKAHEAD;
      if (next < ktiles) {
        if (next >= STAGES) mbar_wait(empty0 + 8 * (next % STAGES), ((next / STAGES) + 1) & 1);
        load_stage(next);
      }
      copy_commit();
      copy_wait<LOOKAHEAD>();  // this thread's copies of stage kt have landed
      // widen the 16 raw bytes this thread copied per row (32 codes) into chunks 2c, 2c + 1 of the same row
      const uint32_t slot = smem0 + (kt % STAGES) * SLOT_BYTES;
      const uint32_t raw = slot + A_BYTES + WB_BYTES + p * 16, wb = slot + A_BYTES;
      ${widen_loop}
      fence_proxy_async();          // the widened bytes and the copied A become visible to wgmma (async proxy)
      mbar_arrive(full0 + 8 * (kt % STAGES));
    }
    return;
  }""")

# the producer with TMA: thread 0 issues both tensor copies of a stage (A swizzled, the packed weights [N, K/2] as
# dense 64-byte rows, i.e. the cp.async producer's raw layout) LOOKAHEAD stages ahead, each after the consumers
# released the slot (EMPTY); every producer thread waits for the stage's copies (LOAD), widens its 16 raw bytes per
# row into the swizzled B tile, fences them for the async proxy and arrives on FULL
_TMA_PRODUCER = Template("""  if (wg == 0) {  // ---------------- producer: tensor copies (thread 0), widening, FULL arrivals
    setmaxnreg_dec<40>();
    const int p = tid;
    // raw B chunk p % 4 (32 codes) of weight rows p / 4 + 32 i lies at raw + p * 16 + i * 2048 (64-byte rows)
    const int brow = p >> 2, bch = p & 3;
    const uint32_t wswz0 = swz128(brow, 2 * bch), wswz1 = swz128(brow, 2 * bch + 1);
    auto issue = [&](int kt) {  // thread 0: stage kt's A tile and packed weights into its slot
      const int s = kt % STAGES;
      const uint32_t slot = smem0 + s * SLOT_BYTES;
      if (kt >= STAGES) mbar_wait(empty0 + 8 * s, ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
      mbar_expect_tx(load0 + 8 * s, A_BYTES + RAW_BYTES);
      tma_load_2d(slot, &AMAP, kt * BK, m0, load0 + 8 * s);
      tma_load_2d(slot + A_BYTES + WB_BYTES, &BMAP, kt * (BK / 2), n0, load0 + 8 * s);
    };
    if (p == 0) {
      #pragma unroll 1
      for (int j = 0; j < LOOKAHEAD && j < ktiles; ++j) issue(j);  // the first slots are free
    }
    #pragma unroll 1
    for (int kt = 0; kt < ktiles; ++kt) {
      if (p == 0 && kt + LOOKAHEAD < ktiles) issue(kt + LOOKAHEAD);
      mbar_wait(load0 + 8 * (kt % STAGES), (kt / STAGES) & 1);  // stage kt's copies have landed
      // widen the 16 raw bytes per row this thread owns (32 codes) into chunks 2c, 2c + 1 of the same row
      const uint32_t slot = smem0 + (kt % STAGES) * SLOT_BYTES;
      const uint32_t raw = slot + A_BYTES + WB_BYTES + p * 16, wb = slot + A_BYTES;
      ${widen_loop}
      fence_proxy_async();          // the widened bytes become visible to wgmma (async proxy)
      mbar_arrive(full0 + 8 * (kt % STAGES));
    }
    return;
  }""")
