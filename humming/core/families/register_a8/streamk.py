"""The wide register-A W4A8 form with stream-K (RegisterA8Tiles.streamk; humming.core.families.register_a8.generator hands it over):
``streamk`` persistent blocks (one per SM) take the 256-token tiles in whole waves, then split the atoms of the tiles
left over evenly (the schedule of humming.core.families.register_a.streamk, shared with the W4A16 form). The producer
thread copies every segment's stages (activations by TMA, the two slabs' codes and the group scales by bulk copy)
without a break, so the next segment's first stages land while the consumers finish the last one. The consumers run
the wide form's stage loop once per segment, then either write the segment's fp32 partial (a split tile; the last of
its blocks adds them in block order) or the tile: a quarter of it (64 tokens) at a time through a staging tile of its
own after the slots (the slots keep loading), 16-byte stores of whole token rows. A second producer warp stages each
segment's token scales in one of two shared buffers (read from global memory in the epilogue they cost a load
latency per pass)."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.kernel_params import eight_bit_params
from humming.core.families.register_a import streamk as streamk
from humming.core.families.register_a8.pieces import DESC0, HELD_DECL, held_init
from humming.core.families.register_a8.planner import OUT_PAD, STREAMK_STAGING_TOKENS, WIDE_BT, WIDE_FITTED_BT
from humming.core.families.register_a8.wide_parts import wide_parts

# the producer thread: every segment's stages into the slots in turn (slot it % STAGES, it = stages copied so far);
# ``scale_copy``: a line break and the copy of the stage's group scales, or nothing (per-channel scales)
_PRODUCER = Template("""  if (warp >= THREADS / 32) {  // ---- the producer warpgroup: its first thread copies every segment's stages in turn
    setmaxnreg_dec<40>();
    if (tid == THREADS) {
      int wave = 0, ga = StreamK(M, N).run_start(blockIdx.y), tile, kt0, ktiles;
      int it = 0;  // stages copied so far
      while (StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles)) {
        int m0, n0;
        StreamK(M, N).origin(tile, m0, n0);
        // the tile's slabs n0 / 64 and n0 / 64 + 1 (katoms stages of SLAB_BYTES each), from atom kt0
        const unsigned char* codes = reinterpret_cast<const unsigned char*>(Bw) + ((size_t)(n0 / 64) * katoms + kt0) * SLAB_BYTES;
        #pragma unroll 1
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const int s = it % STAGES;
          const uint32_t full = xbar0 + 8 * s;
          if (it >= STAGES) mbar_wait(xbar0 + 8 * (STAGES + s), ((it / STAGES) + 1) & 1);  // stage it - STAGES released
          mbar_expect_tx(full, STAGE_TX);
          tma_load_2d(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0, full);
          bulk_copy_g2s(w0 + s * W_BYTES, codes + (size_t)kt * SLAB_BYTES, SLAB_BYTES, full);
          bulk_copy_g2s(w0 + s * W_BYTES + SLAB_BYTES, codes + ((size_t)katoms + kt) * SLAB_BYTES, SLAB_BYTES, full);${scale_copy}
        }
      }
    } else if (warp == THREADS / 32 + 1) {  // the next warp: each segment's token scales (times the device scalar and
      // out_scale) into shared buffer n % 2, off the consumers' critical path; buffer reuse waits for their release
      const float scale = GS ? out_scale * load_f32(GS) : out_scale;
      int wave = 0, ga = StreamK(M, N).run_start(blockIdx.y), tile, kt0, ktiles;
      #pragma unroll 1
      for (int n = 0; StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles); ++n) {
        int m0, n0;
        StreamK(M, N).origin(tile, m0, n0);
        if (n >= 2) mbar_wait(tbar0 + 8 * (2 + (n & 1)), ((n >> 1) + 1) & 1);  // the consumers released use n - 2
        #pragma unroll 1
        for (int i = lane; i < BT; i += 32) {
          const int tok = m0 + i;
          sts_f32(t0 + ((n & 1) * BT + i) * 4, (TS && tok < M) ? scale * load_f32(TS + tok) : scale);
        }
        mbar_arrive(tbar0 + 8 * (n & 1));  // release: the stores above are visible to whoever waits
      }
    }
    return;
  }
  setmaxnreg_inc<232>();  // the consumers take the producer's registers
