"""Generates the CUDA C++ of a WnA16 mma-family kernel from a Plan.

The kernel body below is written only in terms of named helpers (mma_k16, ldmatrix_x4,
copy_16_async, dq_raw, act2_add, ...); the device backend supplies their definitions.

Work split. Block (x, y, z) computes rows [x*BM, +BM) and columns [y*BN, +BN) of C over the K
range of split z. Warp (wm, wn, wk) owns a (TM*16) x (TA*64) sub-tile and every WARPS_K-th
64-wide k atom of each stage; warps with wk > 0 fold their sums into wk == 0 at the end.
Split-K partials go to a fp32 workspace; the last block of a tile (found with a self-resetting
counter) adds them in a fixed order, so results are deterministic.
"""
from __future__ import annotations

from humming.core.common.layout import pair_index_c
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


def row_scale_refusal(plan) -> str:
    """Why the plan's kernel cannot take per-token scales in GS (``Plan.row_scale``); "" when it can: the WnA16
    stream, tile and register-A wgmma kernels can."""
    if plan.is_8bit or getattr(plan.instruction, "scale_format", None):
        return "the 8-bit and block-scaled kernels take their activation scales as such"
    if plan.family == "mma_sync" or plan.path == "wgmma-rs":
        return ""
    return f"the {plan.family} {plan.path} kernel has no per-token output scale"


