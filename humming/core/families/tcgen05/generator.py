"""Generates the tcgen05 W8A8 kernel (Blackwell datacenter targets): e4m3 x e4m3 -> fp32 with kind::f8f6f4, or
s8 x s8 -> int32 with kind::i8 where the profile declares it. Compiled for the profile's target, never run on
hardware (see ``humming.core.families.tcgen05.planner``: selected only with HUMMING_UNVERIFIED_KERNELS=1).

Block tile 128 x BN x 128 bytes of K, one CTA (cta_group::1), 128 threads = 4 warps.

Tensor Memory. Warp 0 allocates BN columns (a power of two >= 32) with tcgen05.alloc, which writes the TMEM address
to shared memory, and gives up the allocation permit; the accumulator D (128 x BN, 32 bits per element) lives at
lane = tile row, column = tile column. Warp 0 deallocates at the end.

Shared memory. Both operands are K-major tiles of 128-byte rows (A: 128 activation rows, B: BN weight rows = output
channels) with the 128-byte swizzle: chunk c (16 bytes) of row r lives at r*128 + ((c ^ (r % 8)) * 16). Tiles are
1024-byte aligned (the swizzle acts on address bits 4-6 ^= 7-9). The tcgen05 shared-memory descriptor of an operand
points at its first row (+32 bytes per k32 step), stride 1024 bytes between groups of 8 rows, swizzle mode 2.

Pipeline. cp.async into STAGES slots, STAGES-1 stages ahead. Iteration kt: wait for this thread's copies of stage
kt, fence.proxy.async (cp.async writes are generic-proxy; tcgen05.mma reads through the async proxy), barrier,
tcgen05.fence::after_thread_sync; thread 0 issues the four k32 tcgen05.mma of the stage (the first of the whole K
with enable-input-d = 0) and tcgen05.commit to the stage slot's mbarrier. Then every thread refills the slot of kt-1
with stage kt+STAGES-1 after waiting (try_wait.parity) for that slot's previous commit: the MMAs that read it are done.

Epilogue: wait for the last commit, tcgen05.fence::after_thread_sync; warp w loads TMEM lanes 32w..32w+31 (its 32
output rows, one per thread) 32 columns at a time (tcgen05.ld.32x32b.x32, tcgen05.wait::ld), accumulator as fp32 x
per-token scale TS[m] x per-channel scale CS[n] x out_scale (x *GS), + bias, stored as four 16-byte f16/bf16 pieces.
The parameter list is the one of the 8-bit mma.sync kernel (S, WS, CNT and k_per_split are unused).
"""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.common.kernel_params import eight_bit_params
from humming.core.common.wgmma import swizzled_stage_loader
from humming.devices.base import HelperRequest

# ---- CUDA text shared by the three tcgen05 kernels (W8A8, WnA16, block-scaled): one CTA of 128 threads, an mbarrier
# per slot, the accumulator in Tensor Memory read back 32 columns at a time by the warp that owns the TMEM lanes
TC_BLOCK_HEAD = """\
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ __align__(8) uint64_t mma_bar[STAGES];  // completes once per commit of the stage using the slot
  __shared__ uint32_t tmem_slot;                      // written by tcgen05.alloc
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
"""
TC_BLOCK_TILE = "  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;"
TC_BLOCK_DECL = TC_BLOCK_HEAD + TC_BLOCK_TILE + "\n"
# the epilogue's store of row ``row``'s 32 columns from col0 (packed: 16 words of two 16-bit values)
_TC_STORE = """    if (row < M) {
      uint16_t* out = C + (size_t)row * N + col0;
      #pragma unroll
      for (int q = 0; q < 4; ++q)
        store_128(out + 8 * q, packed[4 * q], packed[4 * q + 1], packed[4 * q + 2], packed[4 * q + 3]);
    }
"""


@dataclass(frozen=True)
class Tcgen05Rows:
    """Where the tcgen05 WnA16 kernel's rows come from and go to, other than rows m0 .. m0 + BM of A and C (the MoE
    form, humming.core.families.moe_tcgen05). ``params``: parameters after GS (starting with ","); ``tile``: m0 / n0
    and what follows from them, before Tensor Memory is allocated (it may return early; it fills the shared
    ``a_row[BM]``: the row of A of each block row, -1 for padding, A having KA columns); ``after_row``: epilogue
    lines after ``row`` is declared; ``weight``: what multiplies (accumulator x scale + bias) of the row;
    ``store``: the row's 32 columns from col0 (``packed``) to C."""

    params: str
    tile: str
    after_row: str
    weight: str
    store: str


@dataclass(frozen=True)
class Tcgen05W8A8Rows:
    """Where the tcgen05 W8A8 kernel's rows come from and go to (the MoE form, humming.core.families.moe_tcgen05):
    ``params``: the whole parameter list (signature line through the opening brace); ``tile``: m0 / n0 and what
    follows from them, before Tensor Memory is allocated (it may return early); ``load_stage``: the
    ``load_stage(slot, kt)`` lambda and its setup; ``epilogue``: from the wait for the last commit to the end."""

    params: str
    tile: str
    load_stage: str
    epilogue: str


