"""CUDA pieces the mma.sync kernels share (the tile, stream and 8-bit kernels, and the register-A forms' weight
decode): the decode of a code pair into activation-typed weights, the pipeline's head, the per-row GS epilogue,
the split-K epilogue, and the helper prelude a kernel asks its backend for."""
from __future__ import annotations

from humming.devices.base import HelperRequest


def _c(v: float) -> str:
    return repr(float(v)) + "f"


def pair_decode(layout, scales: bool, zeros: bool) -> tuple[str, str, str]:
    """The statements that turn one code pair (``v = dq_raw(...)``) into activation-typed weights, shared by
    both kernel shapes: (names of the per-tile scale/zero pairs ``ss``/``zz``, the arithmetic, the
    declaration of a constant zero). ``ss8``/``zz8`` hold eight per-n8-tile values loaded by the caller."""
    dec = layout.decode
    const_zero = dec.kind == "int" and layout.zero_group == 0
    pick = []
    if scales:
        pick.append("const uint32_t ss = (nt & 1) ? dup_hi(ss8[nt >> 1]) : dup_lo(ss8[nt >> 1]);")
    if zeros:
        pick.append("const uint32_t zz = (nt & 1) ? dup_hi(zz8[nt >> 1]) : dup_lo(zz8[nt >> 1]);")
    elif const_zero:
        pick.append("const uint32_t zz = zz_const;")
    math = []
    zero_decl = ""
    if getattr(layout, "zero_float", False):  # (q - z) * s = q * s + (-z * s): exact q, then one fma
        if dec.zero_bias:
            math.append("v = act2_add(v, zm_const);")
            zero_decl = f"  const uint32_t zm_const = f32x2_to_act2({_c(-dec.zero_bias)}, {_c(-dec.zero_bias)});\n"
        math.append("v = act2_fma(v, ss, zz);")
    else:
        if dec.kind == "int":
            math.append("v = act2_add(v, zz);")  # -(magic + zero): exact small integers
        if scales:
            math.append("v = act2_mul(v, ss);")
    if const_zero:
        z = _c(layout.zero_const)
        zero_decl = f"  const uint32_t zz_const = f32x2_to_act2({z}, {z});\n"
    return " ".join(pick), " ".join(math), zero_decl


# Shared by the tile kernels: where this block and warp sit in the GEMM (tile_place), then the head of the stage
# loader (STAGE_LOADER_HEAD); a kernel may put code of its own between the two.
def tile_place(block_m: str = "blockIdx.x", block_n: str = "blockIdx.y") -> str:
    """The tile kernels' placement: the block's tile (``block_m``, ``block_n``: C expressions of its token and
    channel tile), its warp's place, its K range."""
    return f"""\
  using namespace cfg;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int last_block;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp % WARPS_K, wn = (warp / WARPS_K) % WARPS_N, wm = warp / (WARPS_K * WARPS_N);
  const int m0 = {block_m} * BM, n0 = {block_n} * BN;
  const int k_begin = blockIdx.z * k_per_split;
  const int ktiles = k_per_split / BK;
  const int katoms_total = K / 64;
  const uint32_t smem0 = smem_u32(smem);
"""


TILE_PLACE = tile_place()
STAGE_LOADER_HEAD = """
  auto load_stage = [&](int stage, int kt) {
    const uint32_t base = smem0 + stage * STAGE_BYTES;
    const int k0 = k_begin + kt * BK;
"""
TILE_PREAMBLE = TILE_PLACE + STAGE_LOADER_HEAD


def helper_prelude(plan, backend, caps, weight) -> str:
    """The backend's definitions of every helper a kernel for this plan calls."""
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=weight, async_copy=plan.async_copy, caps=caps)
    return backend.prelude(request)


