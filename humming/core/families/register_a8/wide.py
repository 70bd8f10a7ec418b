"""The wide form of the register-A W4A8 kernel (RegisterA8Tiles.bm 256, or 192 / 128 fitted to M; RegisterA8Tiles.wide at 128):
each warpgroup's A fragment widened once per stage for every token chain (two m64n128k32 halves, or 64-token quarters);
a producer warpgroup brings each stage's activations (one TMA tensor copy), the block's int4 codes (two 4 KB bulk
copies, one per 64-channel slab) and group scales (512 B) into one slot (humming.core.families.register_a8.producer),
its next warp stages the block's token scales for the epilogue. Options: converter warps (.converters), pairs of
blocks multicasting the activations (cluster.py), programmatic dependent launch, the next wave's weights into L2."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.kernel_params import eight_bit_params
from humming.core.families.register_a8 import cluster, converters
from humming.core.families.register_a8.direct import EPILOGUE_SCALES
from humming.core.families.register_a8.epilogue import copy_out, epilogue, stsm_prelude
from humming.core.families.register_a8.pieces import CFG_END, DESC0, HELD_DECL, HELD_ZERO, block_head, held_init
from humming.core.families.register_a8.planner import OUT_PAD
from humming.core.families.register_a8.producer import next_wave_prefetch, producer_loop
from humming.core.families.register_a8.wide_parts import wide_parts

_KERNEL = Template("""// ===== humming generated kernel: ${kernel_name}
// ${summary}
${prelude}

namespace cfg {
${cfg_head}
constexpr int OUT_LD = BC + ${out_pad};         // staging pitch (16-bit values)
static_assert(W_BYTES == 2 * SLAB_BYTES, "two slabs per block");
static_assert(X_BYTES % 1024 == 0, "1024-byte aligned activation tiles");
static_assert(WG_ACC_REGS == WT / 2, "m64nWT accumulators: WT/2 registers per thread");
${cfg_end}
${params}${block_head}  const uint32_t x0 = (smem_u32(smem) + 1023u) & ~1023u;   // STAGES activation slots (then the staging tile)
  const uint32_t w0 = x0 + STAGES * X_BYTES, s0 = w0 + STAGES * W_BYTES;   // code slots, scale slots
  const uint32_t t0 = s0 + STAGES * S_BYTES;                       // the block's BT token scales (fp32)
${slot_decl}
  __shared__ __align__(8) uint64_t xbar[2 * STAGES + 1];  // FULL[STAGES], EMPTY[STAGES], then the token scales'
${held_decl}  const uint32_t xbar0 = smem_u32(xbar);
  if (tid == 0) {
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(xbar0 + 8 * s, ${full_count});
      ${empty_init}
    }
    mbar_init(xbar0 + 8 * (2 * STAGES), 32);
${slot_init}${held_init}    mbar_init_fence();
  }
  ${init_barrier}
  if (warp >= THREADS / 32) {  // ---- the producer warpgroup: its first thread issues each stage's copies
    setmaxnreg_dec<40>();
    if (tid == THREADS) {
      // the block's slabs n0 / 64 and n0 / 64 + 1: ktiles stages of SLAB_BYTES each
      const unsigned char* codes = reinterpret_cast<const unsigned char*>(Bw) + (size_t)(n0 / 64) * ktiles * SLAB_BYTES;
${producer_loop}
    } else if (warp == THREADS / 32 + 1) {  // the next warp: the epilogue's token scales, off its critical path
${token_wait}      const float scale = GS ? out_scale * load_f32(GS) : out_scale;
      #pragma unroll
      for (int i = lane; i < BT; i += 32) {
        const int tok = m0 + i;
        sts_f32(t0 + i * 4, (TS && tok < M) ? scale * load_f32(TS + tok) : scale);
      }
      mbar_arrive(xbar0 + 8 * (2 * STAGES));  // release: the stores above are visible to whoever waits
    }
${converters}    return;
  }
  setmaxnreg_inc<232>();  // the consumers take the producer's registers
${consumer_wait}
  const int tab = 64 * wg + 16 * w + g;                       // this lane's channels in the block: tab and tab + 8
${consumer_lane}  const uint32_t slane = s0 + tab * 4 + zero;                 // its group scales in a slot: tab, then tab + 8 at + 32
${desc0}${scale_decl}  float facc[BT / 2];     // [chain][WT / 8][2][2]: facc[4j + 2h + e] = channel tab + 8h, token 8j + 2q + e
  #pragma unroll
  for (int i = 0; i < BT / 2; ++i) facc[i] = 0.0f;
${partials}
${stagger_take}${main_loop}  consumer_sync();                 // all wgmmas done: the activation slots become the staging tile

