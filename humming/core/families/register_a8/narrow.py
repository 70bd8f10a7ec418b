"""The narrow form of the register-A wgmma W4A8 kernel: C^T = W x^T for 128 output channels x 128 tokens per block,
int4 weights widened in registers as wgmma's A operand (the design of the WnA16 register-A kernel,
``humming.core.families.register_a.generator``, for 8-bit activations).

  * A = weights, from registers: warp w of warpgroup wg supplies rows 16w .. 16w+15 of the warpgroup's 64 channels
    (n0 + 64 wg + 16 w + {g, g + 8}, g = lane / 4) in the m16n8k32 A-fragment layout. The lane's 32 bytes of codes
    of a 128-deep stage (layout_wgmma_rs8) come in two 16-byte loads, PF stages ahead in a register ring; word j =
    (k32 step j / 2, register pair j % 2) widens into a[j / 2][2 (j % 2)] (row g) and a[j / 2][2 (j % 2) + 1] (row
    g + 8): s8 as 16 x code with two masks, e4m3 with int4n8_to_e4m3x8_x (two byte-permute lookups and an xor per
    16-bit half on the layout's relabelled codes, the lookup tables in registers).
  * B = activation codes: 128 token rows x 128 k bytes per stage, cp.async into 128-byte-swizzled K-major slots
    (rows past M zero-filled), or by TMA from a producer warpgroup (RegisterA8Tiles.bulk = 2), read through a matrix
    descriptor (+32 bytes per k32 step).
  * Per stage: two 64-token chains (four m64n64k32 each, scale-d 0 on the first) into two partials pa / pb; the
    second is issued before the first is waited for (wait_group 1), then facc += partial x the group scale of the
    thread's two channels (group 128 = one stage; per-channel: one scale, loaded once). With 128-token chains
    (the knob register_a8.chain 128): four m64n128k32 into one partial, wait, promote.

Iteration kt: widen the codes of kt (ring slot kt % R) -> load the codes (and group scales) of kt + PF -> wait for
this thread's copies of kt -> fence.proxy.async -> __syncthreads (everyone's copies landed; every wgmma of kt - 1 is
done) -> refill the slot of kt - 1 with stage kt + STAGES - 1 -> wgmma.fence, 4 x k32, commit -> wait<0> ->
promote. Then the epilogue (humming.core.families.register_a8.epilogue)."""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.common.emit import Template
from humming.core.common.kernel_params import eight_bit_params
from humming.core.common.wgmma import PRODUCER_WARPGROUP
from humming.core.families.register_a8.chains import chain_step, wait_promote
from humming.core.families.register_a8.direct import EPILOGUE_SCALES, narrow_direct
from humming.core.families.register_a8.epilogue import copy_out, epilogue, stsm_prelude
from humming.core.families.register_a8.pieces import (
    CFG_END,
    block_head,
    channel_scales,
    group_and_chain,
    to_f32,
    uses_tables,
    widening,
)
from humming.core.families.register_a8.planner import BC, BK, BT, OUT_PAD, PF

