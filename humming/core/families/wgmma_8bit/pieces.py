"""CUDA pieces the wgmma 8-bit kernels share: the fp32 epilogue of a warpgroup's accumulators, and the W4A8 kernels'
widening of 4-bit codes and group loop."""
from __future__ import annotations

from humming.devices.base import HelperRequest

_ROW_SCALE = "(TS && row0 + 8 * h < M) ? scale * load_f32(TS + row0 + 8 * h) : scale"


def _facc(i: str) -> str:
    return f"facc[{i}]"


def wgmma_epilogue(warp: str, result=_facc, row_scale: str = _ROW_SCALE, volatile_note: bool = False) -> str:
    """The register epilogue of an m64nBN accumulator fragment (warp ``warp`` of its warpgroup holds tile rows 16 warp
    .. +15): value ``result(i)`` of register i x row scale ``rs[h] = row_scale`` x CS[n] + bias, stored as f16/bf16
    pairs; ends with the column loop's closing brace."""
    note = ("    // (volatile loads, so the compiler keeps them next to their use instead of hoisting all BN/8 of them)\n"
            if volatile_note else "")
    return f"""  const float scale = GS ? out_scale * load_f32(GS) : out_scale;
  const int row0 = m0 + {warp} * 16 + (lane >> 2);
  float rs[2];
  #pragma unroll
  for (int h = 0; h < 2; ++h) rs[h] = {row_scale};
  #pragma unroll
  for (int j = 0; j < BN / 8; ++j) {{
    const int col = n0 + 8 * j + 2 * (lane & 3);
{note}    float c0 = 1.0f, c1 = 1.0f, b0 = 0.0f, b1 = 0.0f;
    if (CS) {{ c0 = u32_as_f32(load_g32(CS + col)); c1 = u32_as_f32(load_g32(CS + col + 1)); }}
    if (BIAS) {{
      const uint32_t bb = load_g32(BIAS + col);  // the two 16-bit biases of columns col, col + 1
      b0 = act_to_f32((uint16_t)(bb & 0xFFFFu)); b1 = act_to_f32((uint16_t)(bb >> 16));
    }}
    #pragma unroll
    for (int h = 0; h < 2; ++h) {{
      const int row = row0 + 8 * h;
      if (row < M) {{
        const float v0 = {result('4 * j + 2 * h')} * rs[h] * c0 + b0;
        const float v1 = {result('4 * j + 2 * h + 1')} * rs[h] * c1 + b1;
        store_u32(C + (size_t)row * N + col, f32x2_to_act2(v0, v1));
      }}
    }}
  }}
"""


# (weight format, operand type) -> how one 32-bit word of 8 packed codes becomes two words of 4 widened codes
# (k order); the packing of the word depends on the operand type (``humming.core.families.wgmma_8bit.layout.pack_int4_kmajor``)
_W4A8_WIDEN = {
    ("int4", "s8"): ("s8x16_lo(WORD)", "s8x16_hi(WORD)"),
    ("int4", "e4m3"): ("int4n4_to_e4m3x4(WORD)", "int4n4_to_e4m3x4(WORD >> 16)"),
    ("e2m1", "e4m3"): ("e2m1n4_to_e4m3x4(WORD)", "e2m1n4_to_e4m3x4(WORD >> 16)"),
}


# ---- CUDA text shared by the two W4A8 kernels (lock-step in generator.py, warp-specialised in generator_ws.py)
W4A8_PARAM_DOCS = dict(b_doc="packed 4-bit weights [N, K/2] bytes, row-major (K-major)",
                       s_doc="fp32 group scales [K/GROUP, N], columns in accumulator order",
                       bias_doc="[N] or null (4-byte aligned)")


W4A8_ACC_DECL = """  wg_acc_t acc[WG_ACC_REGS];
  float facc[WG_ACC_REGS];  // fp32 sums of the group partials times their scales
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) { acc[i] = 0; facc[i] = 0.0f; }
  // this thread's accumulator columns 8j + 2*(lane%4) + e are the table's columns n0 + (lane%4)*32 + 2j + e
  const float* s_col = S + n0 + (lane & 3) * (BN / 4);
"""


def w4a8_group_steps(plan, caps):
    """(group, k32 steps per wgmma group, helper request) of a W4A8 plan; ValueError for a group the kernels do
    not take."""
    group = plan.layout.group
    if not (group in (32, 64) or group % 128 == 0):
        raise ValueError(f"wgmma W4A8: group {group} must be 32, 64 or a multiple of 128")
    gsteps = min(group, 128) // 32  # k32 steps per wgmma group (one promotion each)
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=None, async_copy=True, caps=caps)
    return group, gsteps, request


def w4a8_widen(lay, indent: str) -> str:
    """Statements widening the four raw words q[0..3] (32 codes) into the eight words o[0..7]."""
    lo, hi = _W4A8_WIDEN[(lay.weight_format, lay.a_type)]
    return "\n".join(
        f"{indent}o[{2 * w}] = {lo.replace('WORD', f'q[{w}]')}; o[{2 * w + 1}] = {hi.replace('WORD', f'q[{w}]')};"
        for w in range(4))


def w4a8_group_loop(gsteps: int, a_type: str, under_wgmma: str = "", after_wait: str = "") -> str:
    """The loop over a stage's wgmma groups: issue the group's k32 wgmmas, load its scales, ``under_wgmma`` (CUDA run
    while the tensor core works), wait, ``after_wait``, add the partial times the scales into the fp32 sums."""
    # s8: a partial of <= 128 k is below 128 * 128 * (16 * 8) = 2^21 in magnitude, so the integer-to-float
    # conversion is one integer add and one float subtraction instead of the conversion unit
    to_f32 = "small_s32_to_f32" if a_type == "s8" else "wg_acc_to_f32"
    return f"""    #pragma unroll {1 if gsteps < 4 else 4}
    for (int gi = 0; gi < BK / 32 / GSTEPS; ++gi) {{  // groups of 32 / 64: one loop (registers)
      wgmma_fence_operand(acc);
      wgmma_fence();
      #pragma unroll
      for (int s = 0; s < GSTEPS; ++s)  // k32 steps: +32 bytes inside the swizzled rows = +2 in the address field
        wgmma_k32(acc, desc_a + 2 * (gi * GSTEPS + s), desc_b + 2 * (gi * GSTEPS + s), s > 0);
      wgmma_commit();
      uint32_t s4[BN / 16][4];  // this group's scales of the thread's 32 columns (loaded while the wgmma runs)
      const float* srow = s_col + (size_t)((kt * BK + gi * GSTEPS * 32) / GROUP) * N;
      #pragma unroll
      for (int v = 0; v < BN / 16; ++v) load_g128_cached(s4[v], srow + 4 * v);
{under_wgmma}      wgmma_wait<0>();
      wgmma_fence_operand(acc);
{after_wait}      #pragma unroll
      for (int j = 0; j < BN / 8; ++j)
        #pragma unroll
        for (int h = 0; h < 2; ++h)
          #pragma unroll
          for (int e = 0; e < 2; ++e)
            facc[4 * j + 2 * h + e] += {to_f32}(acc[4 * j + 2 * h + e]) * u32_as_f32(s4[j / 2][(j % 2) * 2 + e]);
    }}
"""