""")

# the consumers' view of the schedule: segment seg of block b computed from scratch (a block's stream-K run spans at
# most two tiles), so that only the segment number lives across the stage loop (the registers hold the accumulators);
# the block index is read by a volatile move each time (block_y), so the compiler recomputes the segment after the
# stage loop instead of keeping its values live through it
_SEGMENT = """
// segment seg of block b: its tile, first k atom, atoms, and the block's stages before it; false past the last
__device__ __forceinline__ bool streamk_segment(const StreamK& sk, int b, int seg, int& tile, int& kt0, int& ktiles,
                                                int& it0) {
  if (seg < sk.waves) {
    tile = seg * sk.P + b, kt0 = 0, ktiles = sk.katoms, it0 = seg * sk.katoms;
    return true;
  }
  const int end = sk.run_start(b + 1);
  int ga = sk.run_start(b);
  it0 = sk.waves * sk.katoms;
  for (int i = sk.waves; i <= seg; ++i) {
    if (ga >= end) return false;
    const int t = ga / sk.katoms;
    tile = sk.dp_tiles + t, kt0 = ga - t * sk.katoms, ktiles = min(sk.katoms - kt0, end - ga);
    if (i < seg) ga += ktiles, it0 += ktiles;
  }
  return true;
}
"""

# the segment's tile: facc[4j + 2h + e] = channel tab + 8h, token 8j + 2q + e, times its token's scale (from the
# segment's shared buffer, released after the last read). Each warpgroup writes its 64 channels a quarter (QT tokens)
# at a time through a staging tile of its own [token][channel], copied out in 16-byte chunks (warpgroup barriers only)
_EPILOGUE = """    float cs[2], bs[2];   // the thread's two channels' weight scale and bias
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      cs[h] = CS ? load_f32(CS + n0 + tab + 8 * h) : 1.0f;
      bs[h] = BIAS ? act_to_f32(load_u16(BIAS + n0 + tab + 8 * h)) : 0.0f;
    }
    const uint32_t stg = stg0 + wg * QT * WG_LD * 2;   // this warpgroup's staging tile
    const uint32_t tsb = t0 + (seg & 1) * BT * 4;      // this segment's token scales (the producer's next warp)
    mbar_wait(tbar0 + 8 * (seg & 1), (seg >> 1) & 1);
    #pragma unroll
    for (int c = 0; c < BT / QT; ++c) {
      float ts[QT / 4];     // the scales of the thread's tokens QT c + 8 (i / 2) + 2 q + i % 2
      #pragma unroll
      for (int i = 0; i < QT / 4; ++i) ts[i] = lds_f32(tsb + (QT * c + 8 * (i >> 1) + 2 * q + (i & 1)) * 4);
      if (c == BT / QT - 1) release_token_scales(seg);
      #pragma unroll
      for (int jj = 0; jj < QT / 8; ++jj) {
        const int j = QT / 8 * c + jj;
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t v = f32x2_to_act2(facc[4 * j + 2 * h] * ts[2 * jj] * cs[h] + bs[h],
                                           facc[4 * j + 2 * h + 1] * ts[2 * jj + 1] * cs[h] + bs[h]);
          const uint32_t o = stg + ((8 * jj + 2 * q) * WG_LD + 16 * w + 8 * h + g) * 2;   // tokens 8jj + 2q, + 1
          sts_u16(o, (uint16_t)(v & 0xFFFFu));
          sts_u16(o + WG_LD * 2, (uint16_t)(v >> 16));
        }
      }
      warpgroup_sync(wg);
      // copy-out: 16-byte chunk cc = (tid % 128) + 128 i is token row cc / 8 of the quarter, channels 8 (cc % 8) .. +7
      #pragma unroll
      for (int i = 0; i < QT * 8 / 128; ++i) {
        const int cc = (tid & 127) + 128 * i, row = cc >> 3, ch = cc & 7, tok = m0 + QT * c + row;
        if (tok < M) {
          uint32_t r[4];
          lds_128(r, stg + (row * WG_LD + ch * 8) * 2);
          store_g128(C + (size_t)tok * N + n0 + 64 * wg + ch * 8, r);
        }
      }
      warpgroup_sync(wg);  // the staging tile is free again
    }
