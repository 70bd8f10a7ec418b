"""CUDA pieces of the two-warpgroup register-A form's stream-K option (TileConfig.streamk; humming.core.families.register_a.generator
assembles them): ``streamk`` persistent blocks (one per SM) take the tiles in waves (tile wave x P + b, whole K), then
split the atoms of the tiles left over evenly, each block a contiguous run of them (tile-major, so a block's run spans
at most two tiles: the last part of one and the first part of the next). The producer warpgroup streams the
activation stages of every segment of the block without a break; the consumers run one segment after another (the
weight ring restarts per segment) and write each segment through a staging tile of their own, so the producer fills
the next segment's slots meanwhile. Split tiles: the W4A16 form hands a tile's later parts over to the block of its
first part (HANDOVER: one stored fp32 partial per block, the finishing block waits only for higher blocks' first
segments, which wait for nothing); the W4A8 form's parts are added by the last of their blocks to finish (splitk, two
slots per block). Either way in block order: the result does not depend on which block finished when.
"""
from __future__ import annotations

from humming.core.common.wgmma import PRODUCER_BARRIERS, add_partial, claim_tile, store_partial

# the schedule as a small struct of the launch's numbers (made where needed, so that few registers stay live across
# the main loop): P blocks; `waves` whole-tile waves; a block's stream-K atoms [run_start(b), run_start(b + 1)) among
# those of the tiles after dp_tiles; tile -> (m0, n0) in launch order (token tile fastest) or in rasterization groups
HELPERS = """
// stream-K (TileConfig.streamk): P persistent blocks take the tiles in whole waves (tile wave * P + b), then split the
// atoms of the tiles left over evenly, block b the run [run_start(b), run_start(b + 1)) in tile-major order
struct StreamK {
  // the plan's block count (the grid's y extent) and k atoms per tile (K over BK) as constants: every division
  // here is by a constant, so the segment's counters (and the main loop's slot, phase and address arithmetic) stay
  // in uniform registers
  static constexpr int P = {BLOCKS}, katoms = {KATOMS};
  int tiles_x, tiles_y, waves, dp_tiles;
  long long sk_atoms;  // the left-over tiles' atoms
  __device__ __forceinline__ StreamK(int M, int N) {
    tiles_x = (M + cfg::BT - 1) / cfg::BT, tiles_y = N / cfg::BC;
    waves = tiles_x * tiles_y / P, dp_tiles = waves * P, sk_atoms = (long long)(tiles_x * tiles_y - dp_tiles) * katoms;
  }
  __device__ __forceinline__ int run_start(int b) const { return (int)(sk_atoms * b / P); }
  // block b's next segment (tile, first k atom kt0, atoms ktiles) after (wave, ga); false when it has none left
  __device__ __forceinline__ bool next(int b, int& wave, int& ga, int& tile, int& kt0, int& ktiles) const {
    if (wave < waves) {
      tile = wave++ * P + b, kt0 = 0, ktiles = katoms;
      return true;
    }
    const int end = run_start(b + 1);
    if (ga >= end) return false;
    const int t = ga / katoms;
    tile = dp_tiles + t, kt0 = ga - t * katoms, ktiles = min(katoms - kt0, end - ga);
    ga += ktiles;
    return true;
  }
  __device__ __forceinline__ void origin(int tile, int& m0, int& n0) const {{TILE_ORIGIN}
  }
};
"""

TILE_IN_LAUNCH_ORDER = """
    m0 = tile % tiles_x * cfg::BT, n0 = tile / tiles_x * cfg::BC;"""
TILE_RASTERIZED = """
    const int per_group = cfg::RASTER * tiles_y, first = tile / per_group * cfg::RASTER;
    const int rows = min(tiles_x - first, cfg::RASTER);
    m0 = (first + tile % per_group % rows) * cfg::BT, n0 = (tile % per_group / rows) * cfg::BC;"""


