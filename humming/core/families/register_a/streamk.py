"""CUDA pieces of the two-warpgroup register-A form's stream-K option (RegisterATiles.streamk; humming.core.families.register_a.generator
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

from humming.core.common.emit import Template
from humming.core.common.wgmma import PRODUCER_BARRIER_INIT, add_partial, claim_tile, store_partial
from humming.core.families.register_a import pair_cluster

# the schedule as a small struct of the launch's numbers (made where needed, so that few registers stay live across
# the main loop): P blocks; `waves` whole-tile waves; a block's stream-K atoms [run_start(b), run_start(b + 1)) among
# those of the tiles after dp_tiles; tile -> (m0, n0) in launch order (token tile fastest) or in rasterization groups.
# Slots: the block count and atoms per tile, the tile's channel width (``channels``), the tile map (``tile_origin``);
# in pairs (``pair_note``, ``pair_stages``) a note and the stages a unit runs.
HELPERS = Template("""
// stream-K (RegisterATiles.streamk): P persistent blocks take the tiles in whole waves (tile wave * P + b), then split the
// atoms of the tiles left over evenly, block b the run [run_start(b), run_start(b + 1)) in tile-major order
${pair_note}struct StreamK {
  // the plan's block count (the grid's y extent) and k atoms per tile (K over BK) as constants: every division
  // here is by a constant, so the segment's counters (and the main loop's slot, phase and address arithmetic) stay
  // in uniform registers
  static constexpr int P = ${blocks}, katoms = ${katoms};
  int tiles_x, tiles_y, waves, dp_tiles;
  long long sk_atoms;  // the left-over tiles' atoms
  __device__ __forceinline__ StreamK(int M, int N) {
    tiles_x = (M + cfg::BT - 1) / cfg::BT, tiles_y = N / ${channels};
    waves = tiles_x * tiles_y / P, dp_tiles = waves * P, sk_atoms = (long long)(tiles_x * tiles_y - dp_tiles) * katoms;
  }
  __device__ __forceinline__ int run_start(int b) const { return (int)(sk_atoms * b / P); }
${pair_stages}  // block b's next segment (tile, first k atom kt0, atoms ktiles) after (wave, ga); false when it has none left
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
  __device__ __forceinline__ void origin(int tile, int& m0, int& n0) const {${tile_origin}
  }
};
""", pair_note="", pair_stages="", channels="cfg::BC")

TILE_IN_LAUNCH_ORDER = Template("""
    m0 = tile % tiles_x * cfg::BT, n0 = tile / tiles_x * ${channels};""")
TILE_RASTERIZED = Template("""
    const int per_group = cfg::RASTER * tiles_y, first = tile / per_group * cfg::RASTER;
    const int rows = min(tiles_x - first, cfg::RASTER);
    m0 = (first + tile % per_group % rows) * cfg::BT, n0 = (tile % per_group / rows) * ${channels};""")


def helpers(raster: int, blocks: int, k: int, bk: int, pair: bool = False) -> str:
    """The schedule's struct for a launch of ``blocks`` persistent blocks over K = ``k`` (the kernel is specialised to
    both: with them read at run time (gridDim.y, K / BK) ptxas kept the main loop's counters on the vector datapath,
    2-7% slower on the H200). With ``pair`` the schedule's units are the blocks / 2 pairs and its tiles pairs of
    adjacent channel tiles."""
    if blocks <= 0 or k % bk or (pair and blocks % 2):
        raise ValueError(f"stream-K needs a positive block count (even in pairs) and K a multiple of {bk}; got "
                         f"{blocks}, K={k}")
    channels = "(2 * cfg::BC)" if pair else "cfg::BC"
    origin = (TILE_RASTERIZED if raster else TILE_IN_LAUNCH_ORDER).fill(channels=channels)
    pair_slots = {"pair_note": PAIR_NOTE, "pair_stages": PAIR_STAGES} if pair else {}
    return HELPERS.fill(blocks=blocks // 2 if pair else blocks, katoms=k // bk, channels=channels, tile_origin=origin,
                        **pair_slots)


PAIR_NOTE = ("// in pairs (RegisterATiles.cluster = 2): the units b are pairs of blocks (clusters of two), the tiles pairs of "
             "channel tiles\n")
PAIR_STAGES = """  // the stages unit b runs in all (both blocks of a pair run the same segments, in step)
  __device__ __forceinline__ int stages(int b) const { return waves * katoms + run_start(b + 1) - run_start(b); }
"""


# the body's lines in place of the block's tile (m0, n0, kt0 and ktiles come per segment)
SCHEDULE = """  // stream-K: this block's segments come from StreamK(M, N), made where needed
  // (this block: blockIdx.y, read where needed: a variable of it is spilled rather than re-read)
  constexpr int katoms = StreamK::katoms;   // K over BK for the plan's K"""


