"""Generates the register-A wgmma W4A8 kernel (sm_90a; from M 128 by default, the tuning knob register_a8.min_m): C^T = W x^T for 128
output channels x 128 tokens per block, int4 weights widened in registers as wgmma's A operand (the design of the
WnA16 register-A kernel, ``humming.core.families.register_a.generator``, for 8-bit activations).

  * A = weights, from registers: warp w of warpgroup wg supplies rows 16w .. 16w+15 of the warpgroup's 64 channels
    (n0 + 64 wg + 16 w + {g, g + 8}, g = lane / 4) in the m16n8k32 A-fragment layout. The lane's 32 bytes of codes
    of a 128-deep stage (layout_wgmma_rs8) come in two 16-byte loads, PF stages ahead in a register ring; word j =
    (k32 step j / 2, register pair j % 2) widens into a[j / 2][2 (j % 2)] (row g) and a[j / 2][2 (j % 2) + 1] (row
    g + 8): s8 as 16 x code with two masks, e4m3 with int4n8_to_e4m3x8_x (two byte-permute lookups and an xor per
    16-bit half on the layout's relabelled codes, the lookup tables in registers).
  * B = activation codes: 128 token rows x 128 k bytes per stage, cp.async into 128-byte-swizzled K-major slots
    (rows past M zero-filled), read through a matrix descriptor (+32 bytes per k32 step).
  * Per stage: two 64-token chains (four m64n64k32 each, scale-d 0 on the first) into two partials pa / pb; the
    second is issued before the first is waited for (wait_group 1), then facc += partial x the group scale of the
    thread's two channels (group 128 = one stage; per-channel: one scale, loaded once). With 128-token chains
    (the knob register_a8.chain 128): four m64n128k32 into one partial, wait, promote.
  * Blocks take their tiles in launch order or rasterized in groups of TileConfig.raster token tiles (_block_head).

Iteration kt: widen the codes of kt (ring slot kt % R) -> load the codes (and group scales) of kt + PF -> wait for
this thread's copies of kt -> fence.proxy.async -> __syncthreads (everyone's copies landed; every wgmma of kt - 1 is
done) -> refill the slot of kt - 1 with stage kt + STAGES - 1 -> wgmma.fence, 4 x k32, commit -> wait<0> ->
promote. Epilogue: facc[4j + 2h + e] = channel 64 wg + 16 w + 8 h + g, token 8 j + 2 q + e, times the token's
activation scale TS (or the device scalar GS), out_scale and CS[n] where given, plus bias, written transposed into
a staging tile and copied out in 16-byte chunks of token rows. The parameter list is that of the 8-bit kernels."""
from __future__ import annotations

import re

from humming.core.common.kernel_params import eight_bit_params
from humming.core.common.wgmma import (
    PRODUCER_WARPGROUP,
    STAGED_COPY_OUT,
    TILE_IN_LAUNCH_ORDER,
    TILE_RASTERIZED,
    stmatrix_staging,
    tile_of_block,
)
from humming.core.families.register_a import pair_cluster
from humming.core.families.register_a8.pieces import (
    DESC0,
    HELD_DECL,
    HELD_LUTS,
    HELD_ZERO,
    e4m3_widen_call,
    held_init,
    uses_tables,
)
from humming.core.families.register_a8.planner import (
    BC,
    BK,
    BT,
    OUT_PAD,
    PATH,
    PF,
    QUARTER_WT,
    S_BYTES,
    W_BYTES,
    WIDE_BT,
    WIDE_FITTED_BT,
)
from humming.devices.base import HelperRequest


def _group_and_chain(plan, caps) -> tuple[bool, HelperRequest, int]:
    """Both forms' checks: groups of 128 or per channel, chains of 128 or 64 tokens (the wide form: two halves or
    four quarters; the narrow form: one partial or two halves). Returns (per channel, the helper request, chain)."""
    lay = plan.layout
    if lay.group not in (128, lay.k):
        raise ValueError(f"the register-A wgmma W4A8 kernel takes groups of 128 or per channel, not {lay.group}")
    chain = plan.instruction.shape[1]  # tokens per wgmma chain
    if chain not in (BT, QUARTER_WT):
        raise ValueError(f"the register-A W4A8 kernel runs chains of {BT} or {QUARTER_WT} tokens, not {chain}")
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=None, async_copy=True, caps=caps)
    return lay.group != 128, request, chain


def _luts(backend) -> str:
    """The narrow form's lookup tables (the backend's data "rs8_widen_tables"), computed once from ktiles."""
    t = backend.data("rs8_widen_tables")
    return ("  // the widening's lookup tables (int4n8_to_e4m3x8_x), in registers: ktiles >> 30 is 0 for any K here, but\n"
            "  // not known to the compiler, so the tables are computed once instead of rematerialized per use\n"
            "  const uint32_t keep = (uint32_t)(ktiles >> 30);\n"
            f"  const uint32_t la0 = 0x{t[0][0]:08X}u + keep, la1 = 0x{t[1][0]:08X}u + keep;   // {t[0][1]} | {t[1][1]}\n"
            f"  const uint32_t lb0 = 0x{t[2][0]:08X}u + keep, lb1 = 0x{t[3][0]:08X}u + keep;   // {t[2][1]} | {t[3][1]}\n")


def _widening(lay, word: str, ind: str, backend) -> tuple[str, str]:
    """The body of the ``for (int j = 0; j < 8; ++j)`` loop that widens word j (``word``) into the two fragment
    registers a[j / 2][2 (j % 2)] and a[j / 2][2 (j % 2) + 1], and the declarations it needs (the lookup tables of
    the "prmt" widening in registers)."""
    out = "a[j >> 1][2 * (j & 1)]", "a[j >> 1][2 * (j & 1) + 1]"
    if lay.a_type == "e4m3":
        return f"\n{ind}  {e4m3_widen_call(lay.widen, word, *out)}", _luts(backend) if uses_tables(lay) else ""
    return f" {{\n{ind}  {out[0]} = s8x16_lo({word});\n{ind}  {out[1]} = s8x16_hi({word});\n{ind}}}", ""


def _channel_scales(at: str) -> tuple[str, str]:
    """Per-channel scales: the declaration loading this lane's two channels' (at ``at`` and 8 channels on) once, and
    the per-stage pick of them."""
    return (f"  // per-channel scales: this lane's two channels, once\n"
            f"  const float s_lo = load_f32({at}), s_hi = load_f32({at} + 8);\n",
            "const float sc0 = s_lo, sc1 = s_hi;")