_TC_ROW_SCALE = "\n  const float rs = (TS && row < M) ? scale * load_f32(TS + row) : scale;"
TC_CHANNEL_SCALES = """\
      float c0 = 1.0f, c1 = 1.0f, b0 = 0.0f, b1 = 0.0f;
      if (CS) { c0 = load_f32(CS + col0 + j); c1 = load_f32(CS + col0 + j + 1); }
"""
_TC_BIAS_ONLY = "      float b0 = 0.0f, b1 = 0.0f;\n"
_TC_SCALED_CHANNEL_SCALES = """\
      float c0 = scale, c1 = scale, b0 = 0.0f, b1 = 0.0f;
      if (CS) { c0 *= load_f32(CS + col0 + j); c1 *= load_f32(CS + col0 + j + 1); }
"""


def tmem_setup(alloc: str = "the accumulator's columns and gives up the permit", tmem_note: str = "") -> str:
    """Warp 0 allocates TMEM_COLS columns (``alloc`` says what for), thread 0 initialises the slots' mbarriers, and
    every thread reads the TMEM address back."""
    return f"""\
  if (warp == 0) {{               // one warp allocates {alloc}
    tmem_alloc(smem_u32(&tmem_slot), TMEM_COLS);
    tmem_relinquish();
  }}
  if (tid == 0) {{
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(smem_u32(&mma_bar[s]), 1);
    mbar_init_fence();
  }}
  tc_fence_before();
  __syncthreads();
  tc_fence_after();
  const uint32_t tmem = tc_lds_32(smem_u32(&tmem_slot));  // lane 0, first allocated column{tmem_note}
"""


def tmem_epilogue(after_row: str, pair_scales: str, mul0: str, mul1: str, weight: str = "",
                  store: str = _TC_STORE) -> str:
    """From the wait for the last commit to the end of the kernel: thread t of warp w loads accumulator row 32w + t
    (``after_row`` follows the row's declaration), per column pair j, j + 1 ``pair_scales`` declares b0, b1 (and what
    ``mul0``, ``mul1`` multiply the accumulators by), + bias (times ``weight``), ``store`` (four 16-byte stores);
    TMEM freed by warp 0."""
    if weight:
        pack_line = (f"f32x2_to_act2((tc_acc_to_f32(v[j]){mul0} + b0){weight}, "
                     f"(tc_acc_to_f32(v[j + 1]){mul1} + b1){weight})")
    else:
        pack_line = f"f32x2_to_act2(tc_acc_to_f32(v[j]){mul0} + b0, tc_acc_to_f32(v[j + 1]){mul1} + b1)"
    return f"""\
  {{
    const int last = ktiles - 1;  // its commit covers every MMA of the tile
    mbar_wait(smem_u32(&mma_bar[last % STAGES]), (uint32_t)((last / STAGES) & 1));
  }}
  tc_fence_after();

  // epilogue: thread t of warp w holds output row 32w + t (TMEM lane), 32 columns per load
  const float scale = GS ? out_scale * load_f32(GS) : out_scale;
  const int row = m0 + warp * 32 + lane;{after_row}
  #pragma unroll 1
  for (int c = 0; c < BN / 32; ++c) {{
    uint32_t v[32];
    tmem_ld32(v, tmem + ((uint32_t)(warp * 32) << 16) + (uint32_t)(c * 32));
    tmem_ld_wait();
    const int col0 = n0 + 32 * c;
    uint32_t packed[16];
    #pragma unroll
    for (int j = 0; j < 32; j += 2) {{
{pair_scales}      if (BIAS) {{
        const uint32_t bb = load_g32(BIAS + col0 + j);  // the two 16-bit biases of columns j, j + 1
        b0 = act_to_f32((uint16_t)(bb & 0xFFFFu)); b1 = act_to_f32((uint16_t)(bb >> 16));
      }}
      packed[j / 2] = {pack_line};
    }}
{store}  }}
  tc_fence_before();
  __syncthreads();               // every warp's loads are complete before the columns are freed
  if (warp == 0) {{
    tc_fence_after();
    tmem_dealloc(tmem, TMEM_COLS);
  }}
}}
"""


def tcgen05_w8a8_kernel_source(plan, backend, caps=None, rows: Tcgen05W8A8Rows | None = None) -> str:
    """The tcgen05 W8A8 kernel; ``rows``: the MoE form's rows (Tcgen05W8A8Rows)."""
    from humming.core.families.tcgen05.planner import KINDS

    t = plan.tiles
    ins = plan.instruction
    if (t.bm, t.bk, t.threads) != (128, 128, 128) or t.stages < 2 or t.bn not in (128, 256):
        raise ValueError(f"the tcgen05 kernel is written for 128x(128|256)x128 tiles, 128 threads; got {t}")
    a_type = ins.a_type
    kind, acc = KINDS[a_type]
    if ins.kind != kind:
        raise ValueError(f"tcgen05 {a_type} is kind::{kind}, the plan says kind::{ins.kind}")
    idesc = backend.data("tcgen05_idesc", kind=kind, a_type=a_type, b_type=a_type, acc=acc, m=128, n=t.bn)
    request = HelperRequest(mma=ins, act=plan.act, weight=None, async_copy=True, caps=caps)
    prelude = backend.helpers("tcgen05", request, acc=acc)
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in bytes = elements
constexpr int THREADS = 128;             // warp w reads accumulator rows (TMEM lanes) 32w .. 32w+31
constexpr int LOOKAHEAD = STAGES - 1;    // stages loading while one is multiplied
constexpr int A_BYTES = BM * BK, B_BYTES = BN * BK;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
constexpr uint32_t TMEM_COLS = BN;       // fp32/s32 accumulator: one column per output column
constexpr uint32_t IDESC = {idesc:#010x}u;  // kind::{kind} {a_type} x {a_type} -> {acc}, K-major A and B, M=128, N=BN
static_assert(BK == 128, "one 128-byte swizzle row per tile row");
static_assert(STAGE_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "tiles stay 1024-byte aligned (swizzle period)");
static_assert(THREADS == 128 && BM % 16 == 0 && BN % 16 == 0, "128 threads copy 16 rows of 8 chunks at a time");
static_assert((TMEM_COLS & (TMEM_COLS - 1)) == 0 && TMEM_COLS >= 32 && TMEM_COLS <= 512, "TMEM allocation size");
}}