# Stream-K in pairs (RegisterATiles.cluster = 2 with streamk; humming.core.families.register_a.pair_cluster): the
# schedule's unit is a pair of blocks (a cluster: blockIdx.y / 2) and its tiles pairs of adjacent channel tiles; both
# blocks run the same segments in step, each its channel tile of the pair (rank blockIdx.y & 1). Stage it's
# activations are copied by the block of rank it % 2 into both blocks' slots; every consumer warp releases a slot in
# both blocks, except the block's last STAGES stages (its peer may have exited). A split tile is two halves: each
# block stores its partial in its own slot and counts its half's atoms (two counters per pair tile); the finishing
# pair's block adds the partials of its half. The pieces below take ``pair`` for that.
def unit(pair: bool) -> str:
    """The schedule's unit of this block: the block, or its pair."""
    return "blockIdx.y >> 1" if pair else "blockIdx.y"


# the producer warpgroup: its first thread copies the stages of every segment of the block without a break (stage it
# of the block in slot it % STAGES); _COPY: its tensor copy of stage it (k atom kt0 + kt of the segment's tile)
_COPY = "tma_load_2d(x0 + s * X_BYTES, &XMAP, (kt0 + kt) * BK, m0, xbar0 + 8 * s);"
_PRODUCER = Template(PRODUCER_BARRIER_INIT.text + """  if (warp >= THREADS / 32) {  // ---- the producer warpgroup: its first thread copies every segment's stages in turn
    setmaxnreg_dec<40>();
    if (tid == THREADS) {
${copier_start}      int wave = 0, ga = StreamK(M, N).run_start(${unit}), tile, kt0, ktiles;
      int it = 0;  // stages copied so far (slot it % STAGES)
      while (StreamK(M, N).next(${unit}, wave, ga, tile, kt0, ktiles)) {
        int m0, n0;
        StreamK(M, N).origin(tile, m0, n0);
        #pragma unroll 1
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const int s = it % STAGES;
          if (it >= STAGES) mbar_wait_polite(xbar0 + 8 * (STAGES + s), ((it / STAGES) + 1) & 1);  // stage it - STAGES released
          mbar_expect_tx(xbar0 + 8 * s, X_BYTES);
          ${copy}
        }
      }
    }
    return;
  }
  setmaxnreg_inc<232>();  // the consumers take the producer's registers
""", **PRODUCER_BARRIER_INIT.defaults, copier_start="", copy=_COPY)


def producer(pair: bool, copier_start: str = "") -> str:
    """The producer warpgroup: its first thread copies the stages of the block's segments one after another
    (``copier_start``: lines it runs first); in a pair, every other stage multicast into both blocks."""
    if not pair:
        return _PRODUCER.fill(unit=unit(pair), copier_start=copier_start)
    return _PRODUCER.fill(unit=unit(pair), copier_start=copier_start, **pair_cluster.BARRIERS,
                          copy=pair_cluster.multicast_copy(_COPY, turn="it % 2 == (blockIdx.y & 1)"))


# the consumers' loop over the block's segments (the tile body follows, indented, then SEGMENT_CLOSE); slots: the
# schedule's unit, the weight ring's declarations where the ring lives across segments (early), and in pairs the
# stages of the block and its channel tile of the pair
_SEGMENT_OPEN = Template("""  int it0 = 0;  // stages consumed before this segment
${total_stages}  int wave = 0, ga = StreamK(M, N).run_start(${unit}), tile, kt0, ktiles;
${ring}  #pragma unroll 1
  while (StreamK(M, N).next(${unit}, wave, ga, tile, kt0, ktiles)) {
    int m0, n0;
    StreamK(M, N).origin(tile, m0, n0);
${own_tile}""", total_stages="", ring="", own_tile="")

SEGMENT_CLOSE = """    it0 += ktiles;
  }
}
"""


def segment_open(pair: bool, ring: str = "") -> str:
    """The consumers' segment loop up to the tile body; ``ring``: the weight ring's declarations, kept across the
    segments (the early ring, below)."""
    slots = {}
    if ring:
        slots["ring"] = (ring.rstrip() + "\n  bool ring_ready = false;  // the ring holds the segment's first atoms "
                         "(loaded before the previous segment's epilogue)\n")
    if pair:
        slots["total_stages"] = ("  const int total_stages = StreamK(M, N).stages(blockIdx.y >> 1);  // (its last "
                                 "STAGES are not released: the peer may have exited)\n")
        slots["own_tile"] = "    n0 += (blockIdx.y & 1) * BC;  // this block's channel tile of the pair\n"
    return _SEGMENT_OPEN.fill(unit=unit(pair), **slots)