def wgmma_rs8_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    lay = plan.layout
    producer = t.bulk == 2  # a producer warpgroup brings the activations in by TMA; consumers release slots
    # 256 tokens (or 192 / 128 fitted to M, TileConfig.wide at 128): weights and scales by bulk copy, each fragment
    # widened once for every chain
    wide = t.bm > BT or bool(t.wide)
    if (plan.path != PATH or t.bm not in (BT, WIDE_FITTED_BT, WIDE_BT)
            or (t.bn, t.bk, t.threads) != (BC, BK, 384 if producer else 256)
            or t.stages < (3 if wide else 4) or (wide and not producer)
            or (wide and t.bm < WIDE_BT and plan.instruction.shape[1] != QUARTER_WT)):
        raise ValueError(f"the register-A wgmma W4A8 kernel is written for 128 tokens (256, or 192 / 128 in 64-token "
                         f"chains, with the producer warpgroup) x 128 channels x 128 k, 256 threads (384 with the "
                         f"producer warpgroup), >= 4 stages (3 wide); got {t}")
    if wide:
        return _wide_kernel_source(plan, backend, caps)
    per_channel, request, chain = _group_and_chain(plan, caps)
    prelude = backend.helpers("wgmma_rs8", request, n=chain, producer=producer) + _stsm_prelude(plan, caps, backend)
    widen, luts = _widening(lay, "wq[s][j >> 2][j & 3]", "      ", backend)
    to_f32 = "small_s32_to_f32" if lay.a_type == "s8" else "wg_acc_to_f32"
    if per_channel:
        scale_decl, scale_pick = _channel_scales("S + tab")
        scale_fetch = ""
    else:
        scale_decl = "  float sq[R][2];  // group scales of the stages in flight: this lane's two channels\n"
        scale_fetch = ("{ const float* sp = S + (size_t)(ATOM) * N + tab; "
                       "sq[SLOT][0] = load_f32(sp); sq[SLOT][1] = load_f32(sp + 8); }")
        scale_pick = "const float sc0 = sq[s][0], sc1 = sq[s][1];"

    if producer:
        load_code = PRODUCER_WARPGROUP
        prologue = ""
        stage_wait = """      mbar_wait(xbar0 + 8 * (kt % STAGES), (kt / STAGES) & 1);  // stage kt's activations have landed"""
        release = """
      if (lane == 0) mbar_arrive(xbar0 + 8 * (STAGES + kt % STAGES));  // this warp is done with the slot"""
        final = ""
        sync = "consumer_sync"
        params = eight_bit_params(
            plan.kernel_name, b_doc="int4 codes in the register-A layout (humming.core.families.register_a8.layout)",
            s_doc="fp32 scales [K/group, N], natural column order", bias_doc="[N] or null",
            tensor_maps=("XMAP", "activation codes [M, K]: boxes of 128 rows x 128 bytes, 128-byte swizzle"),
            block_threads="cfg::BLOCK_THREADS")
        block_threads = "\nconstexpr int BLOCK_THREADS = THREADS + 128;  // and a producer warpgroup (warps 8-11)"
    else:
        load_code = _CP_ASYNC_LOADS
        prologue = """  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {
    if (s < ktiles) load_stage(s, s);
    copy_commit();
  }
"""
        stage_wait = """      copy_wait<LOOKAHEAD - 1>();  // this thread's copies of stage kt have landed
      fence_proxy_async();         // ... and are visible to wgmma (async proxy)
      __syncthreads();             // everyone's; every wgmma of kt - 1 has finished (waited below)
      {
        const int next = kt + LOOKAHEAD;  // refills the slot of kt - 1
        if (next < ktiles) load_stage(next % STAGES, next);
        copy_commit();
      }"""
        release = ""
        final = "  copy_wait<0>();\n  fence_proxy_async();"
        sync = "__syncthreads"
        params = eight_bit_params(
            plan.kernel_name, b_doc="int4 codes in the register-A layout (humming.core.families.register_a8.layout)",
            s_doc="fp32 scales [K/group, N], natural column order", bias_doc="[N] or null")
        block_threads = ""

    def fetch(slot: str, atom: str, indent: str) -> str:
        lines = [f"const uint32_t* p = wsrc + (size_t)({atom}) * STAGE_WORDS;",
                 f"load_g128(wq[{slot}][0], p);", f"load_g128(wq[{slot}][1], p + 128);"]
        if scale_fetch:
            lines.append(scale_fetch.replace("SLOT", slot).replace("ATOM", atom))
        return "\n".join(indent + ln for ln in lines)

    if t.direct:  # per-channel scales: the chain straight into the sums (humming.core.families.register_a8.direct)
        from humming.core.families.register_a8.direct import narrow_direct

        if not per_channel or chain != BT:
            raise ValueError(f"the narrow W4A8 form's direct accumulation is written for per-channel scales and one "
                             f"{BT}-token chain, not group {lay.group}, chain {chain}")
        partials, chains, after = narrow_direct(release, lay.a_type)
        final += "\n" + after
    elif chain == BT:
        partials = "  wg_acc_t part[WG_ACC_REGS];\n"
        chains = _NARROW_CHAIN.format(release=release, to_f32=to_f32)
    else:
        partials = "  wg_acc_t pa[WG_ACC_REGS], pb[WG_ACC_REGS];   // two partials: one half runs while the other is promoted\n"
        chains = _narrow_halves(release, to_f32)
    return f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BT = {BT}, WT = {chain}, BC = {BC}, BK = {BK}, STAGES = {t.stages};   // tokens (per wgmma chain), channels, k (bytes) per stage
constexpr int THREADS = 256;             // two warpgroups; warpgroup wg owns channels 64 wg .. 64 wg + 63 of the tile{block_threads}
constexpr int RASTER = {t.raster};             // token tiles per rasterization group (0: launch order)
constexpr int LOOKAHEAD = STAGES - 1;    // activation stages loading while one is multiplied
constexpr int PF = {t.prefetch or PF}, R = PF + 1;           // weight stages in flight per lane, register ring size
constexpr int X_BYTES = BT * BK;         // one activation tile: BT rows x 128 bytes
constexpr int STAGE_WORDS = 4 * 256;     // 32-bit words of one 64-channel x 128-k stage of int4 codes (4 KB)
constexpr int OUT_LD = BC + {OUT_PAD};         // staging pitch (16-bit values)
static_assert(X_BYTES % 1024 == 0, "1024-byte aligned activation tiles");
static_assert(WG_ACC_REGS == WT / 2, "m64nWT accumulators: WT/2 registers per thread");
{_CFG_END}
{params}{_block_head(t.raster)}  const int slab = n0 / 64 + wg;                                 // this warpgroup's 64-channel slab
  const uint32_t x0 = (smem_u32(smem) + 1023u) & ~1023u;         // STAGES activation slots, then the staging tile

