"""What the wgmma planners and generators share (wgmma_8bit: W8A8/W4A8, wgmma_dequant and register_a: WnA16): the checks
every wgmma plan starts with, the choice between 128- and 256-wide tiles by how well they fill the SMs, and CUDA
pieces (the producer warpgroup's barriers, the split-K fix-up through a workspace)."""
from __future__ import annotations

import math

from humming.core.common.emit import Template
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice


def require_wgmma(caps, m: int, form, wanted: str, fallback: str, pipeline: str) -> None:
    """ShapeError for M < 1; UnsupportedOnDevice when no wgmma form ``wanted`` (e.g. "m64nNk32 e4m3 x e4m3 -> f32")
    is declared (saying which kernels run there instead, ``fallback``) or cp.async is missing."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    if form is None:
        have = sorted({i.a_type for i in caps.find_mma(family="wgmma")})
        raise UnsupportedOnDevice(
            f"{caps.name} declares no wgmma {wanted} (declared wgmma A types: {', '.join(have) or 'none'}); {fallback}"
        )
    if not caps.memory.cp_async:
        raise UnsupportedOnDevice(f"{caps.name} does not declare cp.async, which the {pipeline} uses")


def choose_tile_width(m: int, n: int, bm: int, sms: int, widths: list[int], reasons: list[str]) -> int:
    """The first of ``widths`` (256 before 128): 256 does more work per byte of shared memory read; 128 when 256
    would leave most SMs idle (fewer tiles than SM slots). Appends the reason when there was a choice."""
    bn = widths[0]
    if len(widths) > 1:
        def waves(b: int) -> float:  # fraction of the launched SM slots that hold a tile
            tiles = math.ceil(m / bm) * (n // b)
            return tiles / (math.ceil(tiles / sms) * sms)

        wide = math.ceil(m / bm) * (n // 256)
        if waves(128) > 1.25 * waves(256):
            bn = 128
            reasons.append(f"BN=128: {wide} tiles of 128x256 would leave most of {sms} SMs idle")
        else:
            reasons.append(f"BN=256: the widest m64n256 step; {wide} tiles on {sms} SMs")
    return bn


def declared_option(declared: bool, option: bool | None, knob: str, caps, missing: str) -> bool:
    """An optional kernel variant that needs declared capabilities: ``option`` True forces it (UnsupportedOnDevice
    saying ``missing`` where not ``declared``), False refuses it, None takes the tuning knob ``knob`` where
    declared."""
    if option:
        if not declared:
            raise UnsupportedOnDevice(missing)
        return True
    if option is None and declared:
        return bool(knobs.value(knob, caps))
    return False


# The producer warpgroup of the register-A kernels (two consumer warpgroups of THREADS = 256, a block of 384): its
# first thread issues one TMA tensor copy of each stage's activation tile (X_BYTES, the map XMAP, k coordinate
# kt * BK) into the slot the consumers released (EMPTY: one arrival per consumer warp once its wgmmas of the stage are
# done), completing on the slot's FULL mbarrier; the consumers then meet only at the FULL mbarriers (no block barrier
# per stage) and take the producer's registers. Needs x0, ktiles, m0, tid and warp defined before it.
# PRODUCER_BARRIER_INIT: the FULL / EMPTY mbarriers, initialised before the block splits into producer and consumers
# (slots: the EMPTY barriers' initialisation with their arrival count, the barrier after it; a pair of blocks in a
# cluster fills both, humming.core.families.register_a.pair_cluster).
PRODUCER_BARRIER_INIT = Template("""  __shared__ __align__(8) uint64_t xbar[2 * STAGES];  // FULL[STAGES], then EMPTY[STAGES]
  const uint32_t xbar0 = smem_u32(xbar);
  if (tid == 0) {
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(xbar0 + 8 * s, 1);
      ${empty_init}
    }
    mbar_init_fence();
  }
  ${init_barrier}
