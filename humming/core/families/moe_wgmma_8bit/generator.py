"""The CUDA C++ of the MoE wgmma W8A8 kernel: the lock-step wgmma W8A8 kernel (humming.core.families.wgmma_8bit.
generator: int8 / e4m3 activation codes and weights both K-major in 128-byte-swizzled shared memory, 128 tokens x BN
channels x 128 bytes of K per stage, cp.async stages, two warpgroups of m64nBNk32) with its token rows taken from a
routing (humming.core.moe.routing).

A block takes token tile mb, entries [mb*128, +128) of the routing's sorted slots, all of one expert (EXPERT_IDS[mb];
-1 or past the used length NPAD: nothing to do), and channel tile nb; the 1-D grid is ordered as the MoE tile
kernel's. Block row r is slot s = SORTED[mb*128 + r] (the sentinel num_slots pads an expert's run): its activation
codes are row s / a_div of A [rows, KA] bytes (quantized once per token before the gather; padding rows and columns
past KA zero-filled); its outputs go to row s of C [slots, n_out] as (sum x scales + bias) x the slot's router weight
TOPK_W[s] where given. The scales: per token GS[s / a_div] x per channel CS[n] (or the expert's per-tensor factor ES),
or with 128x128 weight blocks, per stage (one k block) the token's GS[s / a_div][kb] x the block's S[nb][kb]. The
expert's codes, scales, bias and global factor sit at fixed strides. The parameter list is the MoE kernels' (that of
the tile kernel and the routing's), so the MoE runtime launches it as the others."""
from __future__ import annotations

from humming.core.families.moe_register_a.generator import gathered_8bit_stage, gathered_load_stage
from humming.core.families.moe_wna16.generator import EXPERT_OPERANDS, MOE_PARAMS, moe_place, routed_rows
from humming.core.families.wgmma_8bit.generator import W4A8_RAW_B_COPY, W8A8Rows, wgmma_w8a8_kernel_source


def moe_8bit_params(kernel_name: str) -> str:
    """The routed 8-bit kernels' parameter list (the MoE kernels', 8-bit activation codes as A), through the brace."""
    return f"""extern "C" __global__ void __launch_bounds__(cfg::THREADS, 1) {kernel_name}(
    const unsigned char* __restrict__ A,  // activation codes [rows, KA] (row s / a_div of slot s)
    const uint32_t* __restrict__ Bw,      // weight codes [N, K] bytes (K-major) per expert
    const float* __restrict__ S,          // 128x128 weight-block scales [N/128, K/128] per expert, or null
    const uint16_t* __restrict__ Z,       // unused
    const float* __restrict__ CS,         // per-channel weight scales [E, N] or null
    const uint16_t* __restrict__ BIAS,    // [E, N] or null
    uint16_t* __restrict__ C,             // output [slots, n_out]
    float* __restrict__ WS, int* __restrict__ CNT,   // unused (no split-K)
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS{MOE_PARAMS}) {{   // GS: the activations' scales per token [rows] (or [rows, K/128])
"""


# the block's placement, its routed rows and its expert's operands
TILE = (moe_place("BN") + "  const int m0 = mb * BM, n0 = nb * BN;\n" + routed_rows("BM") + EXPERT_OPERANDS
        + "  __syncthreads();")

# a stage: the block rows' activation codes gathered through the routing, then BN rows of the expert's weights
LOAD_STAGE = gathered_8bit_stage(32)
# W4A8 (slots of the A tile and the raw packed weights): the gathered codes, then the raw B copy of the dense kernel
W4A8_LOAD_STAGE = gathered_load_stage(16, rows="BM", base="smem0 + slot * SLOT_BYTES",
                                      weights="    const int k0 = kt * BK;\n" + W4A8_RAW_B_COPY)

# 128x128 weight blocks: the token scales of the thread's block rows br and br + 8 (a padding row reads token 0's)
BLOCK_ROWS = """\
  const int br = warp * 16 + (lane >> 2);
  const float* ts_lo = GS + (size_t)max(a_row[br], 0) * ktiles;
  const float* ts_hi = GS + (size_t)max(a_row[br + 8], 0) * ktiles;
"""


def epilogue(result, block: bool) -> str:
    """Registers -> each row's slot of C: value ``result(i)`` of accumulator register i (acc[4j + 2h + e]: block row
    16 warp + lane/4 + 8h, channel n0 + 8j + 2 (lane % 4) + e) x the row's scale x the channel's + bias, x the router
    weight; padding rows and channels past n_out are not stored."""
    token_scale = "" if block else " * load_f32(GS + s / a_div)"
    return f"""  // the thread's two block rows: their slots, scales (the expert's factor{'' if block else ' x the token scale'})
  // and router weights
  int row_slot[2];
  float rs[2], rw[2];
  #pragma unroll
  for (int h = 0; h < 2; ++h) {{
    const int s = slot_of_row[warp * 16 + (lane >> 2) + 8 * h];
    row_slot[h] = s;
    rs[h] = s < num_slots ? out_scale{token_scale} : 0.0f;
    rw[h] = TOPK_W && s < num_slots ? load_f32(TOPK_W + s) : 1.0f;
  }}
  #pragma unroll
  for (int j = 0; j < BN / 8; ++j) {{
    const int col = n0 + 8 * j + 2 * (lane & 3);
    if (col >= n_out) continue;  // (n_out is a multiple of 16: both columns of the pair are in or out)
    float c0 = 1.0f, c1 = 1.0f, b0 = 0.0f, b1 = 0.0f;
    if (CS) {{ c0 = load_f32(CS + col); c1 = load_f32(CS + col + 1); }}
    if (BIAS) {{
      const uint32_t bb = load_g32(BIAS + col);  // the two 16-bit biases of columns col, col + 1
      b0 = act_to_f32((uint16_t)(bb & 0xFFFFu)); b1 = act_to_f32((uint16_t)(bb >> 16));
    }}
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
      if (row_slot[h] < num_slots) {{
        const float v0 = ({result('4 * j + 2 * h')} * rs[h] * c0 + b0) * rw[h];
        const float v1 = ({result('4 * j + 2 * h + 1')} * rs[h] * c1 + b1) * rw[h];
        store_u32(C + (size_t)row_slot[h] * n_out + col, f32x2_to_act2(v0, v1));
      }}
    }}
  }}
"""


def moe_wgmma_8bit_source(plan, backend, caps=None) -> str:
    w4a8 = getattr(plan.layout, "weight_bits", 8) == 4  # (the W8A8 source hands 4-bit layouts to the W4A8 kernel)
    rows = W8A8Rows(params=moe_8bit_params(plan.kernel_name), tile=TILE,
                    load_stage=W4A8_LOAD_STAGE if w4a8 else LOAD_STAGE, block_rows=BLOCK_ROWS, epilogue=epilogue)
    return wgmma_w8a8_kernel_source(plan, backend, caps, rows=rows)