_KERNEL = Template("""// ===== humming generated kernel: ${kernel_name}
// ${summary}
${prelude}

namespace cfg {
constexpr int BT = ${bt}, WT = ${chain}, BC = ${bc}, BK = ${bk}, STAGES = ${stages};   // tokens (per wgmma chain), channels, k (bytes) per stage
constexpr int THREADS = 256;             // two warpgroups; warpgroup wg owns channels 64 wg .. 64 wg + 63 of the tile${block_threads}
constexpr int RASTER = ${raster};             // token tiles per rasterization group (0: launch order)
constexpr int LOOKAHEAD = STAGES - 1;    // activation stages loading while one is multiplied
constexpr int PF = ${prefetch}, R = PF + 1;           // weight stages in flight per lane, register ring size
constexpr int X_BYTES = BT * BK;         // one activation tile: BT rows x 128 bytes
constexpr int STAGE_WORDS = 4 * 256;     // 32-bit words of one 64-channel x 128-k stage of int4 codes (4 KB)
constexpr int OUT_LD = BC + ${out_pad};         // staging pitch (16-bit values)
static_assert(X_BYTES % 1024 == 0, "1024-byte aligned activation tiles");
static_assert(WG_ACC_REGS == WT / 2, "m64nWT accumulators: WT/2 registers per thread");
${cfg_end}
${params}${block_head}  const int slab = n0 / 64 + wg;                                 // this warpgroup's 64-channel slab
  const uint32_t x0 = (smem_u32(smem) + 1023u) & ~1023u;         // STAGES activation slots, then the staging tile

${load_code}

  // weights: words 4 hf + jj of this lane at ((slab * ktiles + kt) * 4 + w) * 256 + hf * 128 + lane * 4 + jj
  const uint32_t* wsrc = Bw + (size_t)slab * ktiles * STAGE_WORDS + w * 256 + lane * 4;
  const int tab = slab * 64 + 16 * w + g;                        // this lane's channels: tab and tab + 8
${scale_decl}${luts}  uint32_t wq[R][2][4];  // codes of the stages in flight: word j = 4 hf + jj = k32 step j / 2, register pair j % 2

  float facc[BT / 2];
${partials}  #pragma unroll
  for (int i = 0; i < BT / 2; ++i) facc[i] = 0.0f;

${prologue}  #pragma unroll
  for (int s = 0; s < PF; ++s)
    if (s < ktiles) {
${fetch_first}
    }

  for (int kb = 0; kb < ktiles; kb += R) {
    #pragma unroll
    for (int u = 0; u < R; ++u) {
      const int kt = kb + u, s = u;   // ring slot of stage kt
      if (kt >= ktiles) break;
      // A of stage kt: a[ks][2 sub] = channel row g, a[ks][2 sub + 1] = row g + 8; k 32 ks + 16 sub + 4 q ..
      uint32_t a[4][4];
      #pragma unroll
      for (int j = 0; j < 8; ++j)${widen}
      ${scale_pick}
      if (kt + PF < ktiles) {  // the ring slot of kt - 1 takes stage kt + PF
${fetch_next}
      }
${stage_wait}
      const uint64_t desc_x = make_smem_desc(x0 + (kt % STAGES) * X_BYTES);
${chains}    }
  }
${final}
  ${sync}();                 // all wgmmas and copies done: the activation slots become the staging tile

${epilogue}${copy_out}""", bt=str(BT), bc=str(BC), bk=str(BK), out_pad=str(OUT_PAD), cfg_end=CFG_END)

# the activation copies of the lock-step pipeline: every thread copies its chunks of each stage with cp.async
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
_CP_ASYNC_PROLOGUE = """  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {
    if (s < ktiles) load_stage(s, s);
    copy_commit();
  }
"""
# the lock-step pipeline's wait for stage kt: this thread's copies, then everyone's (a block barrier), then the refill
_CP_ASYNC_WAIT = """      copy_wait<LOOKAHEAD - 1>();  // this thread's copies of stage kt have landed
      fence_proxy_async();         // ... and are visible to wgmma (async proxy)
      __syncthreads();             // everyone's; every wgmma of kt - 1 has finished (waited below)
      {
        const int next = kt + LOOKAHEAD;  // refills the slot of kt - 1
        if (next < ktiles) load_stage(next % STAGES, next);
        copy_commit();
      }"""
# with the producer warpgroup: the stage's FULL mbarrier, and each warp's release of the slot after its wgmmas
_PRODUCER_WAIT = """      mbar_wait(xbar0 + 8 * (kt % STAGES), (kt / STAGES) & 1);  // stage kt's activations have landed"""
_PRODUCER_RELEASE = """
      if (lane == 0) mbar_arrive(xbar0 + 8 * (STAGES + kt % STAGES));  // this warp is done with the slot"""