""", empty_init="mbar_init(xbar0 + 8 * (STAGES + s), THREADS / 32);", init_barrier="__syncthreads();")
PRODUCER_BARRIERS = PRODUCER_BARRIER_INIT.fill()
# PRODUCER_COPIES: the barriers, then the producer warpgroup, whose first thread issues the copies (slots: ``wait``,
# how it waits for a released slot: mbar_wait, or the backend's mbar_wait_polite, which sleeps between polls;
# ``copy``, the stage's tensor copy; ``copier_start``, lines the copying thread runs first; and the barriers')
PRODUCER_COPIES = Template(PRODUCER_BARRIER_INIT.text + """  if (warp >= THREADS / 32) {  // ---- the producer warpgroup: its first thread issues the copies
    setmaxnreg_dec<40>();
    if (tid == THREADS) {
${copier_start}      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        if (kt >= STAGES) ${wait}(xbar0 + 8 * (STAGES + s), ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
        mbar_expect_tx(xbar0 + 8 * s, X_BYTES);
        ${copy}
      }
    }
    return;
  }
  setmaxnreg_inc<232>();  // the consumers take the producer's registers
""", **PRODUCER_BARRIER_INIT.defaults, copier_start="", wait="mbar_wait",
    copy="tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, xbar0 + 8 * s);")
# (the producer's text with its waits written WAIT, and with mbar_wait)
PRODUCER_WARPGROUP_WAITING = PRODUCER_COPIES.fill(wait="WAIT")
PRODUCER_WARPGROUP = PRODUCER_COPIES.fill()


# The start of the warp-specialised wgmma kernels' body (TMA W8A8, shared-memory W4A8): block coordinates, the
# 1024-byte aligned slots and the FULL / EMPTY mbarrier arrays after them (a kernel may declare more barriers after
# ``empty0`` on the same line, then ends it with ";").
WS_BLOCK_HEAD = """  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  const int ktiles = K / BK;
  const uint32_t smem0 = (smem_u32(smem) + 1023u) & ~1023u;  // the swizzle repeats every 1024 bytes
  const uint32_t full0 = smem0 + BAR_OFFSET, empty0 = full0 + 8 * STAGES"""


# slot 0's activation descriptor, declared once: slot s's is desc0 + s * X_BYTES / 16 (the 14-bit start-address field
# takes the offset without a carry below 256 KB; tests/kernels/test_wgmma_rs_compile.py checks the identity), instead of
# building each stage's descriptor from its slot's address
SLOT0_DESCRIPTOR = ("  const uint64_t desc0 = make_smem_desc(x0);   // slot 0's activation descriptor: slot s's is "
                    "+ s * X_BYTES / 16\n")

STAGGER_KNOB = "wgmma.stagger"  # false: the two consumer warpgroups start together (tiles.stagger = 0)


def stagger_wanted(caps) -> bool:
    """The warp-specialised register-A kernels' staggered start (tiles.stagger): the tuning knob wgmma.stagger."""
    return bool(knobs.value(STAGGER_KNOB, caps))


# ---- split-K fix-up through a global workspace (the register-A WnA16 kernels: the small form's splits, the tail
# quarters, stream-K segments). Each block stores its fp32 partial in accumulator-register order: chunk v (acc[4v ..
# 4v + 3]) of thread t at slot + 4 t + v * step (one 16-byte store; a warp's covers 512 contiguous bytes). Every thread
# reads back only what the same thread of the other blocks wrote. The block whose counter addition completes the tile
# adds the partials in a fixed order, so the result does not depend on which block finished last.
def store_partial(slot: str, step: str, acc: str = "acc", indent: str = "    ") -> str:
    """CUDA: this thread's accumulators (``acc``, CHUNKS x 4 floats) stored at ``slot`` (the thread's own base) + v *
    ``step``."""
    return f"""{indent}#pragma unroll
{indent}for (int v = 0; v < CHUNKS; ++v)
{indent}  store_f32x4({slot} + v * {step},
{indent}              {acc}[4 * v], {acc}[4 * v + 1], {acc}[4 * v + 2], {acc}[4 * v + 3]);
"""