# The multi-stage copy pipeline of the tile kernels: STAGES-1 stages in flight, one consumed per iteration;
# the barrier after the wait also guarantees that the stage about to be refilled was consumed by all warps.
PIPELINE_HEAD = """\
  #pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    copy_commit();
  }

  for (int kt = 0; kt < ktiles; ++kt) {
    copy_wait<STAGES - 2>();
    __syncthreads();
    {
      const int next = kt + STAGES - 1;
      if (next < ktiles) load_stage(next % STAGES, next);
      copy_commit();
    }
    const uint32_t base = smem0 + (kt % STAGES) * STAGE_BYTES;
"""


def gs_epilogue_parts(plan, row: str) -> tuple[str, str, str]:
    """The GS parameter's comment, the epilogue's scale line and the per-row multiply (after ``v = acc * scale``)
    of the WnA16 kernels: GS is a device scalar (activation global scale), or with ``plan.row_scale`` an fp32 vector
    [M] of per-token scales (row ``row``)."""
    if not plan.row_scale:
        return ("// an fp32 device scalar multiplying the output (activation global scale) or null",
                "const float scale = GS ? out_scale * load_f32(GS) : out_scale;", "")
    return ("// fp32 [M]: per-token scales multiplying each output row (widened 8-bit activations)",
            "const float scale = out_scale;  // GS holds one scale per token row (row_scale)",
            f"\n          v *= load_f32(GS + {row});")