{load_code}

  // weights: words 4 hf + jj of this lane at ((slab * ktiles + kt) * 4 + w) * 256 + hf * 128 + lane * 4 + jj
  const uint32_t* wsrc = Bw + (size_t)slab * ktiles * STAGE_WORDS + w * 256 + lane * 4;
  const int tab = slab * 64 + 16 * w + g;                        // this lane's channels: tab and tab + 8
{scale_decl}{luts}  uint32_t wq[R][2][4];  // codes of the stages in flight: word j = 4 hf + jj = k32 step j / 2, register pair j % 2

  float facc[BT / 2];
{partials}  #pragma unroll
  for (int i = 0; i < BT / 2; ++i) facc[i] = 0.0f;

{prologue}  #pragma unroll
  for (int s = 0; s < PF; ++s)
    if (s < ktiles) {{
{fetch("s", "s", "      ")}
    }}

  for (int kb = 0; kb < ktiles; kb += R) {{
    #pragma unroll
    for (int u = 0; u < R; ++u) {{
      const int kt = kb + u, s = u;   // ring slot of stage kt
      if (kt >= ktiles) break;
      // A of stage kt: a[ks][2 sub] = channel row g, a[ks][2 sub + 1] = row g + 8; k 32 ks + 16 sub + 4 q ..
      uint32_t a[4][4];
      #pragma unroll
      for (int j = 0; j < 8; ++j){widen}
      {scale_pick}
      if (kt + PF < ktiles) {{  // the ring slot of kt - 1 takes stage kt + PF
{fetch("(s + PF) % R", "kt + PF", "        ")}
      }}
{stage_wait}
      const uint64_t desc_x = make_smem_desc(x0 + (kt % STAGES) * X_BYTES);
{chains}    }}
  }}
{final}
  {sync}();                 // all wgmmas and copies done: the activation slots become the staging tile

{_epilogue(False, bool(t.stsm), bool(t.direct))}{STAGED_COPY_OUT.fill(sync=sync)}"""


# the narrow form's stage: one m64n128k32 chain into the partial, wait, promote
_NARROW_CHAIN = """      wgmma_fence_operand(part);
      wgmma_fence();               // the a[] registers written above, before the wgmmas read them
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // k32 steps: +32 bytes inside the swizzled rows = +2 in the address field
        wgmma_k32_rs(part, a[ks], desc_x + 2 * ks, ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(part);{release}
      #pragma unroll
      for (int j = 0; j < BT / 8; ++j) {{  // part[4j + 2h + e]: channel row g + 8h, token 8j + 2q + e
        facc[4 * j + 0] += {to_f32}(part[4 * j + 0]) * sc0;
        facc[4 * j + 1] += {to_f32}(part[4 * j + 1]) * sc0;
        facc[4 * j + 2] += {to_f32}(part[4 * j + 2]) * sc1;
        facc[4 * j + 3] += {to_f32}(part[4 * j + 3]) * sc1;
      }}
"""


def _narrow_halves(release: str, to_f32: str) -> str:
    """The narrow form's stage as two m64n64k32 token halves into two partials: the second half is issued before
    the first is waited for (wait_group 1) and promoted."""
    ind = "      "
    wait, fence, promote = _wait_promote(1, 0, to_f32, ind).split("\n", 2)  # the slot is released after the last wait
    return (_chain_step(0, ind) + _chain_step(1, ind) + _wait_promote(0, 1, to_f32, ind)
            + f"{wait}\n{fence}{release}\n{promote}")


def _part(c: int) -> str:
    return "pa" if c % 2 == 0 else "pb"


def _chain_step(c: int, ind: str) -> str:
    """Issue the 64-token chain c (tokens 64c ..) into partial pa / pb: four k32 steps, one commit group."""
    return (f"{ind}wgmma_fence_operand({_part(c)});\n{ind}wgmma_fence();\n{ind}#pragma unroll\n"
            f"{ind}for (int ks = 0; ks < 4; ++ks)  // tokens {64 * c}..{64 * c + 63}: slot rows + {64 * c}\n"
            f"{ind}  wgmma_k32_rs({_part(c)}, a[ks], desc_x + {c} * (WT * BK / 16) + 2 * ks, ks > 0);\n"
            f"{ind}wgmma_commit();\n")


def _wait_promote(c: int, pending: int, to_f32: str, ind: str) -> str:
    """Wait until chain c is done (``pending`` later groups may run on) and add its partial into facc."""
    body = "\n".join(f"{ind}  facc[WG_ACC_REGS * {c} + 4 * j + {i}] += {to_f32}({_part(c)}[4 * j + {i}]) * sc{i // 2};"
                     for i in range(4))
    return (f"{ind}wgmma_wait<{pending}>();   // chain {c} done\n{ind}wgmma_fence_operand({_part(c)});\n"
            f"{ind}#pragma unroll\n{ind}for (int j = 0; j < WT / 8; ++j) {{  // {_part(c)}[4j + 2h + e]: token "
            f"{64 * c} + 8j + 2q + e\n{body}\n{ind}}}\n")


# the end of both forms' cfg namespace and the start of their kernel body (block coordinates, the lane's fragment row)
_CFG_END = """static_assert(BT * OUT_LD * 2 <= STAGES * X_BYTES, "the staging tile fits in the activation slots");
static_assert((BT * (BC / 8)) % THREADS == 0, "whole copy-out passes");
}
"""
_BLOCK_HEAD = """  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, w = warp & 3;
  const int g = lane >> 2, q = lane & 3;
{tile_of_block}  const int ktiles = K / BK;
"""
def _block_head(raster: int) -> str:
    """The kernel body's start: thread coordinates and the block's tile (launch order, or rasterized in groups of
    ``raster`` token tiles)."""
    return _BLOCK_HEAD.replace("{tile_of_block}", tile_of_block(raster) + "\n")


# the activation copies of the lock-step kernel: every thread copies its chunks of each stage with cp.async
_CP_ASYNC_LOADS = """  // activations: thread tid copies chunk tid % 8 (16 k) of token rows tid / 8 + 32 i
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const unsigned char* a_src = A + (size_t)(m0 + lrow) * K + lch * 16;
  auto load_stage = [&](int slot, int kt) {
    const uint32_t base = x0 + slot * X_BYTES;
    #pragma unroll
    for (int i = 0; i < BT / 32; ++i) {
      const bool ok = m0 + lrow + 32 * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(base + lswz + i * 32 * 128, ok ? a_src + ((size_t)32 * i * K + kt * BK) : A, ok);
    }
  };"""


# the token scales of the narrow form's epilogue: loaded from global memory, every load issued before any use
_TS_GLOBAL = """  float ts[BT / 4];     // the scales of the thread's tokens 8 (i / 2) + 2 q + i % 2: every load issued before any use
  #pragma unroll
  for (int i = 0; i < BT / 4; ++i) {
    const int tok = m0 + 8 * (i >> 1) + 2 * q + (i & 1);
    ts[i] = (TS && tok < M) ? scale * load_f32(TS + tok) : scale;
  }