{rows.params if rows else eight_bit_params(plan.kernel_name)}  using namespace cfg;
{TC_BLOCK_HEAD}  const unsigned char* B = reinterpret_cast<const unsigned char*>(Bw);
{rows.tile if rows else TC_BLOCK_TILE}
  const int ktiles = K / BK;
  // the swizzle repeats every 1024 bytes of address: start the stages on such a boundary (1 KiB is reserved)
  const uint32_t smem0 = (smem_u32(smem) + 1023u) & ~1023u;

{tmem_setup()}
{rows.load_stage if rows else swizzled_stage_loader(16)}
  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {{
    if (s < ktiles) load_stage(s, s);
    copy_commit();
  }}

  for (int kt = 0; kt < ktiles; ++kt) {{
    const int slot = kt % STAGES;
    copy_wait<LOOKAHEAD - 1>();  // this thread's copies of stage kt have landed
    fence_proxy_async();         // ... and are visible to tcgen05.mma (async proxy)
    __syncthreads();             // everyone's copies
    tc_fence_after();
    if (tid == 0) {{              // one thread issues the stage's MMAs and the commit
      const uint32_t a_tile = smem0 + slot * STAGE_BYTES, b_tile = a_tile + A_BYTES;
      const uint64_t desc_a = tc_smem_desc(a_tile), desc_b = tc_smem_desc(b_tile);
      #pragma unroll
      for (int ks = 0; ks < BK / 32; ++ks)  // k32 steps: +32 bytes inside the swizzled rows = +2 in the address field
        tc_mma(tmem, desc_a + 2 * ks, desc_b + 2 * ks, IDESC, (kt > 0 || ks > 0) ? 1 : 0);
      tc_commit(smem_u32(&mma_bar[slot]));  // arrives when these (and all earlier) MMAs have completed
    }}
    __syncwarp();
    {{
      const int next = kt + LOOKAHEAD;  // refills the slot of kt-1
      if (next < ktiles) {{
        const int ns = next % STAGES;
        if (next >= STAGES) mbar_wait(smem_u32(&mma_bar[ns]), (uint32_t)((next / STAGES - 1) & 1));
        load_stage(ns, next);
      }}
      copy_commit();
    }}
  }}
{rows.epilogue if rows else tmem_epilogue(_TC_ROW_SCALE, TC_CHANNEL_SCALES, " * rs * c0", " * rs * c1")}"""


def tcgen05_kernel_source(plan, backend, caps=None) -> str:
    """The tcgen05 kernel of a plan: block-scaled W4A4/W4A8 (``Tcgen05BlockScaledLayout``), WnA16 (the dequant-smem
    path) or W8A8."""
    from humming.core.families.mma_blockscaled.layout import Tcgen05BlockScaledLayout
    from humming.core.families.tcgen05.planner import WNA16_PATH

    if isinstance(plan.layout, Tcgen05BlockScaledLayout):
        return tcgen05_blockscaled_kernel_source(plan, backend, caps)
    if plan.path == WNA16_PATH:
        return tcgen05_wna16_kernel_source(plan, backend, caps)
    return tcgen05_w8a8_kernel_source(plan, backend, caps)


def tcgen05_wna16_kernel_source(plan, backend, caps=None, rows: Tcgen05Rows | None = None) -> str:
    """The tcgen05 WnA16 kernel: f16/bf16 activations x signed int4 weights dequantized into shared memory,
    kind::f16 -> fp32 in Tensor Memory. Compiled only, never run on hardware.

    Weights as the wgmma WnA16 kernel takes them (``humming.core.families.wgmma_dequant.layout``: 64x64 blocks of 2 KB, group
    scales [K/group, N] in the activation type, per-channel fp32 scales in the epilogue); same cp.async slot layout
    (A tile 128 rows x 128 B, raw codes BN x 32 B, scale rows). One CTA of 128 threads, tile 128 x BN x 64, TMEM
    accumulator of BN columns (warp 0 allocates), the W8A8 tcgen05 kernel's descriptors and epilogue.

    Dequantization: thread tid owns raw chunk c = tid + 128 i (i < BN/64): 16 bytes = 4 words of channel n = c/2,
    k 32h .. 32h+31 (h = c % 2); it copies the chunk itself (its own copy_wait covers it), and word j becomes the
    16-byte chunk 4h + j of row n of the B tile (dq_raw pair J, + -(magic + 8) exactly, x the group scale).

    Pipeline, iteration kt (LOOKAHEAD = STAGES - 1 cp.async stages ahead; two dequantized B tiles):
      wait for this thread's copies of stage kt+1 -> fence.proxy.async (A copies of kt and the dequant stores of kt,
      made in iteration kt-1, become visible to tcgen05.mma) -> __syncthreads -> thread 0 issues the four k16 MMAs
      of stage kt (A slot kt % STAGES, B tile kt % 2) and commits to the slot's mbarrier -> everyone waits for the
      commit of kt-1 (its MMAs read the slot refilled now and the B tile written now) -> refill the slot of kt-1
      with stage kt + LOOKAHEAD -> dequantize stage kt+1 into B tile (kt+1) % 2 while the MMAs of kt run.
    Epilogue: accumulator x out_scale (x *GS) x CS[n] + bias, the mma.sync tile kernel's parameter list.
    ``rows``: the MoE form's rows (Tcgen05Rows)."""
    from humming.core.families.tcgen05.planner import WNA16_BK, WNA16_BQ, WNA16_PATH
    from humming.core.families.wgmma_dequant.generator import wna16_params, wna16_stage_lambdas
    from humming.core.families.wgmma_dequant.planner import scale_rows, stage_bytes

    t = plan.tiles
    lay = plan.layout
    ins = plan.instruction
    if ((rows is None and plan.path != WNA16_PATH) or (t.bm, t.bk, t.threads) != (128, WNA16_BK, 128) or t.stages < 3
            or t.bn % 128):
        raise ValueError(f"the tcgen05 WnA16 kernel is written for 128x(128|256)x64 tiles, 128 threads, >= 3 stages; "
                         f"got {t}")
    dec = lay.decode
    if (dec.kind, dec.bits, dec.container, dec.int_path) != ("int", 4, 4, "magic") or lay.zero_group:
        raise ValueError(f"the tcgen05 WnA16 kernel decodes int4 codes with the magic number, not {dec}")
    if ins.kind != "f16" or ins.a_type != plan.act:
        raise ValueError(f"the tcgen05 WnA16 kernel runs kind::f16 {plan.act}, the plan says {ins.describe()}")
    request = HelperRequest(mma=ins, act=plan.act, weight=dec, async_copy=True, caps=caps)
    prelude = backend.helpers("tcgen05_wna16", request)
    idesc = backend.data("tcgen05_idesc", kind="f16", a_type=plan.act, b_type=plan.act, acc="f32", m=128, n=t.bn)
    group = lay.scale_group
    s_rows = scale_rows(group)
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
// compiled only: not yet validated on hardware (HUMMING_UNVERIFIED_KERNELS=1 selects it at run time)
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};   // BK in 16-bit values
constexpr int THREADS = 128;             // warp w reads accumulator rows (TMEM lanes) 32w .. 32w+31
constexpr int LOOKAHEAD = STAGES - 1;    // cp.async stages in flight
constexpr int BQ = {WNA16_BQ};                     // dequantized B tiles: stage s+1 written while the MMAs of s read the other
constexpr int S_ROWS = {s_rows};
constexpr int A_BYTES = BM * BK * 2, RAW_BYTES = BN * BK / 2, S_OFF = A_BYTES + RAW_BYTES;
constexpr int STAGE_BYTES = {stage_bytes(t.bn, group)};
constexpr int BQ_BYTES = BN * BK * 2;    // one dequantized B tile: BN rows x 128 bytes
constexpr uint32_t TMEM_COLS = BN;       // fp32 accumulator: one column per output column
constexpr uint32_t IDESC = {idesc:#010x}u;  // kind::f16 {plan.act} x {plan.act} -> f32, K-major A and B, M=128, N=BN
static_assert(BK == 64, "one 128-byte swizzle row of 16-bit values per tile row");
static_assert(STAGE_BYTES % 1024 == 0 && BQ_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "1024-byte aligned tiles");
static_assert(STAGE_BYTES >= S_OFF + S_ROWS * BN * 2, "a slot holds A, codes and scales");
static_assert(LOOKAHEAD >= 2, "at least three stages (stage kt+1 is waited for while kt is multiplied)");
static_assert(BN % 128 == 0 && (TMEM_COLS & (TMEM_COLS - 1)) == 0 && TMEM_COLS <= 512, "tile width, TMEM allocation");
}}