"""


# a segment that leaves its split tile to another block: its token-scale buffer use ends here
_LEAVE = """{
      mbar_wait(tbar0 + 8 * (seg & 1), (seg >> 1) & 1);  // (the buffer's phases count every segment)
      release_token_scales(seg);
      continue;
    }"""


_KERNEL = Template("""// ===== humming generated kernel: ${kernel_name}
// ${summary}
${prelude}

namespace cfg {
${cfg_head}
constexpr int QT = ${qt};                // tokens per pass of the epilogue's staging tiles
constexpr int WG_LD = BC / 2 + ${out_pad};          // a warpgroup's staging pitch (16-bit values): 64 channels and padding
static_assert(W_BYTES == 2 * SLAB_BYTES, "two slabs per block");
static_assert(X_BYTES % 1024 == 0, "1024-byte aligned activation tiles");
static_assert(WG_ACC_REGS == WT / 2, "m64nWT accumulators: WT/2 registers per thread");
static_assert(QT * 8 % 128 == 0 && BT % QT == 0, "whole copy-out passes");
}
${schedule}${segment}
${params}  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, w = warp & 3;
  const int g = lane >> 2, q = lane & 3;
  constexpr int katoms = StreamK::katoms;   // K over BK for the plan's K
  const uint32_t x0 = (smem_u32(smem) + 1023u) & ~1023u;   // STAGES activation slots
  const uint32_t w0 = x0 + STAGES * X_BYTES, s0 = w0 + STAGES * W_BYTES;   // code slots, scale slots
  const uint32_t stg0 = s0 + STAGES * S_BYTES;                     // the warpgroups' staging tiles (QT token rows each)
  const uint32_t t0 = stg0 + 2 * QT * WG_LD * 2;                   // two buffers of BT token scales (fp32)

  __shared__ __align__(8) uint64_t xbar[2 * STAGES];  // FULL[STAGES], then EMPTY[STAGES]
  __shared__ __align__(8) uint64_t tbar[4];           // token-scale buffers: FULL[2], then EMPTY[2]
${held_decl}  const uint32_t xbar0 = smem_u32(xbar), tbar0 = smem_u32(tbar);
  if (tid == 0) {
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(xbar0 + 8 * s, 1);
      mbar_init(xbar0 + 8 * (STAGES + s), THREADS / 32);
    }
    #pragma unroll
    for (int b = 0; b < 2; ++b) {
      mbar_init(tbar0 + 8 * b, 32);
      mbar_init(tbar0 + 8 * (2 + b), THREADS / 32);
    }
${held_init}    mbar_init_fence();
  }
  __syncthreads();
  // a consumer warp is done with segment seg's token scales (also a segment that leaves its split tile to others)
  auto release_token_scales = [&](int seg) {
    __syncwarp();
    if (lane == 0) mbar_arrive(tbar0 + 8 * (2 + (seg & 1)));
  };
${producer}
  const int tab = 64 * wg + 16 * w + g;                       // this lane's channels in the tile: tab and tab + 8
${luts}  const uint32_t wlane = w0 + wg * SLAB_BYTES + w * 1024 + lane * 16 + zero;   // its words 4 hf + jj: + hf * 512 in a slot
  const uint32_t slane = s0 + tab * 4 + zero;                 // its group scales in a slot: tab, then tab + 8 at + 32