"""
# ... and the wide form's: a producer warp wrote the block's (times the device scalar and out_scale) into shared memory
_TS_SHARED = """  mbar_wait(xbar0 + 8 * (2 * STAGES), 0);   // the producer warp's token scales are in shared memory
  float ts[BT / 4];     // the scales of the thread's tokens 8 (i / 2) + 2 q + i % 2
  #pragma unroll
  for (int i = 0; i < BT / 4; ++i) ts[i] = lds_f32(t0 + (8 * (i >> 1) + 2 * q + (i & 1)) * 4);
"""


# the epilogue: facc[4j + 2h + e] (j < BT / 8; the wide form's two halves are j < 16 and j >= 16) -> the staging tile
_EPILOGUE_HEAD = """  // facc[4j + 2h + e] = channel 64 wg + 16 w + 8 h + g, token 8 j + 2 q + e -> staging [token][channel]
{scale_line}  float cs[2], bs[2];   // the thread's two channels' weight scale and bias
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = wg * 64 + w * 16 + 8 * h + g;
    cs[h] = CS ? load_f32(CS + n0 + ch) : 1.0f;
    bs[h] = BIAS ? act_to_f32(load_u16(BIAS + n0 + ch)) : 0.0f;
  }
{ts_block}"""
_EPILOGUE_STORES = """  #pragma unroll
  for (int j = 0; j < BT / 8; ++j) {
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ch = wg * 64 + w * 16 + 8 * h + g;
      const uint32_t v = f32x2_to_act2(facc[4 * j + 2 * h] * ts[2 * j] * cs[h] + bs[h],
                                       facc[4 * j + 2 * h + 1] * ts[2 * j + 1] * cs[h] + bs[h]);
      const uint32_t o = x0 + ((8 * j + 2 * q) * OUT_LD + ch) * 2;   // tokens 8j + 2q and 8j + 2q + 1
      sts_u16(o, (uint16_t)(v & 0xFFFFu));
      sts_u16(o + OUT_LD * 2, (uint16_t)(v >> 16));
    }
  }
