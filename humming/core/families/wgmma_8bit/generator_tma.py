"""Generates the warp-specialised TMA wgmma W8A8 kernel (sm_90a): e4m3 x e4m3 with the per-stage fp32 promotion
(per-channel x per-token scales, or 128x128 weight blocks with activations per 128 of K).

Why: the lock-step W8A8 kernel (``generator_wgmma.wgmma_w8a8_kernel_source``) waits for each stage's partial and
adds it into fp32 registers with both warpgroups in step (one block barrier per stage), so the tensor core idles
while both promote; with fast accumulation (no promotion) the same kernel ran 1.4-1.6x faster on the H200. Here the
two consumer warpgroups only meet at mbarriers: while one promotes its partial, the other's wgmmas run.

Threads: 384 = three warpgroups. Warpgroup 0 is the producer (``setmaxnreg`` down to 40 registers); its thread 0
alone issues every copy: per stage one TMA tensor copy of the activation tile (128 rows x 128 bytes) and one of the
weight tile (BN rows x 128 bytes), both 128-byte swizzled by their tensor maps (rows past M or N arrive as zeros),
completing on the slot's FULL mbarrier (expect-tx of the slot's bytes); before it reuses a slot it waits on the
slot's EMPTY mbarrier. Warpgroups 1 and 2 (consumers, ``setmaxnreg`` up to 232): consumer c owns tile rows
64c .. 64c+63; per stage it waits on FULL, issues the four wgmma k32 steps (the first one starts the partial
afresh), waits for them, releases the slot (one arrival per warp on EMPTY: 8 per phase), then adds the partial
(times the block scales) into fp32 registers; then the register epilogue of the lock-step kernel.

Shared memory: STAGES slots of (A 128 x 128 B | B BN x 128 B), 1024-byte aligned, then 2 x STAGES mbarriers.
Phases: stage j is the (j / STAGES)-th use of its slot: FULL parity (j / STAGES) & 1; the release the producer
waits for before it copies stage j (j >= STAGES) into the slot has parity (j / STAGES + 1) & 1.
The tensor maps are the last two kernel parameters (``humming.api.tma_boxes`` says what they cover).
"""
from __future__ import annotations

from humming.core.common.kernel_params import eight_bit_params
from humming.core.common.wgmma import WS_BLOCK_HEAD
from humming.core.families.wgmma_8bit.pieces import wgmma_epilogue
from humming.devices.base import HelperRequest

THREADS = 384


def wgmma_w8a8_tma_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    if (t.bm, t.bn, t.bk, t.threads, t.bulk) != (128, 128, 128, THREADS, 1) or t.stages < 2:
        raise ValueError(f"the TMA wgmma W8A8 kernel is written for 128x128x128 tiles, {THREADS} threads, TMA copies, "
                         f">= 2 slots; got {t}")
    if plan.instruction.a_type not in ("e4m3", "e5m2"):
        raise ValueError(f"the TMA wgmma W8A8 kernel promotes fp8 partials; {plan.instruction.a_type} is not fp8")
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=None, async_copy=True, caps=caps)
    prelude = backend.helpers("wgmma_ws", request, n=t.bn) + backend.helpers("tensor_copy", caps=caps, mbarriers=False)
    block = getattr(plan.layout, "weight_scale", "") == "block"
    if block:
        ts_doc = "activation scales per 128 of K [M, K/128] (row-major)"
        s_doc = "weight scales per 128x128 block [N/128, K/128] (row-major)"
        scale_decl = """\
  // block scales (a stage is one k block): activations TS [M, K/128] for this thread's rows arow and arow + 8
  // (clamped to a valid row: rows past M hold zeros), weights S [N/128, K/128] for this tile's n block
  const int arow = m0 + cw * 16 + (lane >> 2);
  const float* ts_lo = TS + (size_t)min(arow, M - 1) * ktiles;
  const float* ts_hi = TS + (size_t)min(arow + 8, M - 1) * ktiles;
  const float* ws_blk = S + (size_t)blockIdx.y * ktiles;
"""
        load_scales = """
    const float wsc = load_f32(ws_blk + kt);  // the block scales of k block kt (loaded while the wgmmas run)
    const float bs_lo = load_f32(ts_lo + kt) * wsc, bs_hi = load_f32(ts_hi + kt) * wsc;"""
        promote = """    #pragma unroll
    for (int i = 0; i < WG_ACC_REGS; ++i)  // acc[4j + 2h + e] is row arow + 8h
      facc[i] += wg_acc_to_f32(acc[i]) * ((i & 2) ? bs_hi : bs_lo);"""
        row_scale = "scale;  // the activation scales were applied per k block"
        epilogue = wgmma_epilogue("cw", row_scale=row_scale)
    else:
        ts_doc = s_doc = None
        scale_decl = load_scales = ""
        promote = """    #pragma unroll
    for (int i = 0; i < WG_ACC_REGS; ++i) facc[i] += acc[i];"""
        epilogue = wgmma_epilogue("cw")
    docs = {k: v for k, v in (("ts_doc", ts_doc), ("s_doc", s_doc)) if v}
    params = eight_bit_params(plan.kernel_name, **docs, tensor_maps=(
        "AMAP", "activation codes [M, K]: boxes of 128 rows x 128 bytes, 128-byte swizzle",
        "BMAP", "weight codes [N, K]: boxes of BN rows x 128 bytes, 128-byte swizzle"))
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in bytes = elements
constexpr int THREADS = {THREADS};             // warpgroup 0 produces, warpgroups 1 and 2 consume (64 tile rows each)
constexpr int A_BYTES = BM * BK, B_BYTES = BN * BK;
constexpr int SLOT_BYTES = A_BYTES + B_BYTES;                // A | B
constexpr int BAR_OFFSET = STAGES * SLOT_BYTES;              // FULL[STAGES], then EMPTY[STAGES] (8 bytes each)
static_assert(BK == 128, "one 128-byte swizzle row per tile row");
static_assert(SLOT_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "1024-byte aligned tiles (swizzle period)");
static_assert(WG_ACC_REGS == BN / 2, "m64nBN accumulators: BN/2 registers per thread");
}}