def release(pair: bool) -> str:
    """A consumer warp's arrival on the EMPTY barrier ``empty`` of the stage before its stage kt (a segment's first
    stage releases the last of the one before); in a pair in both blocks, but not for the unit's last STAGES
    stages."""
    if pair:
        return pair_cluster.release_both("(kt > 0 || it0 > 0) && it0 + kt - 1 + STAGES < total_stages")
    return "if (lane == 0 && (kt > 0 || it0 > 0)) mbar_arrive(empty);"


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
    return (f"""  if (ktiles != katoms) {{
    __shared__ int last_segment;
    const StreamK sk(M, N);
    constexpr int CHUNKS = {regs} / 4, SPLIT_FLOATS = {regs} * THREADS;  // one segment's partial of the tile
    const long long t0 = (long long)(tile - sk.dp_tiles) * katoms;  // the tile's first stream-K atom
    const int b_first = (int)(((t0 + 1) * sk.P - 1) / sk.sk_atoms), b_last = (int)(((t0 + katoms) * sk.P - 1) / sk.sk_atoms);
    float* ws_lane = WS + tid * 4;
    float* mine = ws_lane + ((size_t)blockIdx.y * 2 + (ga - ktiles == sk.run_start(blockIdx.y) ? 0 : 1)) * SPLIT_FLOATS;
""" + store_partial("mine", "4 * THREADS", acc)
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
HANDOVER_PARTS = Template("""  if (ktiles != katoms) {  // a split tile: the block of its first part finishes it
    const StreamK sk(M, N);
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_FLOATS = WG_ACC_REGS * THREADS;  // one part's partial of the tile
    float* ws_lane = WS + tid * 4;
    ${counter}
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
    for (int bj = (int)${unit} + 1; bj <= b_last; ++bj) {  // block order: this block's part (acc), then theirs
      if (sk.run_start(bj) == sk.run_start(bj + 1)) continue;  // (no atoms)
      ${part}
""" + add_partial("part", "4 * THREADS") + """    }
  }
""", counter="int* counter = CNT + (tile - sk.dp_tiles);", unit="blockIdx.y",
    part="const float* part = ws_lane + (size_t)bj * SPLIT_FLOATS;")
HANDOVER = HANDOVER_PARTS.fill()


def handover(pair: bool) -> str:
    """The hand-over of a split tile (HANDOVER); in a pair each block's half: its own counter of the pair tile, the
    partials of its half."""
    if not pair:
        return HANDOVER
    return HANDOVER_PARTS.fill(
        counter="int* counter = CNT + 2 * (tile - sk.dp_tiles) + (blockIdx.y & 1);  // this block's half of the pair tile",
        unit="(blockIdx.y >> 1)",
        part="const float* part = ws_lane + (size_t)(2 * bj + (blockIdx.y & 1)) * SPLIT_FLOATS;  // its block of this half")


# The early ring (RegisterATiles.early, an option): the weight ring lives across segments, and right after a segment's last
# wgmmas the consumers load the next segment's first PF atoms into it (the ring is free then), so that they arrive
# during this segment's epilogue and fix-up instead of after them; the next segment then skips its prologue (the
# ring's declarations go before the segment loop: segment_open's ``ring``).
def early_fetch(fetch: str, slab_line: str, wsrc_line: str, tab_line: str, pair: bool = False) -> str:
    """CUDA after a segment's last wgmmas and the consumers' barrier (after the async-proxy fence, whose MEMBAR would
    wait for these loads): the next segment (if any) and its first PF atoms into the ring;
    ``fetch``: the prologue's load of atom s into slot s (10 spaces indented), ``slab_line`` / ``wsrc_line`` /
    ``tab_line``: the body's declarations of slab, wsrc and tab, repeated here for the next segment's tile; ``pair``:
    the unit is the block's pair, its tile the block's channel tile of the pair's."""
    own_tile = "      n0 += (blockIdx.y & 1) * BC;\n" if pair else ""
    return f"""
  {{  // the next segment's first weight atoms, loaded now: they arrive during this segment's epilogue
    // (not after a split tile's later part: the fence after its partial's store would wait for these loads)
    int wave_n = wave, ga_n = ga, tile_n, kt0_n, ktiles_n;
    ring_ready = kt0 == 0 && StreamK(M, N).next({unit(pair)}, wave_n, ga_n, tile_n, kt0_n, ktiles_n);
    if (ring_ready) {{
      int m0, n0;
      StreamK(M, N).origin(tile_n, m0, n0);
{own_tile}      const int kt0 = kt0_n, ktiles = ktiles_n;  // (the next segment's, for the loads below)
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