def claim_tile(counter: str, add: str, total: str, sync: str, leave: str, flag: str = "last_block", acc: str = "acc",
               regs: str = "WG_ACC_REGS", own: str = "") -> str:
    """CUDA: after store_partial: fence; one thread adds ``add`` to the tile's ``counter``; the block whose addition
    brings it to ``total`` resets it and goes on with zeroed accumulators (the partials are added next), every other
    block runs ``leave`` (``sync``: the barrier of the threads that hold accumulators; ``flag`` a __shared__ int;
    ``acc``: the accumulator array, ``regs`` floats). With ``own`` the accumulators are first kept in an array of
    that name (the partial this block stored: add_partial reads it from there instead of from the workspace)."""
    keep = (f"""    float {own}[{regs}];  // this block's partial, as stored
    #pragma unroll
    for (int i = 0; i < {regs}; ++i) {own}[i] = {acc}[i], {acc}[i] = 0.0f;
""" if own else f"""    #pragma unroll
    for (int i = 0; i < {regs}; ++i) {acc}[i] = 0.0f;
""")
    return f"""    fence_device();
    {sync}();
    if (tid == 0) {{
      int* counter = {counter};
      const int done = atomic_add_i32(counter, {add}) + {add};  // the tile's share summed so far
      {flag} = done == {total};
      if ({flag}) store_i32(counter, 0);
    }}
    {sync}();
    if (!{flag}) {leave}
    fence_device();
""" + keep


def add_partial(slot: str, step: str, indent: str = "      ", acc: str = "acc", own: str = "", is_own: str = "",
                regs: str = "WG_ACC_REGS") -> str:
    """CUDA: the partial that store_partial wrote at ``slot`` added into this thread's accumulators ``acc`` (L2
    loads); with ``own`` (claim_tile's copy) and ``is_own`` (a condition: the partial is this block's) the block's own
    partial comes from the registers instead: the same values, one L2 round trip fewer for the block that finishes
    the tile."""
    loads = f"""{indent}#pragma unroll
{indent}for (int v = 0; v < CHUNKS; ++v) {{
{indent}  float r[4];
{indent}  load_f32x4_l2(r, {slot} + v * {step});
{indent}  #pragma unroll
{indent}  for (int e = 0; e < 4; ++e) {acc}[4 * v + e] += r[e];
{indent}}}
"""
    if not own:
        return loads
    return f"""{indent}if ({is_own}) {{  // this block's own partial: still in registers
{indent}  #pragma unroll
{indent}  for (int i = 0; i < {regs}; ++i) {acc}[i] += {own}[i];
{indent}}} else {{
""" + "".join("  " + ln + "\n" if ln else "\n" for ln in loads.rstrip("\n").split("\n")) + f"""{indent}}}
"""


def stmatrix_staging(staging: str, value: str) -> str:
    """The epilogue's staging stores by stmatrix .trans (the tiles' stsm; the backend's stmatrix_helpers): per two
    8-token blocks jp, jp + 1 one instruction of four 8x8 matrices, matrix i = token block j = jp + i / 2, channels
    8 (i % 2) + g of the warp's 16 (h = i % 2), into the staging tile ``staging`` [token][channel] of pitch OUT_LD;
    ``value``: statements (6 spaces indented) that set ``const uint32_t v``, the value pair of tokens 8j + 2q, +1 of
    channel 64 wg + 16 w + 8 h + g, from j and h."""
    return f"""  // lane l writes row l % 8 of matrix l / 8: token 8 (jp + l / 16) + l % 8, channels 64 wg + 16 w + 8 ((l / 8) % 2) ..
  const uint32_t stsm_row = {staging} + ((((lane >> 4) << 3) + (lane & 7)) * OUT_LD + wg * 64 + w * 16 + ((lane >> 3) & 1) * 8) * 2;
  static_assert(BT % 16 == 0, "whole pairs of 8-token blocks");
  #pragma unroll
  for (int jp = 0; jp < BT / 8; jp += 2) {{
    uint32_t v4[4];
    #pragma unroll
    for (int i = 0; i < 4; ++i) {{
      const int j = jp + i / 2, h = i % 2;
{value}
      v4[i] = v;
    }}
    stmatrix_x4_trans(stsm_row + jp * 8 * OUT_LD * 2, v4[0], v4[1], v4[2], v4[3]);
  }}"""


# the block's tile (m0 tokens, n0 channels): in launch order, or (the tiles' raster) in groups of RASTER token tiles
# (the grid's x) whose blocks take the group's token tiles for one channel tile after another, so the blocks running
# at once share RASTER activation tiles in L2 instead of all of them (also the register-A W4A8 kernel's)
TILE_IN_LAUNCH_ORDER = "  const int m0 = blockIdx.x * BT, n0 = blockIdx.y * BC;"