{wna16_params(plan.kernel_name, rows.params if rows else "")}  using namespace cfg;
{TC_BLOCK_HEAD + rows.tile if rows else TC_BLOCK_DECL}  const int ktiles = K / BK;
  // the swizzle repeats every 1024 bytes of address: start on such a boundary (1 KiB is reserved)
  const uint32_t bq0 = (smem_u32(smem) + 1023u) & ~1023u;      // BQ dequantized B tiles
  const uint32_t slot0 = bq0 + BQ * BQ_BYTES;                    // STAGES cp.async slots
  const unsigned char* sgen = smem + (slot0 - smem_u32(smem));   // generic pointer to slot 0 (scale reads)

{tmem_setup()}
{wna16_stage_lambdas(lay, 128, gathered=rows is not None)}
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
    fence_proxy_async();         // A copies and dequant stores of stage kt: visible to tcgen05.mma (async proxy)
    __syncthreads();             // everyone's
    tc_fence_after();
    if (tid == 0) {{              // one thread issues the stage's MMAs and the commit
      const uint32_t a_tile = slot0 + (kt % STAGES) * STAGE_BYTES, b_tile = bq0 + (kt % BQ) * BQ_BYTES;
      const uint64_t desc_a = tc_smem_desc(a_tile), desc_b = tc_smem_desc(b_tile);
      #pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks)  // k16 steps: +32 bytes inside the swizzled rows = +2 in the address field
        tc_mma(tmem, desc_a + 2 * ks, desc_b + 2 * ks, IDESC, (kt > 0 || ks > 0) ? 1 : 0);
      tc_commit(smem_u32(&mma_bar[kt % STAGES]));  // arrives when these (and all earlier) MMAs have completed
    }}
    __syncwarp();
    if (kt > 0)  // the MMAs of kt-1 are done: its slot (refilled next) and its B tile ((kt+1) % BQ) are free
      mbar_wait(smem_u32(&mma_bar[(kt - 1) % STAGES]), (uint32_t)(((kt - 1) / STAGES) & 1));
    {{
      const int next = kt + LOOKAHEAD;  // refills the slot of kt-1
      if (next < ktiles) load_stage(next % STAGES, next);
      copy_commit();
    }}
    if (kt + 1 < ktiles) dequant_stage(kt + 1);  // overlaps the MMAs just issued
  }}
{_wna16_epilogue(rows)}"""


def _wna16_epilogue(rows: Tcgen05Rows | None) -> str:
    if rows is None:
        return tmem_epilogue("", _TC_SCALED_CHANNEL_SCALES, " * c0", " * c1")
    return tmem_epilogue(rows.after_row, _TC_SCALED_CHANNEL_SCALES, " * c0", " * c1", rows.weight, rows.store)


def _w4a8_loader() -> str:
    """CUDA of ``load_stage(stage, kt)`` for W4A8: the e4m3 activation tile as the 8-bit kernels copy it (16-byte
    cp.async into 128-byte swizzled rows), and the packed e2m1 weight tile widened by the copy into the padded 8-bit
    layout the kind::mxf8f6f4 operands take in shared memory: 16 codes (8 bytes) in the low half of each 16-byte chunk
    (the high half is padding, zeroed once), chunks swizzled like the 8-bit tiles; 8-byte cp.async."""
    return """  // stage layout: A tile (BM rows x 128 B of e4m3) then B tile (BN rows x 128 B: 128 e2m1 padded to 8 bits), both
  // 128-byte swizzled. Thread tid copies chunk tid % 8 of rows tid / 8 + 16 i (one swizzled offset for every i).
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const unsigned char* a_src = A + (size_t)(m0 + lrow) * K_el + lch * 16;
  const unsigned char* b_src = B + (size_t)(n0 + lrow) * (K_el / 2) + lch * 8;  // 8 bytes = the chunk's 16 codes
  auto load_stage = [&](int stage, int kt) {
    const uint32_t a_tile = smem0 + stage * STAGE_BYTES + lswz, b_tile = a_tile + A_BYTES;
    #pragma unroll
    for (int i = 0; i < BM / 16; ++i) {
      const bool ok = m0 + lrow + 16 * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(a_tile + i * 16 * 128, ok ? a_src + (16 * i * K_el + kt * BK) : A, ok);
    }
    #pragma unroll
    for (int i = 0; i < BN / 16; ++i)
      copy_8_async(b_tile + i * 16 * 128, b_src + (16 * i * (K_el / 2) + kt * (BK / 2)), true);
  };