# the group scales of stage ``atom`` into ring slot ``slot``: this lane's two channels
_SCALE_FETCH = Template("{ const float* sp = S + (size_t)(${atom}) * N + tab; "
                        "sq[${slot}][0] = load_f32(sp); sq[${slot}][1] = load_f32(sp + 8); }")

# the stage with one 128-token chain: one m64n128k32 chain into the partial, wait, promote
_CHAIN = Template("""      wgmma_fence_operand(part);
      wgmma_fence();               // the a[] registers written above, before the wgmmas read them
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // k32 steps: +32 bytes inside the swizzled rows = +2 in the address field
        wgmma_k32_rs(part, a[ks], desc_x + 2 * ks, ks > 0);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(part);${release}
      #pragma unroll
      for (int j = 0; j < BT / 8; ++j) {  // part[4j + 2h + e]: channel row g + 8h, token 8j + 2q + e
        facc[4 * j + 0] += ${to_f32}(part[4 * j + 0]) * sc0;
        facc[4 * j + 1] += ${to_f32}(part[4 * j + 1]) * sc0;
        facc[4 * j + 2] += ${to_f32}(part[4 * j + 2]) * sc1;
        facc[4 * j + 3] += ${to_f32}(part[4 * j + 3]) * sc1;
      }
""")


def luts(backend) -> str:
    """The lookup tables of the "prmt" widening (the backend's data "rs8_widen_tables"), computed once from ktiles."""
    t = backend.data("rs8_widen_tables")
    return ("  // the widening's lookup tables (int4n8_to_e4m3x8_x), in registers: ktiles >> 30 is 0 for any K here, but\n"
            "  // not known to the compiler, so the tables are computed once instead of rematerialized per use\n"
            "  const uint32_t keep = (uint32_t)(ktiles >> 30);\n"
            f"  const uint32_t la0 = 0x{t[0][0]:08X}u + keep, la1 = 0x{t[1][0]:08X}u + keep;   // {t[0][1]} | {t[1][1]}\n"
            f"  const uint32_t lb0 = 0x{t[2][0]:08X}u + keep, lb1 = 0x{t[3][0]:08X}u + keep;   // {t[2][1]} | {t[3][1]}\n")


def _halves(release: str, to_f32: str) -> str:
    """The stage as two m64n64k32 token halves into two partials: the second half is issued before the first is
    waited for (wait_group 1) and promoted."""
    ind = "      "
    wait, fence, promote = wait_promote(1, 0, to_f32, ind).split("\n", 2)  # the slot is released after the last wait
    return (chain_step(0, ind) + chain_step(1, ind) + wait_promote(0, 1, to_f32, ind)
            + f"{wait}\n{fence}{release}\n{promote}")


@dataclass(frozen=True)
class Rs8Rows:
    """Where the narrow form's token rows come from and go to, other than rows m0 .. m0 + BT of A and C (the MoE form,
    humming.core.families.moe_register_a8; the lock-step cp.async pipeline only). ``params``: the whole parameter
    list (signature line through the opening brace); ``tile``: m0 / n0 and what follows from them (may return early;
    ends with the barrier its shared state needs); ``load_code``: the ``load_stage(slot, kt)`` lambda and its setup;
    ``epilogue``: the scales and staging stores; ``copy_out``: the staged tile to C, closing the kernel."""

    params: str
    tile: str
    load_code: str
    epilogue: str
    copy_out: str


