"""The CUDA C++ of the MoE register-A W4A8 kernel: the narrow register-A wgmma W4A8 kernel
(humming.core.families.register_a8.narrow: int4 weights widened in registers to s8 / e4m3 as wgmma's A, 8-bit
activation codes the B operand in swizzled shared memory, 128 tokens x 128 channels, cp.async stages) with its token
rows taken from a routing (humming.core.moe.routing).

A block takes token tile mb, entries [mb*128, +128) of the routing's sorted slots, all of one expert (EXPERT_IDS[mb];
-1 or past the used length NPAD: nothing to do), and channel tile nb; the 1-D grid is ordered as the MoE tile
kernel's. Block row r is slot s = SORTED[mb*128 + r] (the sentinel num_slots pads an expert's run): its activation
codes are row s / a_div of A [rows, KA] bytes (quantized once per token before the gather), copied by cp.async
(padding rows and columns past KA zero-filled); its outputs go to row s of C [slots, n_out] as (sum x token scale
GS[s / a_div] x out_scale + bias) x the slot's router weight TOPK_W[s] where given. The expert's codes, fp32 scales,
bias and global factor sit at fixed strides. The parameter list is the MoE kernels' (that of the tile kernel and the
routing's), so the MoE runtime launches it as the others."""
from __future__ import annotations

from humming.core.families.moe_register_a.generator import COPY_OUT, gathered_load_stage
from humming.core.families.moe_wna16.generator import MOE_PARAMS, moe_place, routed_rows
from humming.core.families.register_a8.narrow import Rs8Rows, narrow_kernel_source


def _params(kernel_name: str) -> str:
    return f"""extern "C" __global__ void __launch_bounds__(cfg::THREADS, 1) {kernel_name}(
    const unsigned char* __restrict__ A,  // activation codes [rows, KA] (row s / a_div of slot s)
    const uint32_t* __restrict__ Bw,      // int4 codes in the register-A layout (humming.core.families.register_a8.layout), per expert
    const float* __restrict__ S,          // fp32 scales [K/group, N] per expert, natural column order
    const uint16_t* __restrict__ Z,       // unused
    const float* __restrict__ CS,         // unused (per-channel scales are S's one row)
    const uint16_t* __restrict__ BIAS,    // [E, N] or null
    uint16_t* __restrict__ C,             // output [slots, n_out]
    float* __restrict__ WS, int* __restrict__ CNT,   // unused (no split-K)
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS{MOE_PARAMS}) {{   // GS: the activations' per-token scales
"""


# the block's placement, its routed rows and its expert's operands
TILE = (moe_place("BC") + "  const int m0 = mb * BT, n0 = nb * BC;\n" + routed_rows("BT") + """\
  Bw += (size_t)expert * b_stride;
  S += (size_t)expert * s_stride;
  if (BIAS) BIAS += (size_t)expert * N;
  out_scale *= ES[expert];
  __syncthreads();""")

# the activation codes of a stage, gathered through the routing: 16 codes a chunk
LOAD_CODE = gathered_load_stage(16)

# facc[4j + 2h + e] = channel 64 wg + 16 w + 8 h + g, block row 8 j + 2 q + e -> staging [row][channel]
EPILOGUE = """  // facc[4j + 2h + e] = channel 64 wg + 16 w + 8 h + g, block row 8 j + 2 q + e -> staging [row][channel]:
  // (sum x the token's scale x out_scale + bias) x the slot's router weight; padding rows 0 (never stored)
  float bs[2];   // the thread's two channels' bias
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = wg * 64 + w * 16 + 8 * h + g;
    bs[h] = BIAS ? act_to_f32(load_u16(BIAS + n0 + ch)) : 0.0f;
  }
  #pragma unroll
  for (int j = 0; j < BT / 8; ++j) {
    const int r0 = 8 * j + 2 * q, s0 = slot_of_row[r0], s1 = slot_of_row[r0 + 1];
    const bool in0 = s0 < num_slots, in1 = s1 < num_slots;
    const float t0 = in0 ? out_scale * (GS ? load_f32(GS + s0 / a_div) : 1.0f) : 0.0f;
    const float t1 = in1 ? out_scale * (GS ? load_f32(GS + s1 / a_div) : 1.0f) : 0.0f;
    const float w0 = TOPK_W && in0 ? load_f32(TOPK_W + s0) : 1.0f, w1 = TOPK_W && in1 ? load_f32(TOPK_W + s1) : 1.0f;
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ch = wg * 64 + w * 16 + 8 * h + g;
      const uint32_t v = f32x2_to_act2((facc[4 * j + 2 * h] * t0 + bs[h]) * w0,
                                       (facc[4 * j + 2 * h + 1] * t1 + bs[h]) * w1);
      const uint32_t o = x0 + (r0 * OUT_LD + ch) * 2;   // block rows r0 and r0 + 1
      sts_u16(o, (uint16_t)(v & 0xFFFFu));
      sts_u16(o + OUT_LD * 2, (uint16_t)(v >> 16));
    }
  }
"""


def moe_register_a8_source(plan, backend, caps=None) -> str:
    rows = Rs8Rows(params=_params(plan.kernel_name), tile=TILE, load_code=LOAD_CODE, epilogue=EPILOGUE,
                   copy_out=COPY_OUT)
    return narrow_kernel_source(plan, backend, caps, rows=rows)