${epilogue}${copy_out}""", out_pad=str(OUT_PAD), cfg_end=CFG_END, held_decl=HELD_DECL, desc0=DESC0,
                   empty_init="mbar_init(xbar0 + 8 * (STAGES + s), THREADS / 32);", init_barrier="__syncthreads();")

# the converter warps' slots of fragments and the codes' own mbarriers (RegisterA8Tiles.widened)
_SLOT_DECL = """  const uint32_t aw0 = t0 + BT * 4;                               // A_SLOTS slots of widened fragments
  __shared__ __align__(8) uint64_t cbar[STAGES];  // each slot's codes have landed (the converters wait here)
  const uint32_t cbar0 = smem_u32(cbar);
"""
_SLOT_INIT = """    #pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(cbar0 + 8 * s, 1);
"""


def wide_kernel_source(plan, backend, caps) -> str:
    """The wide form's kernel without stream-K (the plan's checks done by humming.core.families.register_a8.generator)."""
    t = plan.tiles
    lay = plan.layout
    parts = wide_parts(plan, caps)
    pair, slots = parts.cluster, parts.slots  # (the cluster option: a pair of blocks, humming...register_a8.cluster)
    prelude = backend.helpers("wgmma_rs8", parts.request, n=parts.chain, producer=True, weights_by_bulk=True,
                              stagger=bool(t.stagger), cluster=bool(pair), widened=bool(slots),
                              l2_prefetch=bool(t.l2next)) + stsm_prelude(plan, caps, backend)
    if plan.pdl:
        if pair:
            raise ValueError("programmatic dependent launch is written for the wide form without clusters or stream-K")
        prelude += backend.helpers("grid_dependency", caps=caps)
    params = eight_bit_params(
        plan.kernel_name, b_doc="int4 codes in the register-A layout (humming.core.families.register_a8.layout)",
        s_doc="fp32 scales [K/group, N], natural column order", bias_doc="[N] or null",
        tensor_maps=("XMAP", f"activation codes [M, K]: boxes of {t.bm} rows x 128 bytes, 128-byte swizzle"),
        block_threads="cfg::BLOCK_THREADS")
    stagger_take = ""
    if t.stagger:  # a staggered start: the warpgroups' wgmma chains alternate instead of running side by side
        behind = "one wgmma chain" if t.stagger == 1 else f"{t.stagger} wgmma chains"
        stagger_take = (f"  if (wg == 1) consumer_turn_take();  // start {behind} behind warpgroup 0, so that "
                        "each promotes while the other's wgmmas run\n")
    loop, token_wait = producer_loop(parts.scale_copy, bool(plan.pdl), cluster.ACTIVATION_COPY if pair else None)
    if t.l2next:  # after the tile's last stage: the next wave's block's first stages into L2
        if plan.pdl or pair or slots:
            raise ValueError("the next wave's L2 prefetch is written for the plain producer loop of the wide form")
        loop += next_wave_prefetch(t.raster, bool(parts.scale_copy))
    if slots:  # the converter warps widen; the consumers load their fragments
        loop = converters.producer_loop(parts.scale_copy)
        consumer_lane = (HELD_ZERO + "  const uint32_t alane = aw0 + tid * 16 + zero;   // its fragment in a slot: "
                         "16 bytes per k32 step, + ks * THREADS * 16\n")
    else:
        consumer_lane = (parts.luts + "  const uint32_t wlane = w0 + wg * SLAB_BYTES + w * 1024 + lane * 16 + zero;   "
                         "// its words 4 hf + jj: + hf * 512 in a slot\n")
    # (the consumers' first FULL barrier comes after the producer's wait anyway; theirs makes the order of their
    # output stores after the previous kernel explicit)
    consumer_wait = "  pdl_wait();  // the previous kernel has finished before this block writes its output\n" if plan.pdl else ""
    source = _KERNEL.fill(
        kernel_name=plan.kernel_name, summary=plan.summary(), prelude=prelude, cfg_head=parts.cfg_head, params=params,
        block_head=block_head(t.raster, pair=bool(pair)), slot_decl=_SLOT_DECL if slots else "",
        full_count="1 + CONVERTERS / 32" if slots else "1",  # (the producer's copies, and the converter warps')
        slot_init=_SLOT_INIT if slots else "", held_init=held_init(backend), producer_loop=loop, token_wait=token_wait,
        converters=converters.converter_loop(lay) if slots else "", consumer_wait=consumer_wait,
        consumer_lane=consumer_lane, scale_decl=parts.scale_decl, partials=parts.partials, stagger_take=stagger_take,
        main_loop=parts.main_loop, epilogue=epilogue(True, bool(t.stsm), EPILOGUE_SCALES if parts.direct else None),
        copy_out=copy_out("consumer_sync"), **(cluster.BARRIERS if pair else {}))
    return source