TILE_RASTERIZED = """  const int bid = blockIdx.x + blockIdx.y * gridDim.x, per_group = RASTER * gridDim.y;   // launch order
  const int first = bid / per_group * RASTER, rows = min((int)gridDim.x - first, RASTER);   // the group's token tiles
  const int m0 = (first + bid % per_group % rows) * BT, n0 = (bid % per_group / rows) * BC;"""


def tile_of_block(raster: int) -> str:
    """The kernel lines giving the block's m0 / n0 (no trailing newline)."""
    return TILE_RASTERIZED if raster else TILE_IN_LAUNCH_ORDER


# The end of both register-A kernels: the staged output tile (token rows x 128 channels, 16-bit) copied to C
# with 16-byte stores, rows past M skipped; then the kernel closes. ``sync``: the barrier before the copy-out (the
# consumers' own where a producer warpgroup has left). The register-A W4A16 kernels fill more: ``staging`` (the
# staging tile's address), the tile's shape (its 16-byte chunks per token row, row_chunks = 2^row_shift, and the
# ``threads`` a pass, for the comment; the small form's tile is 64 channels of 128 threads) and ``close``, the
# kernel's closing brace (none where a stream-K segment loop goes on around the copy-out).
STAGED_COPY_OUT = Template("""  ${sync}();
  // copy-out: 16-byte chunk c = tid + ${threads} i is token row c / ${row_chunks}, channels 8 (c % ${row_chunks}) .. +7
  #pragma unroll
  for (int i = 0; i < BT * (BC / 8) / THREADS; ++i) {
    const int c = tid + THREADS * i, row = c >> ${row_shift}, ch = c & ${chunk_mask};
    if (m0 + row < M) {
      uint32_t r[4];
      lds_128(r, ${staging} + (row * OUT_LD + ch * 8) * 2);
      store_g128(C + (size_t)(m0 + row) * N + n0 + ch * 8, r);
    }
  }
${close}""", sync="__syncthreads", threads="256", row_chunks="16", row_shift="4", chunk_mask="15", staging="x0",
    close="}\n")


def wgmma_k16_form(caps, act: str):
    """The declared wgmma form with k16 for act x act -> f32, or None."""
    forms = [f for f in caps.find_mma(family="wgmma", a_type=act, b_type=act, acc_type="f32")
             if f.shape[0] == 64 and f.shape[2] == 16]
    return forms[0] if forms else None


def swizzled_stage_loader(rows_per_pass: int) -> str:
    """CUDA of ``load_stage(stage, kt)``: one stage's A tile (BM rows x 128 B) then B tile (BN rows x 128 B) of
    8-bit K-major operands, copied with cp.async into 128-byte-swizzled shared memory by THREADS = 8 x
    ``rows_per_pass`` threads (shared by the wgmma and tcgen05 8-bit kernels)."""
    r = rows_per_pass
    return f"""  // stage layout: A tile (BM rows x 128 B) then B tile (BN rows x 128 B), both 128-byte swizzled.
  // Thread tid copies chunk tid % 8 of rows tid / 8 + {r} i: (row mod 8) is the same for every i, so the
  // swizzled offset inside a group of {r} rows is one constant and row i adds i * {r} * 128 bytes.
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const unsigned char* a_src = A + (size_t)(m0 + lrow) * K + lch * 16;
  const unsigned char* b_src = B + (size_t)(n0 + lrow) * K + lch * 16;
  auto load_stage = [&](int stage, int kt) {{
    const uint32_t a_tile = smem0 + stage * STAGE_BYTES + lswz, b_tile = a_tile + A_BYTES;
    const int k0 = kt * BK;
    #pragma unroll
    for (int i = 0; i < BM / {r}; ++i) {{
      const bool ok = m0 + lrow + {r} * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(a_tile + i * {r} * 128, ok ? a_src + ({r} * i * K + k0) : A, ok);
    }}
    #pragma unroll
    for (int i = 0; i < BN / {r}; ++i)
      copy_16_async(b_tile + i * {r} * 128, b_src + ({r} * i * K + k0), true);
  }};
"""