"""


def _wide_kernel_source(plan, backend, caps) -> str:
    """The wide form: 256 tokens per block, each warpgroup's A fragment widened once per stage for two m64n128k32
    token halves; a producer warpgroup brings each stage's activations (one TMA tensor copy of 256 rows), the block's
    int4 codes (two 4 KB bulk copies, one per 64-channel slab) and group scales (512 B) into one slot."""
    t = plan.tiles
    lay = plan.layout
    per_channel, request, chain = _group_and_chain(plan, caps)
    cluster = t.cluster  # blocks of a cluster (adjacent channel tiles, one token tile) take turns multicasting stages
    if cluster and (cluster != 2 or t.streamk or t.bm != WIDE_BT):
        raise ValueError(f"the wide W4A8 form's cluster option is written for pairs without stream-K, not {t}")
    slots = t.widened  # converter warps widen the weights into this many slots of fragments (0: the consumers do)
    if slots and (cluster or t.streamk or plan.pdl or t.bm != WIDE_BT):
        raise ValueError(f"the wide W4A8 form's converter warps are written for 256-token tiles without stream-K, "
                         f"clusters or PDL, not {t}")
    direct = bool(t.direct)  # per channel: no partials (humming.core.families.register_a8.direct)
    if direct and (not per_channel or chain != (BT if t.bm == WIDE_BT else QUARTER_WT) or cluster or slots
                   or t.streamk or plan.pdl):
        raise ValueError(f"the wide W4A8 form's direct accumulation is written for per-channel scales and the plain "
                         f"grid in {BT}-token chains ({QUARTER_WT} in tiles fitted to M; no stream-K, clusters, converter "
                         f"warps or PDL), not {t} (group {lay.group}, chain {chain})")
    prelude = backend.helpers("wgmma_rs8", request, n=chain, producer=True, weights_by_bulk=True,
                              stagger=bool(t.stagger), cluster=bool(cluster), widened=bool(slots),
                              l2_prefetch=bool(t.l2next)) + _stsm_prelude(plan, caps, backend)
    if plan.pdl:
        if cluster or t.streamk:
            raise ValueError("programmatic dependent launch is written for the wide form without clusters or stream-K")
        prelude += backend.helpers("grid_dependency", caps=caps)
    widen, _ = _widening(lay, "wq[j >> 2][j & 3]", "    ", backend)
    luts = HELD_LUTS if uses_tables(lay) else HELD_ZERO  # the tables ("prmt") and a zero, loaded: kept in registers
    to_f32 = "small_s32_to_f32" if lay.a_type == "s8" else "wg_acc_to_f32"
    if per_channel:
        scale_decl, scale_pick = _channel_scales("S + n0 + tab")
        scale_copy = ""
        tx = "X_BYTES + W_BYTES"
    else:
        scale_decl = ""
        scale_pick = ("const float sc0 = lds_f32(slane + s * S_BYTES), "
                      "sc1 = lds_f32(slane + s * S_BYTES + 32);  // group kt")
        scale_copy = "\n        bulk_copy_g2s(s0 + s * S_BYTES, S + (size_t)kt * N + n0, S_BYTES, full);  // group kt's scales"
        tx = "X_BYTES + W_BYTES + S_BYTES"
    params = eight_bit_params(
        plan.kernel_name, b_doc="int4 codes in the register-A layout (humming.core.families.register_a8.layout)",
        s_doc="fp32 scales [K/group, N], natural column order", bias_doc="[N] or null",
        tensor_maps=("XMAP", f"activation codes [M, K]: boxes of {t.bm} rows x 128 bytes, 128-byte swizzle"),
        block_threads="cfg::BLOCK_THREADS")
    stagger_take = stagger_give = ""
    if t.stagger:  # a staggered start: the warpgroups' wgmma chains alternate instead of running side by side
        behind = "one wgmma chain" if t.stagger == 1 else f"{t.stagger} wgmma chains"
        stagger_take = (f"  if (wg == 1) consumer_turn_take();  // start {behind} behind warpgroup 0, so that "
                        "each promotes while the other's wgmmas run\n")
        first = " && hv == 0" if chain == BT else ""
        stagger_give = f"\n      if (wg == 0 && kt == 0{first}) consumer_turn_give();  // warpgroup 1 may start"
    if direct:
        from humming.core.families.register_a8.direct import direct_loop

        main_loop = direct_loop(bool(t.stagger), lay.a_type, t.bm // chain, max(t.stagger, 1), lay.widen)
        partials = ""
        chain_doc = ("CHAINS = BT / WT;          // token chains of WT: each accumulating straight into its part of "
                     "facc (or the int32 sums)")
    elif chain == BT:
        if slots:
            raise ValueError("the converter warps are written for the 64-token chains of the wide form")
        main_loop = _WIDE_LOOP.format(scale_pick=scale_pick, widen=widen, stagger_give=stagger_give,
                                      promote=_wide_promote(to_f32))
        partials = ("  wg_acc_t part[WG_ACC_REGS];\n  #pragma unroll\n"
                    "  for (int i = 0; i < WG_ACC_REGS; ++i) part[i] = 0;\n")
        chain_doc = "HALVES = BT / WT;          // token halves: one m64n128k32 chain each, sharing the widened A fragment"
    else:  # (with converter warps the stage's fragments come from their slot instead of the consumers' widening)
        main_loop = _quarter_loop(scale_pick, widen, stagger_give, to_f32, t.bm // chain, max(t.stagger, 1),
                                  head=_WIDENED_STAGE_HEAD if slots else None)
        partials = ("  wg_acc_t pa[WG_ACC_REGS], pb[WG_ACC_REGS];   // two partials: one chain runs while the other's "
                    "is promoted\n  #pragma unroll\n  for (int i = 0; i < WG_ACC_REGS; ++i) { pa[i] = 0; pb[i] = 0; }\n")
        chain_doc = ("CHAINS = BT / WT;          // token quarters: one m64n64k32 chain each, sharing the widened A "
                     "fragment")
    if cluster:  # both blocks' consumers release each slot that is refilled, in both blocks
        main_loop = _cluster_release(main_loop)
    cfg_head = _WIDE_CFG.format(WIDE_BT=t.bm, chain=chain, BC=BC, BK=BK, stages=t.stages, chain_doc=chain_doc,
                                raster=t.raster, W_BYTES=W_BYTES, S_BYTES=S_BYTES, tx=tx)
    if slots:
        cfg_head += (f"\nconstexpr int A_SLOTS = {slots};   // slots of widened fragments (the converter warps')\n"
                     "constexpr int A_BYTES = THREADS * 64;   // a slot: 64 bytes per consumer lane, k32 step ks at + ks * THREADS * 16\n"
                     "constexpr int CONVERTERS = 96;          // converter threads: the producer warpgroup's warps 1-3")
    if t.streamk:  # persistent blocks, one segment after another (humming.core.families.register_a8.streamk)
        from humming.core.families.register_a8.streamk import wgmma_rs8_streamk_source

        return wgmma_rs8_streamk_source(plan, backend, caps, dict(
            request=request, chain=chain, per_channel=per_channel, luts=luts, main_loop=main_loop, partials=partials,
            cfg_head=cfg_head))
    producer_loop, token_wait = _wide_producer_loop(scale_copy, bool(plan.pdl))
    if t.l2next:  # after the tile's last stage: the next wave's block's first stages into L2
        if plan.pdl or cluster or slots:
            raise ValueError("the next wave's L2 prefetch is written for the plain producer loop of the wide form")
        producer_loop += _next_wave_prefetch(t.raster, bool(scale_copy))
    full_count = "1 + CONVERTERS / 32" if slots else "1"  # (the producer's copies, and the converter warps')
    if slots:
        slot_decl = ("  const uint32_t aw0 = t0 + BT * 4;                               // A_SLOTS slots of widened "
                     "fragments\n  __shared__ __align__(8) uint64_t cbar[STAGES];  // each slot's codes have landed "
                     "(the converters wait here)\n  const uint32_t cbar0 = smem_u32(cbar);\n")
        slot_init = ("    #pragma unroll\n    for (int s = 0; s < STAGES; ++s) mbar_init(cbar0 + 8 * s, 1);\n")
        converters = _converter_loop(lay)
        producer_loop = _converter_producer_loop(scale_copy)
        consumer_lane = (HELD_ZERO + "  const uint32_t alane = aw0 + tid * 16 + zero;   // its fragment in a slot: "
                         "16 bytes per k32 step, + ks * THREADS * 16\n")
    else:
        slot_decl = slot_init = converters = ""
        consumer_lane = (luts + "  const uint32_t wlane = w0 + wg * SLAB_BYTES + w * 1024 + lane * 16 + zero;   // "
                         "its words 4 hf + jj: + hf * 512 in a slot\n")
    epilogue = _epilogue(True, bool(t.stsm), direct)
    # (the consumers' first FULL barrier comes after the producer's wait anyway; theirs makes the order of their
    # output stores after the previous kernel explicit)
    consumer_wait = "  pdl_wait();  // the previous kernel has finished before this block writes its output\n" if plan.pdl else ""
    source = f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
{cfg_head}
constexpr int OUT_LD = BC + {OUT_PAD};         // staging pitch (16-bit values)
static_assert(W_BYTES == 2 * SLAB_BYTES, "two slabs per block");
static_assert(X_BYTES % 1024 == 0, "1024-byte aligned activation tiles");
static_assert(WG_ACC_REGS == WT / 2, "m64nWT accumulators: WT/2 registers per thread");
{_CFG_END}
{params}{_block_head(t.raster)}  const uint32_t x0 = (smem_u32(smem) + 1023u) & ~1023u;   // STAGES activation slots (then the staging tile)
  const uint32_t w0 = x0 + STAGES * X_BYTES, s0 = w0 + STAGES * W_BYTES;   // code slots, scale slots
  const uint32_t t0 = s0 + STAGES * S_BYTES;                       // the block's BT token scales (fp32)
{slot_decl}
  __shared__ __align__(8) uint64_t xbar[2 * STAGES + 1];  // FULL[STAGES], EMPTY[STAGES], then the token scales'
{HELD_DECL}  const uint32_t xbar0 = smem_u32(xbar);
  if (tid == 0) {{
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) {{
      mbar_init(xbar0 + 8 * s, {full_count});
      mbar_init(xbar0 + 8 * (STAGES + s), THREADS / 32);
    }}
    mbar_init(xbar0 + 8 * (2 * STAGES), 32);
{slot_init}{held_init(backend)}    mbar_init_fence();
  }}
  __syncthreads();
  if (warp >= THREADS / 32) {{  // ---- the producer warpgroup: its first thread issues each stage's copies
    setmaxnreg_dec<40>();
    if (tid == THREADS) {{
      // the block's slabs n0 / 64 and n0 / 64 + 1: ktiles stages of SLAB_BYTES each
      const unsigned char* codes = reinterpret_cast<const unsigned char*>(Bw) + (size_t)(n0 / 64) * ktiles * SLAB_BYTES;
{producer_loop}
    }} else if (warp == THREADS / 32 + 1) {{  // the next warp: the epilogue's token scales, off its critical path
{token_wait}      const float scale = GS ? out_scale * load_f32(GS) : out_scale;
      #pragma unroll
      for (int i = lane; i < BT; i += 32) {{
        const int tok = m0 + i;
        sts_f32(t0 + i * 4, (TS && tok < M) ? scale * load_f32(TS + tok) : scale);
      }}
      mbar_arrive(xbar0 + 8 * (2 * STAGES));  // release: the stores above are visible to whoever waits
    }}
{converters}    return;
  }}
  setmaxnreg_inc<232>();  // the consumers take the producer's registers
{consumer_wait}
  const int tab = 64 * wg + 16 * w + g;                       // this lane's channels in the block: tab and tab + 8
{consumer_lane}  const uint32_t slane = s0 + tab * 4 + zero;                 // its group scales in a slot: tab, then tab + 8 at + 32
{DESC0}{scale_decl}  float facc[BT / 2];     // [chain][WT / 8][2][2]: facc[4j + 2h + e] = channel tab + 8h, token 8j + 2q + e
  #pragma unroll
  for (int i = 0; i < BT / 2; ++i) facc[i] = 0.0f;
{partials}
{stagger_take}{main_loop}  consumer_sync();                 // all wgmmas done: the activation slots become the staging tile

{epilogue}{STAGED_COPY_OUT.fill(sync="consumer_sync")}"""
    return _cluster_source(source, t.raster) if cluster else source