"""


def tcgen05_blockscaled_kernel_source(plan, backend, caps=None) -> str:
    """The tcgen05 block-scaled kernel, compiled only, never run on hardware:
    W4A4 NVFP4 (kind::mxf4nvf4, scale_vec::4X, ue4m3 per 16) or MXFP4 (kind::mxf4, scale_vec::2X, ue8m0 per 32),
    e2m1 x e2m1 -> f32; or W4A8 MXFP4 x FP8 (kind::mxf8f6f4, scale_vec::1X, ue8m0 per 32), e4m3 x e2m1 -> f32.

    The body is the W8A8 kernel's. W4A4 counts K in packed bytes (one 128-byte swizzled row = 256 e2m1 elements per
    stage, four k64 MMAs of 32 bytes each); W4A8 has the 8-bit A tile of the W8A8 kernel and a B tile of e2m1 codes
    in the padded 8-bit layout (16 codes in the low 8 bytes of each 16-byte chunk), four k32 MMAs per stage.
    Scale factors: an MMA reads SF_A of tile row m from TMEM lane m % 32 (any of the four 32-lane partitions: they
    are duplicated there), column sfa + m / 32, and SF_B of tile column n from lane n % 32, column sfb + n / 32; the
    bytes of the 32-bit word are the row's consecutive block scales, selected by the scale-factor IDs of the
    instruction descriptor (4X: ID 0, all four; 2X: ID 0 or 2, a byte pair; 1X: ID 0..3, one byte). A stage's scales
    are staged in shared memory as 512-byte blocks (one per 32-bit word of a row: row r at byte (r % 32) * 16 +
    (r / 32) * 4), copied to the stage slot's TMEM columns by tcgen05.cp .32x128b.warpx4 (row r of the block -> lane
    r of every partition, its four words -> four columns) issued by thread 0 before its MMAs (tcgen05.cp ->
    tcgen05.mma is pipelined in issue order). W4A4 activation scale words are gathered into the blocks with 4-byte
    cp.async; W4A8 activations get one constant block of unit scales (ue8m0 127) for the whole K; the weight's scales
    are repacked ahead (``pack_weight_scales_tcgen05``) and copied as 16-byte chunks. A slot's TMEM scale columns are
    rewritten only after the mbarrier of the commit of the MMAs that read them.

    Epilogue: W4A4: fp32 accumulator x out_scale (the weight's global scale) x *GS (the activation's, a device
    scalar) + bias, parameter list of the block-scaled mma.sync kernel; W4A8: x per-token TS[m] or *GS (per-tensor)
    x out_scale + bias, parameter list of the 8-bit kernel (S = the weight scale blocks). CS, WS, CNT and
    k_per_split are unused."""
    from humming.core.families.mma_blockscaled.layout import Tcgen05BlockScaledLayout
    from humming.core.families.tcgen05.planner import bs_spec, tcgen05_bs_form, tcgen05_bs_tmem_cols

    t = plan.tiles
    lay = plan.layout
    ins = plan.instruction
    if not isinstance(lay, Tcgen05BlockScaledLayout):
        raise ValueError(f"the tcgen05 block-scaled kernel needs a Tcgen05BlockScaledLayout, got {type(lay).__name__}")
    w4a8 = lay.a_type != "e2m1"
    if (t.bm, t.bk, t.threads) != (128, lay.stage_k, 128) or t.stages < 2 or t.bn not in (128, 256):
        raise ValueError(f"the tcgen05 block-scaled kernel is written for 128x(128|256)x{lay.stage_k} tiles, "
                         f"128 threads; got {t}")
    kind, a_type, b_type, fmt, scale_vec, mma_k = bs_spec(lay)
    if (ins.kind, ins.scale_format, ins.a_type, ins.b_type) != (kind, fmt, a_type, b_type):
        raise ValueError(f"{lay.recipe} ({lay.a_type} activations) is kind::{kind} {a_type} x {b_type} with {fmt} "
                         f"scales, the plan says {ins.describe()}")
    if caps is not None and tcgen05_bs_form(caps, lay.recipe, lay.a_type) is None:
        raise ValueError(f"{caps.name} declares no block-scaled tcgen05 form for {lay.recipe} x {lay.a_type}")
    spm = mma_k // lay.vec  # scale bytes per row per MMA: 4 (4X), 2 (2X) or 1 (1X)
    steps = []
    for ks in range(lay.stage_k // mma_k):
        sid = (ks * spm) % 4  # byte offset of this MMA's scales inside the 32-bit TMEM word
        steps.append(backend.data("tcgen05_idesc_block_scaled", kind=kind, a_type=a_type, b_type=b_type, scale_format=fmt,
                                  m=128, n=t.bn, sfa_id=sid, sfb_id=sid))
    idescs = ", ".join(f"{d:#010x}u" for d in steps)
    tmem_cols = tcgen05_bs_tmem_cols(t.bn, t.stages, lay)
    request = HelperRequest(mma=ins, act=plan.act, weight=None, async_copy=True, caps=caps)
    prelude = backend.helpers("tcgen05_blockscaled", request, scale_vec=scale_vec)
    v = {}  # the variant's pieces
    if not w4a8:
        v["bk"] = f"// BK in bytes of packed codes = {lay.stage_k} e2m1"
        v["sizes"] = f"""constexpr int SA_BYTES = WORDS * 512, SB_BYTES = (BN / 128) * WORDS * 512;   // 512-byte tcgen05.cp blocks
