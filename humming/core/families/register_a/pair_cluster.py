"""Thread-block clusters of two blocks in the warp-specialised register-A forms (RegisterATiles.cluster = 2: the wide
W4A8 form, the two-warpgroup W4A16 form). The pair takes one token tile and two adjacent channel tiles; stage kt's
activation tile is read from L2 once, by block kt % 2, and multicast into both blocks' slots (each block's FULL
mbarrier expects the whole stage, whoever copies it). A slot is refilled once every consumer warp of both blocks
released it (EMPTY counts 2 x 8 arrivals, each warp arrives in both blocks); the last STAGES stages are not released,
so no block arrives on a peer that may have exited (each block's producer waits for every release of a slot it
arms again, so it outlives the peer's arrivals on it).

The W4A16 forms and the wide W4A8 form fill their templates' slots with the pieces here (the tile of the block, the
producer's barriers, the multicast copy, the release in both blocks).
"""
from __future__ import annotations

from humming.core.common.emit import Template

# the block's tile: pairs of channel tiles in the form's rasterized launch order, this block the pair's tile of its rank
TILE = """  // the cluster's pair of channel tiles: pair (blockIdx.x, blockIdx.y / 2) in the launch order below, this block the
  // channel tile of its rank in the pair
  const int crank = blockIdx.y & 1, pairs_y = gridDim.y >> 1;
  const int bid = blockIdx.x + (blockIdx.y >> 1) * gridDim.x, per_group = RASTER * pairs_y;   // launch order of pairs
  const int first = bid / per_group * RASTER, rows = min((int)gridDim.x - first, RASTER);   // the group's token tiles
  const int m0 = (first + bid % per_group % rows) * BT, n0 = (2 * (bid % per_group / rows) + crank) * BC;"""
TILE_LAUNCH_ORDER = """  const int crank = blockIdx.y & 1;   // this block's rank in its cluster (two adjacent channel tiles)
  const int m0 = blockIdx.x * BT, n0 = blockIdx.y * BC;"""


def tile(raster: int) -> str:
    """The kernel lines giving the pair's block its m0 / n0 (and crank), in launch order or rasterized."""
    return TILE if raster else TILE_LAUNCH_ORDER


# the slots of the producer's barriers (humming.core.common.wgmma.PRODUCER_BARRIER_INIT) as the pair's: the EMPTY
# barriers count both blocks' consumer warps, and a cluster barrier follows the initialisation (before a peer copies
# into or arrives on them)
BARRIERS = {
    "empty_init": "mbar_init(xbar0 + 8 * (STAGES + s), 2 * THREADS / 32);  // every consumer warp of both blocks",
    "init_barrier": "cluster_sync();  // both blocks' mbarriers exist before either copies into or arrives on the other",
}

_MULTICAST = Template("""if (${turn})  // this block's turn: the stage's activations into both blocks' slots
  tma_load_2d_multicast(${operands}, (uint16_t)3);""")

# a consumer warp's release of the slot of the stage before (the address in ``empty``) in both blocks, for the stages
# that are refilled only
_RELEASE_BOTH = Template("""if (lane == 0 && ${refilled}) {${note}
  mbar_arrive_peer(empty, 0);
  mbar_arrive_peer(empty, 1);
}""", note="")


def multicast_copy(copy_line: str, turn: str = "kt % 2 == crank") -> str:
    """A producer's tensor copy ``copy_line`` (``tma_load_2d(dst, &XMAP, c0, c1, bar);``) as the pair's: in this
    block's ``turn`` (block kt % 2's), one multicast copy into both blocks' slots (two lines, the second indented
    by two spaces: for a slot alone on its line)."""
    head = "tma_load_2d("
    if not (copy_line.startswith(head) and copy_line.endswith(");")):
        raise ValueError(f"internal: not a tensor copy line: {copy_line!r}")
    return _MULTICAST.fill(turn=turn, operands=copy_line[len(head):-2])


def release_both(refilled: str, note: str = "") -> str:
    """Lane 0's arrival on the EMPTY barrier ``empty`` in both blocks when ``refilled`` (the stage before is one
    that is refilled); ``note``: a comment after the opening brace."""
    return _RELEASE_BOTH.fill(refilled=refilled, note=note)
