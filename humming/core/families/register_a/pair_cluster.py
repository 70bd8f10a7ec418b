"""Thread-block clusters of two blocks in the warp-specialised register-A forms (TileConfig.cluster = 2: the wide
W4A8 form, the two-warpgroup W4A16 form). The pair takes one token tile and two adjacent channel tiles; stage kt's
activation tile is read from L2 once, by block kt % 2, and multicast into both blocks' slots (each block's FULL
mbarrier expects the whole stage, whoever copies it). A slot is refilled once every consumer warp of both blocks
released it (EMPTY counts 2 x 8 arrivals, each warp arrives in both blocks); the last STAGES stages are not released,
so no block arrives on a peer that may have exited (each block's producer waits for every release of a slot it
arms again, so it outlives the peer's arrivals on it). The form's own text is rewritten (``rewrite``): the tile of
the block, the barrier counts and the cluster barrier here; the copy and the release by the caller, which knows
its lines.
"""
from __future__ import annotations

from humming.core.common.wgmma import tile_of_block

# the block's tile: pairs of channel tiles in the form's rasterized launch order, this block the pair's tile of its rank
TILE = """  // the cluster's pair of channel tiles: pair (blockIdx.x, blockIdx.y / 2) in the launch order below, this block the
  // channel tile of its rank in the pair
  const int crank = blockIdx.y & 1, pairs_y = gridDim.y >> 1;
  const int bid = blockIdx.x + (blockIdx.y >> 1) * gridDim.x, per_group = RASTER * pairs_y;   // launch order of pairs
  const int first = bid / per_group * RASTER, rows = min((int)gridDim.x - first, RASTER);   // the group's token tiles
  const int m0 = (first + bid % per_group % rows) * BT, n0 = (2 * (bid % per_group / rows) + crank) * BC;"""
TILE_LAUNCH_ORDER = """  const int crank = blockIdx.y & 1;   // this block's rank in its cluster (two adjacent channel tiles)
  const int m0 = blockIdx.x * BT, n0 = blockIdx.y * BC;"""


def swaps(raster: int) -> list[tuple[str, str]]:
    """The rewrites every form's pair takes: its tile, the EMPTY barriers' arrival count (both blocks' consumer
    warps) and a cluster barrier after the barriers' initialisation (before a peer copies into or arrives on them)."""
    return [
        (tile_of_block(raster), TILE if raster else TILE_LAUNCH_ORDER),
        ("mbar_init(xbar0 + 8 * (STAGES + s), THREADS / 32);",
         "mbar_init(xbar0 + 8 * (STAGES + s), 2 * THREADS / 32);  // every consumer warp of both blocks"),
        ("    mbar_init_fence();\n  }\n  __syncthreads();\n",
         "    mbar_init_fence();\n  }\n  cluster_sync();  // both blocks' mbarriers exist before either copies into "
         "or arrives on the other\n"),
    ]


def multicast_copy(copy_line: str, indent: str = "        ", turn: str = "kt % 2 == crank") -> str:
    """A producer's tensor copy ``copy_line`` (``tma_load_2d(dst, &XMAP, c0, c1, bar);``, at ``indent``) as the
    pair's: in this block's ``turn`` (block kt % 2's), one multicast copy into both blocks' slots."""
    head = "tma_load_2d("
    if not (copy_line.startswith(head) and copy_line.endswith(");")):
        raise ValueError(f"internal: not a tensor copy line: {copy_line!r}")
    return (f"{indent}if ({turn})  // this block's turn: the stage's activations into both blocks' slots\n"
            f"{indent}  tma_load_2d_multicast({copy_line[len(head):-2]}, (uint16_t)3);")


def rewrite(source: str, raster: int, copy_line: str, what: str, extra: tuple[tuple[str, str], ...] = ()) -> str:
    """``source`` with swaps(raster), its producer's tensor copy ``copy_line`` (at 8 spaces) made the pair's
    multicast, and the caller's ``extra`` rewrites, each applied once (ValueError naming the line a rewrite no
    longer finds in ``what``)."""
    out = source
    for old, new in [*swaps(raster), ("        " + copy_line, multicast_copy(copy_line)), *extra]:
        if old not in out:
            raise ValueError(f"internal: the {what}'s text lost {old.strip()[:60]!r}, which the cluster rewrites")
        out = out.replace(old, new, 1)
    return out
