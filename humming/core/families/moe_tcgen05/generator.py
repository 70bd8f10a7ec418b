"""The CUDA C++ of the MoE tcgen05 kernel: the tcgen05 WnA16 kernel (humming.core.families.tcgen05.generator) with
its token rows taken from a routing (humming.core.moe.routing). Compiled only, never run on hardware.

A block takes token tile mb, entries [mb*128, +128) of the routing's sorted slots, all of one expert (EXPERT_IDS[mb];
-1 or past the used length NPAD: nothing to do, decided before Tensor Memory is allocated), and channel tile nb; the
1-D grid is ordered as the MoE tile kernel's. Block row r is slot s = SORTED[mb*128 + r] (the sentinel num_slots pads
an expert's run): its activations are row s / a_div of A [rows, KA], copied by cp.async (padding rows and columns
past KA zero-filled); TMEM lane r (warp r / 32) holds its accumulators, stored to row s of C [slots, n_out] times the
slot's router weight TOPK_W[s] where given. The expert's weights (the wgmma WnA16 layout,
humming.core.families.wgmma_dequant.layout), group scales, channel scales, bias and global factor sit at fixed
strides.

The W8A8 form (tcgen05_w8a8_kernel_source's rows) reads 8-bit activation codes (row s / a_div of A, quantized once
per token before the gather) and the expert's weights as stored ([N, K] bytes), and scales row s by its token's scale
GS[s / a_div] (per-channel scales CS, or the expert's per-tensor factor ES)."""
from __future__ import annotations

from humming.core.families.moe_register_a.generator import gathered_8bit_stage
from humming.core.families.moe_wgmma_8bit.generator import moe_8bit_params
from humming.core.families.moe_wna16.generator import EXPERT_OPERANDS, MOE_PARAMS, moe_place, routed_rows
from humming.core.families.tcgen05.generator import (
    TC_CHANNEL_SCALES,
    Tcgen05Rows,
    Tcgen05W8A8Rows,
    tcgen05_w8a8_kernel_source,
    tcgen05_wna16_kernel_source,
    tmem_epilogue,
)

# (the barrier after the TMEM allocation publishes slot_of_row and a_row)
TILE = moe_place("BN") + "  const int m0 = mb * BM, n0 = nb * BN;\n" + routed_rows("BM") + EXPERT_OPERANDS

AFTER_ROW = """
  const int slot = slot_of_row[warp * 32 + lane];   // this thread's row: its slot (num_slots: a padding row)
  const bool live = slot < num_slots;
  const float tw = TOPK_W && live ? load_f32(TOPK_W + slot) : 1.0f;"""

STORE = """    if (live) {
      uint16_t* out = C + (size_t)slot * n_out + col0;
      #pragma unroll
      for (int q = 0; q < 4; ++q)  // 8 channels per store; n_out is a multiple of 16
        if (col0 + 8 * q < n_out)
          store_128(out + 8 * q, packed[4 * q], packed[4 * q + 1], packed[4 * q + 2], packed[4 * q + 3]);
    }
"""

ROWS = Tcgen05Rows(params=MOE_PARAMS, tile=TILE, after_row=AFTER_ROW, weight=" * tw", store=STORE)


def moe_tcgen05_source(plan, backend, caps=None) -> str:
    return tcgen05_wna16_kernel_source(plan, backend, caps, rows=ROWS)


# the W8A8 form: the row's token scale with its slot (the tile's other rows' scales are their own)
W8A8_AFTER_ROW = AFTER_ROW + """
  const float rs = live ? out_scale * load_f32(GS + slot / a_div) : 0.0f;"""


def moe_tcgen05_w8a8_source(plan, backend, caps=None) -> str:
    rows = Tcgen05W8A8Rows(params=moe_8bit_params(plan.kernel_name), tile=TILE, load_stage=gathered_8bit_stage(16),
                           epilogue=tmem_epilogue(W8A8_AFTER_ROW, TC_CHANNEL_SCALES, " * rs * c0", " * rs * c1",
                                                  " * tw", STORE))
    return tcgen05_w8a8_kernel_source(plan, backend, caps, rows=rows)