def _next_wave_prefetch(raster: int, group_scales: bool) -> str:
    """The producer thread's L2 prefetch, after its tile's last stage, of the first STAGES stages' codes (and group
    scales) of the block launched one wave later: block id + the SM count, its tile by the block's own mapping
    (generator_wgmma_rs.tile_of_block, renamed), so that block's pipeline fill reads the weights from L2."""
    if raster:  # the block's own lines 2-3 for block nb: first / rows / m0 / n0 -> nfirst / nrows / nm0 / nn0
        lines = TILE_RASTERIZED.split("\n")[1:]
        tile = "\n".join(re.sub(r"\b(bid|first|rows|m0|n0)\b", lambda m: "nb" if m.group(1) == "bid" else "n" + m.group(1),
                                ln.split("   //")[0].rstrip()) for ln in lines)
        head = "        const int nb = bid + (int)nsm;"
    else:
        if TILE_IN_LAUNCH_ORDER != "  const int m0 = blockIdx.x * BT, n0 = blockIdx.y * BC;":
            raise ValueError("internal: the launch-order tile mapping changed; the next wave's prefetch follows it")
        tile = "  const int nm0 = nb % (int)gridDim.x * BT, nn0 = nb / (int)gridDim.x * BC;"
        head = "        const int nb = blockIdx.x + blockIdx.y * gridDim.x + (int)nsm;"
    tile = "\n".join("          " + ln.strip() for ln in tile.split("\n"))
    scales = ("\n            l2_prefetch(S + (size_t)kt * N + nn0, S_BYTES);" if group_scales else "")
    return f"""
      {{  // the block launched one wave later (block id + the SM count): its first stages' weights into L2
        const uint32_t nsm = sm_count();
{head}
        if (nb < (int)(gridDim.x * gridDim.y)) {{
{tile}
          const unsigned char* ncodes = reinterpret_cast<const unsigned char*>(Bw) + (size_t)(nn0 / 64) * ktiles * SLAB_BYTES;
          (void)nm0;   // (its activations are shared with this wave's blocks: in L2 already)
          for (int kt = 0; kt < min(ktiles, STAGES); ++kt) {{
            l2_prefetch(ncodes + (size_t)kt * SLAB_BYTES, SLAB_BYTES);
            l2_prefetch(ncodes + ((size_t)ktiles + kt) * SLAB_BYTES, SLAB_BYTES);{scales}
          }}
        }}
      }}"""


_WIDE_WEIGHTS = ("bulk_copy_g2s(w0 + s * W_BYTES, codes + (size_t)kt * SLAB_BYTES, SLAB_BYTES, full);",
                 "bulk_copy_g2s(w0 + s * W_BYTES + SLAB_BYTES, codes + ((size_t)ktiles + kt) * SLAB_BYTES, SLAB_BYTES, full);")


def _converter_producer_loop(scale_copy: str) -> str:
    """The producer thread's loop with converter warps (TileConfig.widened): each stage's codes on the slot's own
    codes mbarrier (the converters wait there), its activations and scales on the FULL mbarrier, which the converter
    warps' arrivals complete."""
    weights = "\n".join("        " + ln.replace(", full);", ", cfull);") for ln in _WIDE_WEIGHTS)
    scales = "\n".join("        " + ln.strip() for ln in scale_copy.split("\n") if ln.strip())
    return ("""      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t full = xbar0 + 8 * s, cfull = cbar0 + 8 * s;
        if (kt >= STAGES) mbar_wait(xbar0 + 8 * (STAGES + s), ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
        mbar_expect_tx(cfull, W_BYTES);
""" + weights + """
        mbar_expect_tx(full, STAGE_TX - W_BYTES);
        tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);
""" + (scales + "\n" if scales else "") + "      }")