def kernel_source(plan, backend, caps=None) -> str:
    if plan.row_scale and row_scale_refusal(plan):
        raise ValueError(f"row_scale: {row_scale_refusal(plan)}")
    if plan.family == "wgmma" and plan.path == "wgmma-rs":  # weights as register A
        from humming.core.families.register_a.generator import wgmma_rs_kernel_source

        return wgmma_rs_kernel_source(plan, backend, caps)
    if plan.family == "wgmma" and plan.path == "wgmma-rs8":  # W4A8, register A
        from humming.core.families.register_a8.generator import wgmma_rs8_kernel_source

        return wgmma_rs8_kernel_source(plan, backend, caps)
    if plan.family == "wgmma" and plan.path == "wgmma-dequant-smem":
        from humming.core.families.wgmma_dequant.generator import wgmma_wna16_kernel_source

        return wgmma_wna16_kernel_source(plan, backend, caps)
    if plan.family == "tcgen05":  # compiled for Blackwell datacenter targets, never run (HUMMING_UNVERIFIED_KERNELS=1)
        from humming.core.families.tcgen05.generator import tcgen05_kernel_source

        return tcgen05_kernel_source(plan, backend, caps)
    if plan.family == "wgmma":
        from humming.core.families.wgmma_8bit.generator import wgmma_w8a8_kernel_source

        return wgmma_w8a8_kernel_source(plan, backend, caps)
    if plan.family == "mma_sync" and getattr(plan.instruction, "scale_format", None):  # block-scaled (sm_120a)
        from humming.core.families.mma_blockscaled.generator import blockscaled_kernel_source

        return blockscaled_kernel_source(plan, backend, caps)
    if plan.is_8bit:
        from humming.core.families.mma_8bit.generator import w8a8_kernel_source

        return w8a8_kernel_source(plan, backend, caps)
    if plan.path == "stream":
        from humming.core.families.mma_wna16.stream import stream_kernel_source

        return stream_kernel_source(plan, backend, caps)
    t = plan.tiles
    lay = plan.layout
    dec = lay.decode
    cb = dec.container
    ppw = 16 // cb
    prelude = helper_prelude(plan, backend, caps, dec)

    s_group = lay.scale_group
    z_group = lay.zero_group
    s_rows = 0 if not s_group else max(1, t.bk // s_group)
    z_rows = 0 if z_group == 0 else (1 if z_group < 0 else max(1, t.bk // z_group))

    def row_expr(group: int, rows: int, what: str) -> str:
        # global row of a scale/zero table for local row r of stage starting at k0
        if group < 0:
            return "0"
        return f"(k0 / {group} + r)" if rows > 1 else f"(k0 / {group})"

    def local_row(group: int) -> str:
        if group < 0 or group >= t.bk:
            return "0"
        return f"(kk / {group})"

    pick, decode_body, zero_const_bits = pair_decode(lay, bool(s_rows), bool(z_rows))
    load_words, word = _tile_weight_words(cb, lay.tile_major)

    src = f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BM = {t.bm}, BN = {t.bn}, BK = {t.bk}, STAGES = {t.stages};
constexpr int WARPS_M = {t.warps_m}, WARPS_N = {t.warps_n}, WARPS_K = {t.warps_k};
constexpr int TM = BM / (16 * WARPS_M);        // m16 tiles per warp
constexpr int TA = BN / (64 * WARPS_N);        // n64 atoms per warp
constexpr int THREADS = 32 * WARPS_M * WARPS_N * WARPS_K;
constexpr int CB = {cb};                         // container bits per code
constexpr int ATOM_WORDS = 128 * CB;             // 32-bit words per 64x64 weight atom
constexpr int KATOMS = BK / 64, NATOMS = BN / 64;
constexpr int S_ROWS = {s_rows}, Z_ROWS = {z_rows};
constexpr int A_BYTES = BM * BK * 2;
constexpr int B_BYTES = KATOMS * NATOMS * ATOM_WORDS * 4;
constexpr int S_BYTES = S_ROWS * BN * 2;
constexpr int Z_BYTES = Z_ROWS * BN * 2;
constexpr int STAGE_BYTES = A_BYTES + B_BYTES + S_BYTES + Z_BYTES;
static_assert(KATOMS % WARPS_K == 0, "k atoms per stage must split evenly across warps");
static_assert(STAGE_BYTES % 128 == 0, "stages stay 128-byte aligned");
}}

extern "C" __global__ void __launch_bounds__(cfg::THREADS) {plan.kernel_name}(
    const uint16_t* __restrict__ A,      // activations [M, K], row-major
    const uint32_t* __restrict__ B,      // weights, atom layout
    const uint16_t* __restrict__ S,      // group scales [K/group, N] (permuted columns) or null
    const uint16_t* __restrict__ Z,      // -(magic + zero) [rows, N] (permuted columns) or null
    const float* __restrict__ CS,        // per-column fp32 scale or null
    const uint16_t* __restrict__ BIAS,   // [N] or null
    uint16_t* __restrict__ C,            // output [M, N], row-major
    float* __restrict__ WS,              // split-K partials [splits, gridDim.x*BM, N]
    int* __restrict__ CNT,               // one counter per output tile, zero between launches
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS) {{        {gs_epilogue_parts(plan, "row")[0]}

{TILE_PREAMBLE}    // activations: BM rows x BK/8 chunks of 16 bytes, chunk index XOR-swizzled by row (conflict-free ldmatrix)
    #pragma unroll
    for (int c = tid; c < BM * (BK / 8); c += THREADS) {{
      const int r = c / (BK / 8), ch = c % (BK / 8);
      const bool ok = m0 + r < M;
      const uint16_t* src = A + (size_t)(ok ? m0 + r : 0) * K + k0 + ch * 8;
      copy_16_async(base + r * BK * 2 + ((ch ^ (r & 7)) * 16), src, ok);
    }}
    // weights: NATOMS x KATOMS atoms, each contiguous in global memory
    #pragma unroll
    for (int c = tid; c < NATOMS * KATOMS * (ATOM_WORDS / 4); c += THREADS) {{
      const int a = c / (ATOM_WORDS / 4), w = c % (ATOM_WORDS / 4);
      const int na = a / KATOMS, ka = a % KATOMS;
      const uint32_t* src = B + ((size_t)(n0 / 64 + na) * katoms_total + k0 / 64 + ka) * ATOM_WORDS + w * 4;
      copy_16_async(base + A_BYTES + ((ka * NATOMS + na) * ATOM_WORDS + w * 4) * 4, src, true);
    }}
{_table_load("S", "S_ROWS", "A_BYTES + B_BYTES", row_expr(s_group, s_rows, "S")) if s_rows else ""}\
{_table_load("Z", "Z_ROWS", "A_BYTES + B_BYTES + S_BYTES", row_expr(z_group, z_rows, "Z")) if z_rows else ""}\
  }};

  float acc[TM][TA * 8][4];
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
{zero_const_bits}
{PIPELINE_HEAD}    #pragma unroll
    for (int i = 0; i < KATOMS / WARPS_K; ++i) {{
      const int ka = i * WARPS_K + wk;
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks) {{
        const int kk = ka * 64 + ks * 16;  // k offset inside the stage
        uint32_t a[TM][4];
        #pragma unroll
        for (int tm = 0; tm < TM; ++tm) {{
          const int row = (wm * TM + tm) * 16 + (lane & 15);
          const int ch = kk / 8 + (lane >> 4);
          ldmatrix_x4(a[tm], base + row * BK * 2 + ((ch ^ (row & 7)) * 16));
        }}
        #pragma unroll
        for (int ta = 0; ta < TA; ++ta) {{
          const int na = wn * TA + ta;
{load_words}
{_per_tile_table("S", "ss", "A_BYTES + B_BYTES", local_row(s_group)) if s_rows else ""}\
{_per_tile_table("Z", "zz", "A_BYTES + B_BYTES + S_BYTES", local_row(z_group)) if z_rows else ""}\
          #pragma unroll
          for (int nt = 0; nt < 8; ++nt) {{
            uint32_t b[2];
            #pragma unroll
            for (int r = 0; r < 2; ++r) {{
              const int p = {pair_index_c("ks", "nt", "r", lay.tile_major)};  // the lane's pair index in the atom
              uint32_t v = dq_raw({word}, p % {ppw});
              {pick}
              {decode_body}
              b[r] = v;
            }}
            #pragma unroll
            for (int tm = 0; tm < TM; ++tm) mma_k16(acc[tm][ta * 8 + nt], a[tm], b[0], b[1]);
          }}
        }}
      }}
    }}
  }}
  copy_wait<0>();
  __syncthreads();