{params}{WS_BLOCK_HEAD};
  if (tid == 0) {{
    #pragma unroll 1
    for (int s = 0; s < STAGES; ++s) {{
      mbar_init(full0 + 8 * s, 1);   // the producer's expect-tx arrival; the copies complete the phase
      mbar_init(empty0 + 8 * s, 8);  // one arrival per consumer warp once its wgmmas of the stage are done
    }}
    mbar_init_fence();
  }}
  __syncthreads();

  if (wg == 0) {{  // ---------------- producer: thread 0 issues every tensor copy
    setmaxnreg_dec<40>();
    if (tid == 0) {{
      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {{
        const int s = kt % STAGES;
        if (kt >= STAGES) mbar_wait(empty0 + 8 * s, ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
        mbar_expect_tx(full0 + 8 * s, SLOT_BYTES);
        tma_load_2d(smem0 + s * SLOT_BYTES, &AMAP, kt * BK, m0, full0 + 8 * s);
        tma_load_2d(smem0 + s * SLOT_BYTES + A_BYTES, &BMAP, kt * BK, n0, full0 + 8 * s);
      }}
    }}
    return;
  }}

  // ---------------- consumers: wgmma, release, promotion, epilogue
  setmaxnreg_inc<232>();
  const int cw = warp - 4;  // consumer warp 0..7; consumer warpgroup cw / 4 owns tile rows 64 (cw / 4) ..
  wg_acc_t acc[WG_ACC_REGS];
  float facc[WG_ACC_REGS];  // fp32 sums of the per-stage partials (promotion)
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) {{ acc[i] = 0; facc[i] = 0.0f; }}
{scale_decl}  #pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {{
    const int s = kt % STAGES;
    const uint32_t slot = smem0 + s * SLOT_BYTES;
    const uint64_t desc_a = make_smem_desc(slot + (cw >> 2) * 64 * 128), desc_b = make_smem_desc(slot + A_BYTES);
    mbar_wait(full0 + 8 * s, (kt / STAGES) & 1);  // both tiles of stage kt have landed
    wgmma_fence_operand(acc);
    wgmma_fence();
    #pragma unroll
    for (int ks = 0; ks < BK / 32; ++ks)  // k32 steps: the first one starts the partial afresh (scale-d = 0)
      wgmma_k32(acc, desc_a + 2 * ks, desc_b + 2 * ks, ks > 0);
    wgmma_commit();{load_scales}
    wgmma_wait<0>();             // this stage's partial is complete (the other consumer's wgmmas keep the tensor core busy)
    wgmma_fence_operand(acc);
    if (lane == 0) mbar_arrive(empty0 + 8 * s);  // this warp is done with the slot
{promote}
  }}
  // accumulator fragment of m64nBN: consumer warp cw holds tile rows 16 cw .. 16 cw + 15; for n8 chunk j,
  // facc[4j + 2h + e] is row lane/4 + 8h, column 8j + 2*(lane%4) + e
{epilogue}}}
"""