def _wide_producer_loop(scale_copy: str, pdl: bool) -> tuple[str, str]:
    """The wide form's producer loop (its first thread) and the token-scale warp's wait. With programmatic dependent
    launch the first STAGES stages' codes and scales are copied before griddepcontrol.wait (they do not come from
    the previous kernel), their activations after it; each FULL mbarrier expects the whole stage either way."""
    lines = [*_WIDE_WEIGHTS, *(ln.strip() for ln in scale_copy.split("\n") if ln.strip())]

    def weights(indent: int) -> str:
        return "\n".join(" " * indent + ln for ln in lines)

    if not pdl:
        return ("""      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t full = xbar0 + 8 * s;
        if (kt >= STAGES) mbar_wait(xbar0 + 8 * (STAGES + s), ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
        mbar_expect_tx(full, STAGE_TX);
        tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);
""" + weights(8) + "\n      }"), ""
    return ("""      // programmatic dependent launch: the first stages' weights while the previous kernel finishes
      for (int kt = 0; kt < min(ktiles, STAGES); ++kt) {
        const int s = kt;
        const uint32_t full = xbar0 + 8 * s;
        mbar_expect_tx(full, STAGE_TX);
""" + weights(8) + """
      }
      pdl_wait();  // the previous kernel (the activation quantizer) has finished: its codes are visible
      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t full = xbar0 + 8 * s;
        if (kt >= STAGES) {
          mbar_wait(xbar0 + 8 * (STAGES + s), ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
          mbar_expect_tx(full, STAGE_TX);
""" + weights(10) + """
        }
        tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);
      }"""), "      pdl_wait();  // the token scales come from the previous kernel (the activation quantizer)\n"


# ---- the wide form's cluster option (TileConfig.cluster = 2; humming.core.families.register_a.pair_cluster)
def _cluster_release(loop: str) -> str:
    """The wide form's stage loop with each warp's release of the slot sent to both blocks, where it is refilled."""
    old = "if (lane == 0) { fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + s)); }"
    new = ("if (lane == 0 && kt + STAGES < ktiles) {  // (the last STAGES stages are not refilled)\n"
           "      fence_proxy_async_smem();\n"
           "      mbar_arrive_peer(xbar0 + 8 * (STAGES + s), 0);\n"
           "      mbar_arrive_peer(xbar0 + 8 * (STAGES + s), 1);\n"
           "    }")
    if loop.count(old) != 1:
        raise ValueError("internal: the wide form's stage loop no longer has the one slot release the cluster rewrites")
    return loop.replace(old, new)


def _cluster_source(source: str, raster: int) -> str:
    """The wide kernel's text with the cluster option's tile of block, barrier counts and multicast copies."""
    return pair_cluster.rewrite(source, raster, "tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);", "wide kernel")


# the wide form's constants (both its kernels: humming.core.families.register_a8.streamk's too)
_WIDE_CFG = """constexpr int BT = {WIDE_BT}, WT = {chain}, BC = {BC}, BK = {BK}, STAGES = {stages};   // tokens (per wgmma), channels, k bytes per stage
constexpr int {chain_doc}
static_assert(BT % WT == 0, "whole chains");
constexpr int THREADS = 256;             // two warpgroups; warpgroup wg owns channels 64 wg .. 64 wg + 63 of the tile
constexpr int BLOCK_THREADS = THREADS + 128;  // and a producer warpgroup (warps 8-11)
constexpr int RASTER = {raster};             // token tiles per rasterization group (0: launch order)
constexpr int X_BYTES = BT * BK;         // one activation tile: BT rows x 128 bytes (128-byte swizzle)
constexpr int SLAB_BYTES = 4096;         // one 64-channel x 128-k stage of int4 codes (layout_wgmma_rs8)
constexpr int W_BYTES = {W_BYTES}, S_BYTES = {S_BYTES};   // a slot's codes (two slabs) and group scales (fp32)
constexpr int STAGE_TX = {tx};   // bytes each stage's copies bring"""


def _wide_promote(to_f32: str) -> str:
    """facc[half hv] += the partial times the scales of the thread's two channels (sc0: row g, sc1: row g + 8)."""
    return "\n".join(f"        facc[WG_ACC_REGS * hv + 4 * j + {i}] += {to_f32}(part[4 * j + {i}]) * sc{i // 2};"
                     for i in range(4))


# a wide-form stage's head: wait for the stage, its codes and scales, widen the fragment (both chain widths)
_WIDE_STAGE_HEAD = """  #pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {{
    const int s = kt % STAGES;
    mbar_wait(xbar0 + 8 * s, (kt / STAGES) & 1);  // stage kt's activations, codes and scales have landed
    uint32_t wq[2][4];   // word j = 4 hf + jj = k32 step j / 2, register pair j % 2
    lds_128(wq[0], wlane + s * W_BYTES);
    lds_128(wq[1], wlane + s * W_BYTES + 512);
    {scale_pick}
    // A of stage kt: a[ks][2 sub] = channel row g, a[ks][2 sub + 1] = row g + 8; k 32 ks + 16 sub + 4 q ..
    uint32_t a[4][4];
    #pragma unroll
    for (int j = 0; j < 8; ++j){widen}
    const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));   // slot s's activation tile
"""

# the stage's head with the weights widened by the converter warps (TileConfig.widened): one wait (the stage's FULL
# mbarrier completes with the producer's copies and the converter warps' arrivals), the lane's 64 bytes of fragments
# from slot kt % A_SLOTS (free again once the consumers release the stage: the converters wait for that)
_WIDENED_STAGE_HEAD = """  #pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {{
    const int s = kt % STAGES, u = kt % A_SLOTS;
    mbar_wait(xbar0 + 8 * s, (kt / STAGES) & 1);  // stage kt's activations, scales and widened fragments are in
    // A of stage kt: a[ks][2 sub] = channel row g, a[ks][2 sub + 1] = row g + 8; k 32 ks + 16 sub + 4 q ..
    uint32_t a[4][4];
    #pragma unroll
    for (int ks = 0; ks < 4; ++ks) lds_128(a[ks], alane + u * A_BYTES + ks * (THREADS * 16));
    {scale_pick}
    const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));   // slot s's activation tile
"""