${desc0}  float facc[BT / 2];     // [chain][WT / 8][2][2]: facc[4j + 2h + e] = channel tab + 8h, token 8j + 2q + e
${partials}${stagger_take}
  #pragma unroll 1
  for (int seg = 0; ; ++seg) {  // this block's segments
    int it0, ktiles;  // the block's stages before this segment, the segment's atoms
${channel_decl}    {
      int tile, kt0;
      if (!streamk_segment(StreamK(M, N), block_y(), seg, tile, kt0, ktiles, it0)) break;
${channel_scales}    }
    #pragma unroll
    for (int i = 0; i < BT / 2; ++i) facc[i] = 0.0f;
  ${main_loop}
    int tile, kt0, m0, n0;  // the segment again (not kept live through the stage loop)
    streamk_segment(StreamK(M, N), block_y(), seg, tile, kt0, ktiles, it0);
    StreamK(M, N).origin(tile, m0, n0);
    const int ga = tile < StreamK(M, N).dp_tiles ? 0  // (split tiles: the atom after the segment)
        : (tile - StreamK(M, N).dp_tiles) * katoms + kt0 + ktiles;
  ${splitk}
${epilogue}
  }
}
""", qt=str(STREAMK_STAGING_TOKENS), out_pad=str(OUT_PAD), segment=_SEGMENT, held_decl=HELD_DECL, desc0=DESC0,
                   epilogue=_EPILOGUE.rstrip())


def wgmma_rs8_streamk_source(plan, backend, caps) -> str:
    """The stream-K kernel of the wide form (its stage loop from humming.core.families.register_a8.wide_parts, each
    segment's stage kt the block's stage it0 + kt)."""
    t = plan.tiles
    if not (t.bm in (WIDE_BT, WIDE_FITTED_BT) or t.wide) or t.bulk != 2:
        raise ValueError("stream-K is written for the wide register-A W4A8 form (256 tokens or 192 / 128 fitted to M, "
                         "producer warpgroup)")
    if plan.pdl:
        raise ValueError("programmatic dependent launch is written for the wide form without clusters or stream-K")
    parts = wide_parts(plan, caps)
    prelude = backend.helpers("wgmma_rs8", parts.request, n=parts.chain, producer=True, weights_by_bulk=True,
                              stagger=bool(t.stagger), streamk=True)
    scale_copy = ("\n          bulk_copy_g2s(s0 + s * S_BYTES, S + (size_t)(kt0 + kt) * N + n0, S_BYTES, full);  "
                  "// group kt0 + kt's scales" if not parts.per_channel else "")
    channel_decl, channel_scales = ("", "")
    if parts.per_channel:
        channel_decl = "    float s_lo, s_hi;  // per-channel scales of this lane's two channels of the tile\n"
        channel_scales = ("      int m0, n0;\n      StreamK(M, N).origin(tile, m0, n0);\n"
                          "      s_lo = load_f32(S + n0 + tab), s_hi = load_f32(S + n0 + tab + 8);\n")
    # (every block has a segment: the planner launches no more blocks than k atoms where the tiles are fewer)
    behind = "one wgmma chain" if t.stagger == 1 else f"{t.stagger} wgmma chains"
    stagger_take = (f"  if (wg == 1) consumer_turn_take();  // start {behind} behind warpgroup 0 (which gives the "
                    "turn at the block's\n                                      // first stage), so that each promotes "
                    "while the other's wgmmas run\n" if t.stagger else "")
    params = eight_bit_params(
        plan.kernel_name, b_doc="int4 codes in the register-A layout (humming.core.families.register_a8.layout)",
        s_doc="fp32 scales [K/group, N], natural column order", bias_doc="[N] or null",
        tensor_maps=("XMAP", f"activation codes [M, K]: boxes of {t.bm} rows x 128 bytes, 128-byte swizzle"),
        block_threads="cfg::BLOCK_THREADS", ws_doc="stream-K partials and tile counters")
    return _KERNEL.fill(
        kernel_name=plan.kernel_name, summary=plan.summary(), prelude=prelude, cfg_head=parts.cfg_head,
        schedule=streamk.helpers(t.raster, t.streamk, plan.k, t.bk), params=params, held_init=held_init(backend),
        producer=_PRODUCER.fill(scale_copy=scale_copy), luts=parts.luts, partials=parts.partials,
        stagger_take=stagger_take, channel_decl=channel_decl, channel_scales=channel_scales,
        main_loop=parts.main_loop.rstrip(), splitk=streamk.splitk("facc", "(BT / 2)", _LEAVE).rstrip())