{splitk_epilogue('acc', row_scale='GS' if plan.row_scale else None)}}}
"""
    return src


# Shared by the tile kernels: where this block and warp sit in the GEMM, and the head of the stage loader.
TILE_PREAMBLE = """\
  using namespace cfg;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int last_block;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp % WARPS_K, wn = (warp / WARPS_K) % WARPS_N, wm = warp / (WARPS_K * WARPS_N);
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int k_begin = blockIdx.z * k_per_split;
  const int ktiles = k_per_split / BK;
  const int katoms_total = K / 64;
  const uint32_t smem0 = smem_u32(smem);

  auto load_stage = [&](int stage, int kt) {
    const uint32_t base = smem0 + stage * STAGE_BYTES;
    const int k0 = k_begin + kt * BK;
"""


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


def splitk_epilogue(acc: str, row_scale: str | None = None) -> str:
    """The shared tail of the tile kernels: fold the warps' K split (shared memory), add split-K partials
    (workspace, last block of a tile, fixed order), then scale, bias and store. ``acc`` names an fp32
    accumulator array [TM][TA*8][4]; ``row_scale`` a per-row fp32 scale pointer (per-token), if any."""
    row_mul = (f"\n          if ({row_scale}) {{{{ const float rs = load_f32({row_scale} + row); v0 *= rs; v1 *= rs; }}}}"
               if row_scale else "")
    text = f"""  // fold the k-split across warps into the wk == 0 warps (smem is free now)
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
  @SCALE@
  #pragma unroll
  for (int i = 0; i < TM; ++i)
    #pragma unroll
    for (int j = 0; j < TA * 8; ++j)
      #pragma unroll
      for (int h = 0; h < 2; ++h) {{
        const int row = m0 + (wm * TM + i) * 16 + (lane >> 2) + h * 8;
        const int col = n0 + (wn * TA + j / 8) * 64 + (j % 8) * 8 + (lane & 3) * 2;
        if (row < M) {{
          float v0 = {acc}[i][j][2 * h] * scale, v1 = {acc}[i][j][2 * h + 1] * scale;
          if (CS) {{ v0 *= load_f32(CS + col); v1 *= load_f32(CS + col + 1); }}@ROWSCALE@
          if (BIAS) {{ v0 += act_to_f32(load_u16(BIAS + col)); v1 += act_to_f32(load_u16(BIAS + col + 1)); }}
          store_u32(C + (size_t)row * N + col, f32x2_to_act2(v0, v1));
        }}
      }}
"""
    scale = ("const float scale = out_scale;  // GS holds one scale per token row (row_scale)" if row_scale == "GS"
             else "const float scale = GS ? out_scale * load_f32(GS) : out_scale;")
    return text.replace("@ROWSCALE@", row_mul).replace("@SCALE@", scale)


def _table_load(ptr: str, rows: str, offset: str, row_expr: str) -> str:
    """cp.async of the scale or zero rows a stage needs (BN values each, 16 bytes per copy)."""
    return f"""\
    #pragma unroll
    for (int c = tid; c < {rows} * (BN / 8); c += THREADS) {{
      const int r = c / (BN / 8), ch = c % (BN / 8);
      const uint16_t* src = {ptr} + (size_t){row_expr} * N + n0 + ch * 8;
      copy_16_async(base + {offset} + (r * BN + ch * 8) * 2, src, true);
    }}
"""


def _tile_weight_words(cb: int, tile_major: bool) -> tuple[str, str]:
    """The tile kernel's weight words from shared memory: their loads (in the loop over k16 steps, per atom ta) and
    the expression of the word that holds pair p (n8 tile nt, step ks).
    Step-major order: one step's words are contiguous (cb / 4 16-byte loads, or the 16 bytes that hold them).
    Tile-major order (humming.core.common.layout: int4 only, on profiles with the register-A wgmma kernels, where this
    kernel runs only what those do not): one step's four words lie in four chunks, one 4-byte load each, which keeps
    the registers of one step (these kernels sit at the register limit: the atom's 16 words at once spilled more;
    ptxas still spills 4 bytes in the H200's M=128 tile, and the kernel measured 2-9% slower than step-major)."""
    if not tile_major:
        load = """          // this lane's codes for step ks: words [ks*CB, ks*CB + CB) of its stream
          uint32_t words[CB >= 4 ? CB : 4];
          {
            const uint32_t atom = base + A_BYTES + (ka * NATOMS + na) * ATOM_WORDS * 4 + lane * 16;
            #pragma unroll
            for (int c = 0; c < (CB >= 4 ? CB / 4 : 1); ++c) {
              uint32_t q[4];
              lds_128(q, atom + ((ks * CB) / 4 + c) * 512);
              #pragma unroll
              for (int e = 0; e < 4; ++e) words[c * 4 + e] = q[e];
            }
          }"""
        return load, f"words[(CB >= 4 ? 0 : (ks * CB) % 4) + (p % 16) / {16 // cb}]"
    if cb != 4:
        raise ValueError(f"the tile-major pair order is made for 4-bit containers only, not {cb}-bit")
    load = """          // this lane's codes for step ks: word ks of chunk tt = tile tt
          uint32_t words[4];
          #pragma unroll
          for (int tt = 0; tt < 4; ++tt)
            words[tt] = lds_32(base + A_BYTES + (ka * NATOMS + na) * ATOM_WORDS * 4 + tt * 512 + lane * 16 + ks * 4);"""
    return load, "words[nt >> 1]"


def _per_tile_table(name: str, var: str, offset: str, row: str) -> str:
    """16-byte shared load of the eight per-n8-tile values (scales or zeros) this lane needs."""
    return f"""\
          uint32_t {var}8[4];
          lds_128({var}8, base + {offset} + ({row} * BN + na * 64 + (lane >> 2) * 8) * 2);
"""