def _converter_loop(lay) -> str:
    """The converter warps (the producer warpgroup's warps 1-3, after warp 1 staged the token scales): per stage, wait
    for its codes (their own mbarrier) and for the consumers' release of stage kt - A_SLOTS (whose fragments slot
    kt % A_SLOTS held), widen every consumer lane's 8 words into its 64 bytes of the slot (the lane's words and
    fragment registers as the consumers' own widening has them), then arrive at the stage's FULL mbarrier, which
    completes with the producer's copies and the three converter warps' arrivals: the consumers wait once a stage,
    as without converters."""
    tables = ""
    if uses_tables(lay):
        tables = ("      const uint32_t held0 = smem_u32(held);   // the widening's tables\n"
                  "      const uint32_t la0 = lds_32(held0), la1 = lds_32(held0 + 4), lb0 = lds_32(held0 + 8), "
                  "lb1 = lds_32(held0 + 12);\n")
    if lay.a_type == "e4m3":
        widen = e4m3_widen_call(lay.widen, "wq[ks >> 1][2 * (ks & 1) + e]", "f[2 * e]", "f[2 * e + 1]")
    else:
        widen = "{ f[2 * e] = s8x16_lo(wq[ks >> 1][2 * (ks & 1) + e]); f[2 * e + 1] = s8x16_hi(wq[ks >> 1][2 * (ks & 1) + e]); }"
    return f"""    if (warp > THREADS / 32) {{  // ---- the converter warps: every stage's weights widened into a slot of fragments
{tables}      const int c = tid - THREADS - 32;   // converter thread 0 .. CONVERTERS - 1
      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {{
        const int s = kt % STAGES, u = kt % A_SLOTS;
        mbar_wait(cbar0 + 8 * s, (kt / STAGES) & 1);  // stage kt's codes have landed
        if (kt >= A_SLOTS) {{  // the consumers released stage kt - A_SLOTS: they have loaded its fragments from slot u
          const int r = kt - A_SLOTS;
          mbar_wait(xbar0 + 8 * (STAGES + r % STAGES), (r / STAGES) & 1);
        }}
        #pragma unroll 1
        for (int l = c; l < THREADS; l += CONVERTERS) {{  // consumer lane l: warpgroup l / 128, warp (l / 32) % 4, lane l % 32
          const uint32_t src = w0 + s * W_BYTES + (l >> 7) * SLAB_BYTES + ((l >> 5) & 3) * 1024 + (l & 31) * 16;
          uint32_t wq[2][4];   // its word j = 4 hf + jj, as the consumers' own widening loads them
          lds_128(wq[0], src);
          lds_128(wq[1], src + 512);
          #pragma unroll
          for (int ks = 0; ks < 4; ++ks) {{  // fragment registers a[ks][0..3] from words 2 ks and 2 ks + 1
            uint32_t f[4];
            #pragma unroll
            for (int e = 0; e < 2; ++e) {widen}
            sts_128(aw0 + u * A_BYTES + ks * (THREADS * 16) + l * 16, f[0], f[1], f[2], f[3]);
          }}
        }}
        __syncwarp();
        if (lane == 0) mbar_arrive(xbar0 + 8 * s);  // release: the slot's stores are visible to the consumers
      }}
    }}
"""


# the wide form's main loop with 128-token chains: two token halves (chain, wait, promote)
_WIDE_LOOP = _WIDE_STAGE_HEAD + """    #pragma unroll
    for (int hv = 0; hv < HALVES; ++hv) {{  // tokens 128 hv .. 128 hv + 127: rows of the slot, + WT * 128 bytes each
      wgmma_fence_operand(part);
      wgmma_fence();
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // k32 steps: +32 bytes inside the swizzled rows = +2 in the address field
        wgmma_k32_rs(part, a[ks], desc_x + hv * (WT * BK / 16) + 2 * ks, ks > 0);
      wgmma_commit();{stagger_give}
      wgmma_wait<0>();
      wgmma_fence_operand(part);
      if (hv == HALVES - 1) {{  // this warp's reads of the slot are done: release it to the producer
        __syncwarp();
        if (lane == 0) {{ fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + s)); }}
      }}
      #pragma unroll
      for (int j = 0; j < WT / 8; ++j) {{  // part[4j + 2h + e]: channel row g + 8h, token 128 hv + 8j + 2q + e
{promote}
      }}
    }}
  }}
"""


def _quarter_loop(scale_pick: str, widen: str, stagger_give: str, to_f32: str, chains: int = 4,
                  give_after: int = 1, head: str | None = None) -> str:
    """The wide form's main loop with ``chains`` m64n64k32 token quarters per stage (4: 256 tokens, 3: a tile of 192
    fitted to M) and two partials (pa, pb, alternating): chain c + 1 is issued before chain c is waited for and
    promoted, so each warpgroup keeps a chain queued on the tensor pipe while it promotes. (The last chain's promotion
    stays in its stage: deferred under the next stage's first chain, ptxas cannot tell that its partial was waited for
    across the loop edge and injects a full wait, C7517.)"""
    if chains < 2:
        raise ValueError(f"the quarter loop overlaps two chains at least, not {chains}")
    ind = "    "
    give = stagger_give.replace("\n      ", ind) + "\n" if stagger_give else ""
    release = (f"{ind}__syncwarp();   // this warp's reads of the slot are done: release it to the producer\n"
               f"{ind}if (lane == 0) {{ fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + s)); }}\n")
    last = _wait_promote(chains - 1, 0, to_f32, ind).split("\n", 1)
    body = _chain_step(0, ind) + (give if give_after == 1 else "")
    for c in range(1, chains):  # (warpgroup 0 gives the turn after its chain give_after - 1 is issued)
        body += _chain_step(c, ind) + (give if give_after == c + 1 else "") + _wait_promote(c - 1, 1, to_f32, ind)
    return ((head or _WIDE_STAGE_HEAD).format(scale_pick=scale_pick, widen=widen) + body
            + last[0] + "\n" + release + last[1] + "  }\n")


# the same pair of values as _EPILOGUE_STORES', for the stmatrix staging (TileConfig.stsm)
_STSM_VALUE = """      const uint32_t v = f32x2_to_act2(facc[4 * j + 2 * h] * ts[2 * j] * cs[h] + bs[h],
                                       facc[4 * j + 2 * h + 1] * ts[2 * j + 1] * cs[h] + bs[h]);"""


def _epilogue(wide: bool, stsm: bool = False, direct: bool = False) -> str:
    """The epilogue's scales and staging stores (16-bit stores, or stmatrix with ``stsm``; with ``direct`` the
    direct loop's channel scales in its per-channel factor)."""
    scale_line = "" if wide else "  const float scale = GS ? out_scale * load_f32(GS) : out_scale;\n"
    head = _EPILOGUE_HEAD.replace("{scale_line}", scale_line).replace("{ts_block}", _TS_SHARED if wide else _TS_GLOBAL)
    text = head + (stmatrix_staging("x0", _STSM_VALUE) + "\n" if stsm else _EPILOGUE_STORES)
    if direct:
        from humming.core.families.register_a8.direct import epilogue_scales

        text = epilogue_scales(text)
    return text


def _stsm_prelude(plan, caps, backend) -> str:
    """The stmatrix helper where the plan stages by stmatrix (TileConfig.stsm)."""
    if not plan.tiles.stsm:
        return ""
    return backend.helpers("stmatrix", caps=caps)