def helpers(raster: int, blocks: int, k: int, bk: int, pair: bool = False) -> str:
    """The schedule's struct for a launch of ``blocks`` persistent blocks over K = ``k`` (the kernel is specialised to
    both: with them read at run time (gridDim.y, K / BK) ptxas kept the main loop's counters on the vector datapath,
    2-7% slower on the H200). With ``pair`` (pair_rewrite) the schedule's units are the blocks / 2 pairs
    and its tiles pairs of adjacent channel tiles."""
    if blocks <= 0 or k % bk or (pair and blocks % 2):
        raise ValueError(f"stream-K needs a positive block count (even in pairs) and K a multiple of {bk}; got "
                         f"{blocks}, K={k}")
    text = (HELPERS.replace("{TILE_ORIGIN}", TILE_RASTERIZED if raster else TILE_IN_LAUNCH_ORDER)
            .replace("{BLOCKS}", str(blocks // 2 if pair else blocks)).replace("{KATOMS}", str(k // bk)))
    if pair:
        text = text.replace("cfg::BC", "(2 * cfg::BC)").replace(PAIR_STAGES_ANCHOR, PAIR_STAGES_ANCHOR + PAIR_STAGES)
        head = "struct StreamK {\n"
        if text.count(head) != 1:
            raise ValueError("internal: the schedule's text has no single struct head")
        text = text.replace(head, "// in pairs (TileConfig.cluster = 2): the units b are pairs of blocks (clusters of two), the tiles "
                            "pairs of channel tiles\n" + head)
    return text


PAIR_STAGES_ANCHOR = "  __device__ __forceinline__ int run_start(int b) const { return (int)(sk_atoms * b / P); }\n"
PAIR_STAGES = """  // the stages unit b runs in all (both blocks of a pair run the same segments, in step)
  __device__ __forceinline__ int stages(int b) const { return waves * katoms + run_start(b + 1) - run_start(b); }
"""


# Stream-K in pairs (TileConfig.cluster = 2 with streamk; humming.core.families.register_a.pair_cluster): the schedule's unit is a pair of
# blocks (a cluster: blockIdx.y / 2) and its tiles pairs of adjacent channel tiles; both blocks run the same segments
# in step, each its channel tile of the pair (rank blockIdx.y & 1). Stage it's activations are copied by the block of
# rank it % 2 into both blocks' slots; every consumer warp releases a slot in both blocks, except the block's last
# STAGES stages (its peer may have exited). A split tile is two halves: each block stores its partial in its own slot
# and counts its half's atoms (two counters per pair tile); the finishing pair's block adds the partials of its half.
def pair_rewrite(source: str) -> str:
    """The stream-K kernel's text (after early_fetch, if any) as a pair's."""
    from humming.core.families.register_a import pair_cluster

    swaps = [
        ("StreamK(M, N).run_start(blockIdx.y)", "StreamK(M, N).run_start(blockIdx.y >> 1)", 2),
        ("StreamK(M, N).next(blockIdx.y, ", "StreamK(M, N).next(blockIdx.y >> 1, ", 0),
        ("    StreamK(M, N).origin(tile, m0, n0);\n    const int slab",
         "    StreamK(M, N).origin(tile, m0, n0);\n    n0 += (blockIdx.y & 1) * BC;  // this block's channel tile of the "
         "pair\n    const int slab", 1),
        ("StreamK(M, N).origin(tile_n, m0, n0);\n",  # (early_fetch's, where the early ring is on)
         "StreamK(M, N).origin(tile_n, m0, n0);\n        n0 += (blockIdx.y & 1) * BC;\n", -1),
        ("int* counter = CNT + (tile - sk.dp_tiles);",
         "int* counter = CNT + 2 * (tile - sk.dp_tiles) + (blockIdx.y & 1);  // this block's half of the pair tile", 1),
        ("for (int bj = (int)blockIdx.y + 1; bj <= b_last; ++bj) {", "for (int bj = (int)(blockIdx.y >> 1) + 1; bj <= b_last; ++bj) {", 1),
        ("const float* part = ws_lane + (size_t)bj * SPLIT_FLOATS;",
         "const float* part = ws_lane + (size_t)(2 * bj + (blockIdx.y & 1)) * SPLIT_FLOATS;  // its block of this half", 1),
        ("          tma_load_2d(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0, xbar0 + 8 * s);\n",
         pair_cluster.multicast_copy("tma_load_2d(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0, xbar0 + 8 * s);",
                                     "          ", turn="it % 2 == (blockIdx.y & 1)") + "\n", 1),
        ("  int it0 = 0;  // stages consumed before this segment\n",
         "  int it0 = 0;  // stages consumed before this segment\n  const int total_stages = StreamK(M, N).stages("
         "blockIdx.y >> 1);  // (its last STAGES are not released: the peer may have exited)\n", 1),
        ("if (lane == 0 && (kt > 0 || it0 > 0)) mbar_arrive(empty);",
         "if (lane == 0 && (kt > 0 || it0 > 0) && it0 + kt - 1 + STAGES < total_stages) {\n"
         "            mbar_arrive_peer(empty, 0);\n            mbar_arrive_peer(empty, 1);\n          }", 1),
    ]
    out = source
    for old, new, count in swaps:  # count: how many the text must hold (0: at least one, -1: any)
        found = out.count(old)
        if (not found and count >= 0) or (count > 0 and found != count):
            raise ValueError(f"internal: the stream-K kernel's text has {found} of {old.strip()[:60]!r} (pair rewrite)")
        out = out.replace(old, new)
    for old, new in pair_cluster.swaps(0)[1:]:  # the EMPTY arrival count and the cluster barrier (not the tile map)
        if out.count(old) != 1:
            raise ValueError(f"internal: the stream-K kernel's text lost {old.strip()[:60]!r} (pair rewrite)")
        out = out.replace(old, new)
    return out


SCHEDULE = """  // stream-K: this block's segments come from StreamK(M, N), made where needed
  // (this block: blockIdx.y, read where needed: a variable of it is spilled rather than re-read)
  constexpr int katoms = StreamK::katoms;   // K over BK for the plan's K"""


PRODUCER = PRODUCER_BARRIERS + """  if (warp >= THREADS / 32) {  // ---- the producer warpgroup: its first thread copies every segment's stages in turn
    setmaxnreg_dec<40>();
    if (tid == THREADS) {
      int wave = 0, ga = StreamK(M, N).run_start(blockIdx.y), tile, kt0, ktiles;
      int it = 0;  // stages copied so far (slot it % STAGES)
      while (StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles)) {
        int m0, n0;
        StreamK(M, N).origin(tile, m0, n0);
        #pragma unroll 1
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) mbar_wait_polite(xbar0 + 8 * (STAGES + s), ((it / STAGES) + 1) & 1);  // stage it - STAGES released
          mbar_expect_tx(xbar0 + 8 * s, X_BYTES);
          tma_load_2d(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0, xbar0 + 8 * s);
        }
      }
    }
    return;
  }
  setmaxnreg_inc<232>();  // the consumers take the producer's registers
"""

SEGMENT_OPEN = """  int it0 = 0;  // stages consumed before this segment
  int wave = 0, ga = StreamK(M, N).run_start(blockIdx.y), tile, kt0, ktiles;
  #pragma unroll 1
  while (StreamK(M, N).next(blockIdx.y, wave, ga, tile, kt0, ktiles)) {
    int m0, n0;
    StreamK(M, N).origin(tile, m0, n0);"""

SEGMENT_CLOSE = """    it0 += ktiles;
  }
}
"""

# a stream-K segment (fewer atoms than K): store the partial into this block's slot (0: its first segment, 1: its
# last), add its atoms to the tile's counter; the block that completes the tile's K adds every block's partial in
# block order (blocks with no atoms, where the left-over atoms are fewer than the blocks, hold none). The W4A8 form's;
# the W4A16 form hands over (HANDOVER).
def splitk(acc: str = "acc", regs: str = "WG_ACC_REGS", leave: str = """{
      it0 += ktiles;
      continue;
    }""") -> str:
    """The segment's split-K step for the accumulator array ``acc`` of ``regs`` floats per thread (a multiple of 4;
    the workspace slot of a segment holds regs x THREADS floats); ``leave``: what a block that does not complete the
    tile runs (the next segment)."""
    return ("""  if (ktiles != katoms) {
    __shared__ int last_segment;
    const StreamK sk(M, N);
    constexpr int CHUNKS = REGS / 4, SPLIT_FLOATS = REGS * THREADS;  // one segment's partial of the tile
    const long long t0 = (long long)(tile - sk.dp_tiles) * katoms;  // the tile's first stream-K atom
    const int b_first = (int)(((t0 + 1) * sk.P - 1) / sk.sk_atoms), b_last = (int)(((t0 + katoms) * sk.P - 1) / sk.sk_atoms);
    float* ws_lane = WS + tid * 4;
    float* mine = ws_lane + ((size_t)blockIdx.y * 2 + (ga - ktiles == sk.run_start(blockIdx.y) ? 0 : 1)) * SPLIT_FLOATS;
""".replace("REGS", regs) + store_partial("mine", "4 * THREADS", acc)
        + claim_tile("CNT + (tile - sk.dp_tiles)", "ktiles", "katoms", "consumer_sync", leave, flag="last_segment",
                     acc=acc, regs=regs)
        + """    #pragma unroll 1
    for (int bj = b_first; bj <= b_last; ++bj) {  // block order: the sum does not depend on which block came last
      const int s0 = sk.run_start(bj);  // block bj's first stream-K atom
      if (s0 == sk.run_start(bj + 1)) continue;  // (no atoms)
      const float* part = ws_lane + ((size_t)bj * 2 + (s0 >= t0 ? 0 : 1)) * SPLIT_FLOATS;
""" + add_partial("part", "4 * THREADS", acc=acc) + """    }
  }
""")


# The W4A16 form's split tiles: the block of a tile's first part (kt0 = 0, the lowest block of the tile: the end of
# its run) finishes it. A later part is the first segment of its block's run (its other segments start at a tile's
# first atom), so each block stores at most one partial (slot blockIdx.y), adds its atoms to the tile's counter without
# waiting for a value back, and goes on; the finishing block keeps its own part in registers, waits until the counter
# holds the other parts' atoms (they were computed at the start of the later blocks' runs, so the wait is normally
# over at once) and adds their partials in block order: the sum of the claim-by-the-last protocol (splitk), without
# the finishing block's store, its fence and one atomic round trip. No deadlock: a block waits only for higher blocks'
# first segments, which wait for nothing (true however few blocks are resident).
HANDOVER = """  if (ktiles != katoms) {  // a split tile: the block of its first part finishes it
    const StreamK sk(M, N);
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_FLOATS = WG_ACC_REGS * THREADS;  // one part's partial of the tile
    float* ws_lane = WS + tid * 4;
    int* counter = CNT + (tile - sk.dp_tiles);
    if (kt0 != 0) {  // a later part: its partial into this block's slot, its atoms onto the counter
""" + store_partial("ws_lane + (size_t)blockIdx.y * SPLIT_FLOATS", "4 * THREADS", indent="      ") + """      fence_device();
      consumer_sync();
      if (tid == 0) red_add_i32(counter, ktiles);
      it0 += ktiles;
      continue;
    }
    if (tid == 0) {  // the first part: the other parts' atoms are in
      wait_count_i32(counter, katoms - ktiles);
      store_i32(counter, 0);  // (zero for the next launch)
    }
    consumer_sync();
    fence_device();
    const long long t0 = (long long)(tile - sk.dp_tiles) * katoms;  // the tile's first stream-K atom
    const int b_last = (int)(((t0 + katoms) * sk.P - 1) / sk.sk_atoms);  // the block of its last
    #pragma unroll 1
    for (int bj = (int)blockIdx.y + 1; bj <= b_last; ++bj) {  // block order: this block's part (acc), then theirs
      if (sk.run_start(bj) == sk.run_start(bj + 1)) continue;  // (no atoms)
      const float* part = ws_lane + (size_t)bj * SPLIT_FLOATS;
""" + add_partial("part", "4 * THREADS") + """    }
  }
"""


# The early ring (TileConfig.early, an option): the weight ring lives across segments, and right after a segment's last
# wgmmas the consumers load the next segment's first PF atoms into it (the ring is free then), so that they arrive
# during this segment's epilogue and fix-up instead of after them; the next segment then skips its prologue.
def early_open(ring: str) -> str:
    """The consumers' segment loop with the ring declarations (``ring``: the body's, moved here) before it."""
    head = "  int wave = 0, ga = StreamK(M, N).run_start(blockIdx.y), tile, kt0, ktiles;\n"
    if SEGMENT_OPEN.count(head) != 1:
        raise ValueError("internal: the segment loop's state has no single declaration")
    return SEGMENT_OPEN.replace(head, head + ring.rstrip() + "\n  bool ring_ready = false;  // the ring holds the "
                                "segment's first atoms (loaded before the previous segment's epilogue)\n")


def early_fetch(fetch: str, slab_line: str, wsrc_line: str, tab_line: str) -> str:
    """CUDA after a segment's last wgmmas and the consumers' barrier (after the async-proxy fence, whose MEMBAR would
    wait for these loads): the next segment (if any) and its first PF atoms into the ring;
    ``fetch``: the prologue's load of atom s into slot s (10 spaces indented), ``slab_line`` / ``wsrc_line`` /
    ``tab_line``: the body's declarations of slab, wsrc and tab, repeated here for the next segment's tile."""
    return f"""
  {{  // the next segment's first weight atoms, loaded now: they arrive during this segment's epilogue
    // (not after a split tile's later part: the fence after its partial's store would wait for these loads)
    int wave_n = wave, ga_n = ga, tile_n, kt0_n, ktiles_n;
    ring_ready = kt0 == 0 && StreamK(M, N).next(blockIdx.y, wave_n, ga_n, tile_n, kt0_n, ktiles_n);
    if (ring_ready) {{
      int m0, n0;
      StreamK(M, N).origin(tile_n, m0, n0);
      const int kt0 = kt0_n, ktiles = ktiles_n;  // (the next segment's, for the loads below)
      {slab_line.strip()}
      {wsrc_line.strip()}
      {tab_line}
      #pragma unroll
      for (int s = 0; s < PF; ++s)
        if (s < ktiles) {{
{fetch}
        }}
    }}
  }}"""