def narrow_kernel_source(plan, backend, caps=None, rows: Rs8Rows | None = None) -> str:
    """The narrow form's kernel (the plan's checks done by humming.core.families.register_a8.generator); ``rows``:
    the MoE form's rows (Rs8Rows)."""
    t = plan.tiles
    lay = plan.layout
    producer = t.bulk == 2  # a producer warpgroup brings the activations in by TMA; consumers release slots
    per_channel, request, chain = group_and_chain(plan, caps)
    if per_channel:
        scale_decl, scale_pick = channel_scales("S + tab")
    else:
        scale_decl = "  float sq[R][2];  // group scales of the stages in flight: this lane's two channels\n"
        scale_pick = "const float sc0 = sq[s][0], sc1 = sq[s][1];"

    def fetch(slot: str, atom: str, indent: str) -> str:
        lines = [f"const uint32_t* p = wsrc + (size_t)({atom}) * STAGE_WORDS;",
                 f"load_g128(wq[{slot}][0], p);", f"load_g128(wq[{slot}][1], p + 128);"]
        if not per_channel:
            lines.append(_SCALE_FETCH.fill(slot=slot, atom=atom))
        return "\n".join(indent + ln for ln in lines)

    if producer:
        load_code, prologue, stage_wait, release, final = PRODUCER_WARPGROUP, "", _PRODUCER_WAIT, _PRODUCER_RELEASE, ""
        sync = "consumer_sync"
        params = eight_bit_params(
            plan.kernel_name, b_doc="int4 codes in the register-A layout (humming.core.families.register_a8.layout)",
            s_doc="fp32 scales [K/group, N], natural column order", bias_doc="[N] or null",
            tensor_maps=("XMAP", "activation codes [M, K]: boxes of 128 rows x 128 bytes, 128-byte swizzle"),
            block_threads="cfg::BLOCK_THREADS")
        block_threads = "\nconstexpr int BLOCK_THREADS = THREADS + 128;  // and a producer warpgroup (warps 8-11)"
    else:
        load_code, prologue, stage_wait, release = _CP_ASYNC_LOADS, _CP_ASYNC_PROLOGUE, _CP_ASYNC_WAIT, ""
        final = "  copy_wait<0>();\n  fence_proxy_async();"
        sync = "__syncthreads"
        params = eight_bit_params(
            plan.kernel_name, b_doc="int4 codes in the register-A layout (humming.core.families.register_a8.layout)",
            s_doc="fp32 scales [K/group, N], natural column order", bias_doc="[N] or null")
        block_threads = ""

    if rows is not None:
        if producer or t.direct or t.stsm:
            raise ValueError("the routed narrow W4A8 form runs the lock-step cp.async pipeline, promoted partials and "
                             "16-bit staging stores")
        params, load_code = rows.params, rows.load_code
    if t.direct:  # per-channel scales: the chain straight into the sums (humming.core.families.register_a8.direct)
        if not per_channel or chain != BT:
            raise ValueError(f"the narrow W4A8 form's direct accumulation is written for per-channel scales and one "
                             f"{BT}-token chain, not group {lay.group}, chain {chain}")
        partials, chains, after = narrow_direct(release, lay.a_type)
        final += "\n" + after
    elif chain == BT:
        partials = "  wg_acc_t part[WG_ACC_REGS];\n"
        chains = _CHAIN.fill(release=release, to_f32=to_f32(lay))
    else:
        partials = ("  wg_acc_t pa[WG_ACC_REGS], pb[WG_ACC_REGS];   // two partials: one half runs while the other is "
                    "promoted\n")
        chains = _halves(release, to_f32(lay))
    return _KERNEL.fill(
        kernel_name=plan.kernel_name, summary=plan.summary(),
        prelude=backend.helpers("wgmma_rs8", request, n=chain, producer=producer) + stsm_prelude(plan, caps, backend),
        chain=chain, stages=t.stages, block_threads=block_threads, raster=t.raster, prefetch=t.prefetch or PF,
        params=params, block_head=block_head(t.raster, tile=rows.tile if rows else None), load_code=load_code,
        scale_decl=scale_decl,
        luts=luts(backend) if uses_tables(lay) else "", partials=partials, prologue=prologue,
        fetch_first=fetch("s", "s", "      "), widen=widening(lay, "wq[s][j >> 2][j & 3]", "      "),
        scale_pick=scale_pick, fetch_next=fetch("(s + PF) % R", "kt + PF", "        "), stage_wait=stage_wait,
        chains=chains, final=final, sync=sync,
        epilogue=rows.epilogue if rows else epilogue(False, bool(t.stsm), EPILOGUE_SCALES if t.direct else None),
        copy_out=rows.copy_out if rows else copy_out(sync))
