"""The CUDA C++ of the MoE register-A kernel: the two-warpgroup register-A wgmma WnA16 kernel
(humming.core.families.register_a.generator; int4 weights decoded in registers as wgmma's A, activations the B
operand in swizzled shared memory) with its token rows taken from a routing (humming.core.moe.routing).

A block takes token tile mb, entries [mb*BT, +BT) of the routing's sorted slots, all of one expert (EXPERT_IDS[mb];
-1 or past the used length NPAD: nothing to do), and channel tile nb (128 channels); the 1-D grid is ordered as the
MoE tile kernel's (groups of ``raster`` token tiles take every channel tile in turn). Block row r is slot
s = SORTED[mb*BT + r] (the sentinel num_slots pads an expert's run): its activations are row s / a_div of A (a_div =
top_k when A is the tokens [T, KA], 1 when A holds one row per slot), copied by cp.async (columns past the real K,
KA, and padding rows zero-filled); its outputs go to row s of C [slots, n_out], times the slot's router weight
TOPK_W[s] where given. The expert's weights, tables, bias and global factor sit at fixed strides: the weights are the
MoE tile kernel's (humming.core.families.moe_wna16.layout), so both kernels run one prepared copy."""
from __future__ import annotations

from humming.core.families.moe_register_a.planner import PATH
from humming.core.families.moe_wna16.generator import EXPERT_OPERANDS, MOE_PARAMS, moe_place, routed_rows
from humming.core.families.register_a.generator import wgmma_rs_kernel_source
from humming.core.families.register_a.kernel import ragged_n
from humming.core.families.register_a.token_rows import TokenRows


def tile(ragged: bool) -> str:
    """The block's token and channel tile, its expert and routed rows (``ragged``: N an odd number of 64-channel
    slabs, the last channel tile half past it)."""
    return (moe_place("BC", ragged) + "  const int m0 = mb * BT, n0 = nb * BC;\n" + routed_rows("BT") + EXPERT_OPERANDS
            + "  __syncthreads();")

# the rows of A in registers, BT / 32 per thread, read once from shared memory (255 registers and no spills at 256
# tokens with the ring of 5; a_row computed in registers spilled there)
def gathered_load_stage(chunk: int, rows: str = "BT", base: str = "x0 + slot * X_BYTES", weights: str = "",
                        setup: str = "", per_pass: int = 32) -> str:
    """The ``load_stage(slot, kt)`` lambda of the routed kernels: 16-byte chunks of ``chunk`` elements of A (8 16-bit
    values; 16 8-bit codes) of the ``rows`` block rows gathered through a_row, into the swizzled tile at ``base``, by
    8 x ``per_pass`` threads; ``weights``: statements copying the stage's weights after them (``setup``: what they
    need, before the lambda)."""
    r = per_pass
    return f"""  // activations: thread tid copies chunk tid % 8 of block rows tid / 8 + {r} i ((row mod 8) is the same for every i),
  // gathered: block row r is row a_row[r] of A; padding rows and columns past KA zero-filled
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  int my_rows[{rows} / {r}];  // the row of A of each of this thread's block rows (-1: a padding row)
  #pragma unroll
  for (int i = 0; i < {rows} / {r}; ++i) my_rows[i] = a_row[lrow + {r} * i];
{setup}  auto load_stage = [&](int slot, int kt) {{
    const uint32_t base = {base};
    const int col = kt * BK + lch * {chunk};
    #pragma unroll
    for (int i = 0; i < {rows} / {r}; ++i) {{
      const bool ok = my_rows[i] >= 0 && col < KA;  // (the source stays a valid address)
      copy_16_async(base + lswz + i * {r} * 128, ok ? A + (size_t)my_rows[i] * KA + col : A, ok);
    }}
{weights + chr(10) if weights else ""}  }};
"""


def gathered_8bit_stage(per_pass: int) -> str:
    """``load_stage(slot, kt)`` of the routed 8-bit kernels (stage = A tile of BM rows, then B tile of BN rows, both
    128-byte swizzled): the block rows' activation codes gathered through a_row, then BN rows of the block's expert's
    K-major weights (B already at the expert), by 8 x ``per_pass`` threads."""
    r = per_pass
    return gathered_load_stage(16, rows="BM", base="smem0 + slot * STAGE_BYTES", per_pass=r, weights=f"""\
    const uint32_t b_tile = base + A_BYTES + lswz;
    #pragma unroll
    for (int i = 0; i < BN / {r}; ++i)
      copy_16_async(b_tile + i * {r} * 128, b_src + ((size_t){r} * i * K + kt * BK), true);""",
                               setup="  const unsigned char* b_src = B + (size_t)(n0 + lrow) * K + lch * 16;\n")


LOAD_STAGE = gathered_load_stage(8)


# the value pair of tokens 8j + 2q, +1 (block rows): (acc x scale x channel scale [x per-token scale] + bias) x
# router weight, as the MoE tile kernel computes it; padding rows get 0 (never stored)
_ROW_PAIR = """
      const int t0 = 8 * j + 2 * q, s0 = slot_of_row[t0], s1 = slot_of_row[t0 + 1];
      const bool in0 = s0 < num_slots, in1 = s1 < num_slots;{row_scales}
      const float w0 = TOPK_W && in0 ? load_f32(TOPK_W + s0) : 1.0f, w1 = TOPK_W && in1 ? load_f32(TOPK_W + s1) : 1.0f;
      const uint32_t v = f32x2_to_act2((acc[4 * j + 2 * h] * cs{rs0} + bs) * w0, (acc[4 * j + 2 * h + 1] * cs{rs1} + bs) * w1);"""
_ROW_SCALES = """
      const float rs0 = in0 ? load_f32(GS + s0 / a_div) : 0.0f, rs1 = in1 ? load_f32(GS + s1 / a_div) : 0.0f;"""

COPY_OUT = """  __syncthreads();
  // copy-out: 16-byte chunk c = tid + 256 i is block row c / 16, channels 8 (c % 16) .. +7, stored to row
  // slot_of_row[row] of C (padding rows and channels past n_out are not)
  #pragma unroll
  for (int i = 0; i < BT * (BC / 8) / THREADS; ++i) {
    const int c = tid + THREADS * i, row = c >> 4, ch = c & 15;
    const int dst = slot_of_row[row];
    if (dst < num_slots && n0 + ch * 8 < n_out) {
      uint32_t r[4];
      lds_128(r, x0 + (row * OUT_LD + ch * 8) * 2);
      store_g128(C + (size_t)dst * n_out + n0 + ch * 8, r);
    }
  }
}
"""


def token_rows(row_scale: bool, ragged: bool = False) -> TokenRows:
    """The routed rows; ``row_scale``: GS holds a scale per token (quantized activations), read for slot s at s /
    a_div; ``ragged``: the last channel tile half past N."""
    pair = _ROW_PAIR.format(row_scales=_ROW_SCALES if row_scale else "", rs0=" * rs0" if row_scale else "",
                            rs1=" * rs1" if row_scale else "")
    return TokenRows(params=MOE_PARAMS, tile=tile(ragged), load_stage=LOAD_STAGE, row_pair=pair, copy_out=COPY_OUT)


def moe_register_a_source(plan, backend, caps=None) -> str:
    return wgmma_rs_kernel_source(plan, backend, caps, rows=token_rows(plan.row_scale, ragged_n(plan)), path=PATH)