constexpr int STAGE_BYTES = A_BYTES + B_BYTES + SA_BYTES + SB_BYTES;
constexpr uint32_t SFA_COLS = 4 * WORDS, SFB_COLS = (BN / 32) * WORDS;      // TMEM columns of one stage's scales
constexpr uint32_t TMEM_COLS = {tmem_cols};       // accumulator (BN) + STAGES x (SFA_COLS + SFB_COLS), a power of two"""
        v["assert"] = """static_assert((BM * WORDS) % THREADS == 0, "activation scale words split evenly across the threads");
static_assert(BN + STAGES * (SFA_COLS + SFB_COLS) <= TMEM_COLS && TMEM_COLS <= 512, "Tensor Memory columns");"""
        v["params"] = f"""    const unsigned char* __restrict__ A,   // packed e2m1 activation codes [M, K/2] (element 2i in the low nibble)
    const uint32_t* __restrict__ Bw,       // packed e2m1 weight codes [N, K/2], row-major (K-major)
    const unsigned char* __restrict__ SA,  // activation block scales [M, K/VEC] as stored ({fmt})
    const unsigned char* __restrict__ SB,  // weight block scales, 512-byte blocks [N/128][K/(4 VEC)][32][4][4]
    const float* __restrict__ CS,          // unused (null)"""
        v["gs"] = "the activation's global scale (device scalar) or null"
        v["k"] = """  const int K = K_el / 2;                // bytes of packed codes per row (the row stride of A and B)
  const int ktiles = K / BK;
  const int sa_row = K_el / VEC;         // activation scale bytes per row"""
        v["loader"] = swizzled_stage_loader(16)
        v["sa_copy"] = """    const uint32_t sa_tile = smem0 + stage * STAGE_BYTES + A_BYTES + B_BYTES, sb_tile = sa_tile + SA_BYTES;
    #pragma unroll
    for (int i = 0; i < BM * WORDS / THREADS; ++i) {
      const int c = tid + i * THREADS, r = c / WORDS, w = c % WORDS;
      const bool ok = m0 + r < M;  // rows past M get zero scales (their codes are zero-filled too)
      copy_4_async(sa_tile + w * 512 + (r & 31) * 16 + (r >> 5) * 4,
                   ok ? SA + (size_t)(m0 + r) * sa_row + kt * (WORDS * 4) + w * 4 : SA, ok);
    }"""
        v["scales_doc"] = ("// a stage's block scales: activation row r's word w (4 scale bytes) to byte (r % 32) * 16 + (r / 32) * 4 of "
                           "block w;\n  // the weight's blocks are stored that way already (BN / 128 runs of WORDS blocks)")
        v["setup"] = ""
        v["tiles"] = """      const uint32_t sa_tile = b_tile + B_BYTES, sb_tile = sa_tile + SA_BYTES;
      // the slot's scale columns; the MMAs that read them last (stage kt - STAGES) completed before this stage's
      // copies were issued (everyone waited for that commit)
      const uint32_t sfa = tmem + BN + slot * (SFA_COLS + SFB_COLS), sfb = sfa + SFA_COLS;
      #pragma unroll
      for (int w = 0; w < WORDS; ++w) tc_cp_sf(sfa + 4 * w, tc_sf_desc(sa_tile + 512 * w));"""
        v["steps"] = "k64 steps"
        v["rs"] = ""
        v["mul"] = "scale"
    else:
        v["bk"] = f"// BK in bytes = {lay.stage_k} e4m3 (and {lay.stage_k} e2m1 padded to 8 bits)"
        v["sizes"] = f"""constexpr int SB_BYTES = (BN / 128) * WORDS * 512;   // 512-byte tcgen05.cp blocks of weight scales
constexpr int STAGE_BYTES = (A_BYTES + B_BYTES + SB_BYTES + 1023) / 1024 * 1024;  // next stage 1024-byte aligned
constexpr int ONES_OFFSET = STAGES * STAGE_BYTES;  // 512 bytes of unit activation scales (ue8m0 127) after the stages
constexpr uint32_t SFB_COLS = (BN / 32) * WORDS;  // TMEM columns of one stage's weight scales
constexpr uint32_t TMEM_COLS = {tmem_cols};       // accumulator (BN) + unit SF_A (4) + STAGES x SFB_COLS, a power of two"""
        v["assert"] = """static_assert(WORDS == 1 && SPM == 1, "one ue8m0 byte per row per k32 MMA: one scale word per stage");
static_assert(BN + 4 + STAGES * SFB_COLS <= TMEM_COLS && TMEM_COLS <= 512, "Tensor Memory columns");"""
        v["params"] = """    const unsigned char* __restrict__ A,   // e4m3 activation codes [M, K], row-major (K-major)
    const uint32_t* __restrict__ Bw,       // packed e2m1 weight codes [N, K/2], row-major (K-major)
    const float* __restrict__ TS,          // per-token activation scale [M] or null
    const unsigned char* __restrict__ SB,  // weight block scales (ue8m0), 512-byte blocks [N/128][K/128][32][4][4]
    const float* __restrict__ CS,          // unused (null)"""
        v["gs"] = "a device scalar multiplying the output (per-tensor activation scale) or null"
        v["k"] = """  const int ktiles = K_el / BK;"""
        v["loader"] = _w4a8_loader()
        v["sa_copy"] = """    const uint32_t sb_tile = smem0 + stage * STAGE_BYTES + A_BYTES + B_BYTES;"""
        v["scales_doc"] = "// a stage's weight block scales, stored as tcgen05.cp blocks already (BN / 128 runs of WORDS blocks)"
        v["setup"] = """  // the padding halves of every B chunk (never written by the copies) and the block of unit activation scales
  for (int c = tid; c < STAGES * BN * 8; c += THREADS)
    st_shared_64(smem0 + (c / (BN * 8)) * STAGE_BYTES + A_BYTES + (c % (BN * 8)) * 16 + 8, 0u, 0u);
  for (int c = tid; c < 512 / 16; c += THREADS)
    st_shared_128(smem0 + ONES_OFFSET + c * 16, 0x7F7F7F7Fu, 0x7F7F7F7Fu, 0x7F7F7F7Fu, 0x7F7F7F7Fu);
"""
        v["tiles"] = """      const uint32_t sb_tile = b_tile + B_BYTES;
      // unit SF_A: columns BN .. BN+3, copied once (the stores above are fenced and synchronised by iteration 0)
      const uint32_t sfa = tmem + BN;
      if (kt == 0) tc_cp_sf(sfa, tc_sf_desc(smem0 + ONES_OFFSET));
      // the slot's weight-scale columns; the MMAs that read them last (stage kt - STAGES) completed before this
      // stage's copies were issued (everyone waited for that commit)
      const uint32_t sfb = tmem + BN + 4 + slot * SFB_COLS;"""
        v["steps"] = "k32 steps"
        v["rs"] = _TC_ROW_SCALE
        v["mul"] = "rs"
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
// compiled only: not yet validated on hardware (HUMMING_UNVERIFIED_KERNELS=1 selects it at run time)
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = 128, STAGES = {t.stages};   {v["bk"]}
constexpr int THREADS = 128;             // warp w reads accumulator rows (TMEM lanes) 32w .. 32w+31
constexpr int LOOKAHEAD = STAGES - 1;    // stages loading while one is multiplied
constexpr int VEC = {lay.vec};                  // elements per weight block scale ({fmt})
constexpr int WORDS = {lay.words_per_stage};                // 32-bit scale words per row per stage ({lay.stage_k} / VEC / 4)
constexpr int SPM = {spm};                  // scale bytes per row per k{mma_k} MMA (scale_vec::{scale_vec}X)
constexpr int A_BYTES = BM * BK, B_BYTES = BN * BK;
{v["sizes"]}
// kind::{kind} {a_type} x {b_type} -> f32, {fmt} scales, K-major, M=128, N=BN; scale-factor IDs (A and B) of step 0..3
constexpr uint32_t IDESC[4] = {{{idescs}}};
static_assert(STAGE_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "tiles stay 1024-byte aligned (swizzle period)");
static_assert(THREADS == 128 && BM == 128 && BN % 128 == 0, "one scale block per 128 rows of A and of B");
{v["assert"]}
}}