def splitk_epilogue(acc: str, row_scale: str | None = None, indexed: bool = False, padded: bool = False) -> str:
    """The shared tail of the tile kernels: fold the warps' K split (shared memory), add split-K partials
    (workspace, last block of a tile, fixed order), then scale, bias and store. ``acc`` names an fp32
    accumulator array [TM][TA*8][4]; ``row_scale`` a per-row fp32 scale pointer (per-token), if any. ``indexed``:
    the MoE form, whose block row r holds slot ``slot_of_row[r]`` (the sentinel ``num_slots``: a padding row): the
    row goes to C row slot (``n_out`` columns), times the slot's router weight where TOPK_W is given. ``padded``: a
    padded weight (Plan.padded): C has cfg::N_OUT columns, the padded ones are not stored."""
    if indexed:
        row = "const int row = (wm * TM + i) * 16 + (lane >> 2) + h * 8, slot = slot_of_row[row];"
        guard, dest = "slot < num_slots && col < n_out", "C + (size_t)slot * n_out + col"
        router = "\n          if (TOPK_W) { const float w = load_f32(TOPK_W + slot); v0 *= w; v1 *= w; }"
        scale_row = "slot / a_div"  # the row of A the slot read: its per-token scale
    else:
        row = "const int row = m0 + (wm * TM + i) * 16 + (lane >> 2) + h * 8;"
        guard, dest, router, scale_row = "row < M", "C + (size_t)row * N + col", "", "row"
        if padded:  # a padded weight: C has the real N_OUT columns (cfg::N_OUT)
            guard, dest = "row < M && col < N_OUT", "C + (size_t)row * N_OUT + col"
    row_mul = (f"\n          if ({row_scale}) {{{{ const float rs = load_f32({row_scale} + {scale_row}); v0 *= rs; v1 *= rs; }}}}"
               if row_scale else "")
    scale = ("const float scale = out_scale;  // GS holds one scale per token row (row_scale)" if row_scale == "GS"
             else "const float scale = GS ? out_scale * load_f32(GS) : out_scale;")
    return f"""  // fold the k-split across warps into the wk == 0 warps (smem is free now)
  if (WARPS_K > 1) {{
    float* red = reinterpret_cast<float*>(smem);
    const int slot = wm * WARPS_N + wn;
    constexpr int PER_WARP = TM * TA * 8 * 4 * 32;
    if (wk > 0) {{
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TA * 8; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e)
            red[((wk - 1) * WARPS_M * WARPS_N + slot) * PER_WARP + ((i * TA * 8 + j) * 4 + e) * 32 + lane] = {acc}[i][j][e];
    }}
    __syncthreads();
    if (wk == 0) {{
      #pragma unroll 1  // cold: one pass per other warp; the body (every accumulator) stays unrolled
      for (int w = 1; w < WARPS_K; ++w)
        #pragma unroll
        for (int i = 0; i < TM; ++i)
          #pragma unroll
          for (int j = 0; j < TA * 8; ++j)
            #pragma unroll
            for (int e = 0; e < 4; ++e)
              {acc}[i][j][e] += red[((w - 1) * WARPS_M * WARPS_N + slot) * PER_WARP + ((i * TA * 8 + j) * 4 + e) * 32 + lane];
    }}
  }}

  // split-K partials: each split's tile in accumulator-register order, 4 registers per 16-byte store,
  // WS[tile][split][warp (wm, wn)][chunk (i, j)][lane] (a warp's store covers 512 contiguous bytes); lane l of a
  // warp reads back only what lane l of the same warp of the other blocks wrote
  const int splits = gridDim.z;
  if (splits > 1) {{
    constexpr int WARP_FLOATS = TM * TA * 8 * 4 * 32, TILE_FLOATS = WARP_FLOATS * WARPS_M * WARPS_N;
    float* tile_ws = WS + (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * splits * TILE_FLOATS
                     + (wm * WARPS_N + wn) * WARP_FLOATS + lane * 4;
    if (wk == 0) {{
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TA * 8; ++j)
          store_f32x4(tile_ws + (size_t)blockIdx.z * TILE_FLOATS + (i * TA * 8 + j) * 128, {acc}[i][j][0], {acc}[i][j][1],
                      {acc}[i][j][2], {acc}[i][j][3]);
    }}
    fence_device();
    __syncthreads();
    if (tid == 0) {{
      int* counter = CNT + blockIdx.y * gridDim.x + blockIdx.x;
      const int ticket = atomic_add_i32(counter, 1);
      last_block = ticket == splits - 1;
      if (last_block) store_i32(counter, 0);  // ready for the next launch
    }}
    __syncthreads();
    if (!last_block) return;
    fence_device();
    if (wk == 0) {{
      // accumulators = the partials of splits 0, 1, ... added in that order (deterministic whichever block is
      // last). The split loop stays rolled (compile time); the loads of one pass do not depend on each
      // other, so they overlap: one L2 round trip per split (a rolled loop per accumulator paid one per add).
      #pragma unroll
      for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TA * 8; ++j)
          #pragma unroll
          for (int e = 0; e < 4; ++e) {acc}[i][j][e] = 0.0f;
      #pragma unroll 1
      for (int z = 0; z < splits; ++z)
        #pragma unroll
        for (int i = 0; i < TM; ++i)
          #pragma unroll
          for (int j = 0; j < TA * 8; ++j) {{
            float r[4];
            load_f32x4_l2(r, tile_ws + (size_t)z * TILE_FLOATS + (i * TA * 8 + j) * 128);
            #pragma unroll
            for (int e = 0; e < 4; ++e) {acc}[i][j][e] += r[e];
          }}
    }}
  }}

  if (wk != 0) return;
  {scale}
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int h = 0; h < 2; ++h) {{
        {row}
        const int col = n0 + (wn * TA + j / 8) * 64 + (j % 8) * 8 + (lane & 3) * 2;
        if ({guard}) {{
          float v0 = {acc}[i][j][2 * h] * scale, v1 = {acc}[i][j][2 * h + 1] * scale;
          if (CS) {{ v0 *= load_f32(CS + col); v1 *= load_f32(CS + col + 1); }}{row_mul}
          if (BIAS) {{ v0 += act_to_f32(load_u16(BIAS + col)); v1 += act_to_f32(load_u16(BIAS + col + 1)); }}{router}
          store_u32({dest}, f32x2_to_act2(v0, v1));
        }}
      }}
"""