extern "C" __global__ void __launch_bounds__(cfg::THREADS, 1) {plan.kernel_name}(
{v["params"]}
    const uint16_t* __restrict__ BIAS,     // [N] or null
    uint16_t* __restrict__ C,              // output [M, N]
    float* __restrict__ WS, int* __restrict__ CNT,   // unused (no split-K)
    int M, int N, int K_el, int k_per_split, float out_scale,   // K_el: K in elements; out_scale: weight global scale
    const float* __restrict__ GS) {{        // {v["gs"]}
  using namespace cfg;
{TC_BLOCK_DECL}{v["k"]}
  const int sb_blocks = K_el / (4 * VEC);  // 512-byte weight scale blocks per 128 channels
  const unsigned char* B = reinterpret_cast<const unsigned char*>(Bw);
  // the swizzle repeats every 1024 bytes of address: start the stages on such a boundary (1 KiB is reserved)
  const uint32_t smem0 = (smem_u32(smem) + 1023u) & ~1023u;

{tmem_setup("the accumulator's and the scale factors' columns", ": the accumulator")}
{v["loader"]}
  {v["scales_doc"]}
  auto load_scales = [&](int stage, int kt) {{
{v["sa_copy"]}
    #pragma unroll
    for (int c = tid; c < (BN / 128) * WORDS * 32; c += THREADS) {{
      const int j = c / (WORDS * 32), q = c % (WORDS * 32);
      copy_16_async(sb_tile + c * 16, SB + ((size_t)(n0 / 128 + j) * sb_blocks + kt * WORDS) * 512 + q * 16, true);
    }}
  }};
{v["setup"]}  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {{
    if (s < ktiles) {{ load_stage(s, s); load_scales(s, s); }}
    copy_commit();
  }}

  for (int kt = 0; kt < ktiles; ++kt) {{
    const int slot = kt % STAGES;
    copy_wait<LOOKAHEAD - 1>();  // this thread's copies of stage kt have landed
    fence_proxy_async();         // ... and are visible to tcgen05.cp / tcgen05.mma (async proxy)
    __syncthreads();             // everyone's copies
    tc_fence_after();
    if (tid == 0) {{              // one thread moves the stage's scales to TMEM, issues its MMAs and the commit
      const uint32_t a_tile = smem0 + slot * STAGE_BYTES, b_tile = a_tile + A_BYTES;
{v["tiles"]}
      #pragma unroll
      for (int j = 0; j < BN / 128; ++j)
        #pragma unroll
        for (int w = 0; w < WORDS; ++w)  // word w of the channel block j: columns sfb + w * BN/32 + 4j .. + 3
          tc_cp_sf(sfb + w * (BN / 32) + 4 * j, tc_sf_desc(sb_tile + 512 * (j * WORDS + w)));
      const uint64_t desc_a = tc_smem_desc(a_tile), desc_b = tc_smem_desc(b_tile);
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks) {{  // {v["steps"]}: +32 bytes inside the swizzled rows = +2 in the address field
        const int word = ks * SPM / 4;  // the 32-bit scale word of this step (its bytes: IDESC's scale-factor IDs)
        tc_mma_bs(tmem, desc_a + 2 * ks, desc_b + 2 * ks, IDESC[ks], sfa + 4 * word, sfb + (BN / 32) * word,
                  (kt > 0 || ks > 0) ? 1 : 0);
      }}
      tc_commit(smem_u32(&mma_bar[slot]));  // arrives when these (and all earlier) MMAs and copies have completed
    }}
    __syncwarp();
    {{
      const int next = kt + LOOKAHEAD;  // refills the slot of kt-1
      if (next < ktiles) {{
        const int ns = next % STAGES;
        if (next >= STAGES) mbar_wait(smem_u32(&mma_bar[ns]), (uint32_t)((next / STAGES - 1) & 1));
        load_stage(ns, next);
        load_scales(ns, next);
      }}
      copy_commit();
    }}
  }}
{tmem_epilogue(v["rs"], _TC_BIAS_ONLY, " * " + v["mul"], " * " + v["mul"])}"""
