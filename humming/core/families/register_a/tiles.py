"""The register-A WnA16 family's tiles: ``bm`` is the token tile (the wgmma N), ``bn`` the output channels of a block
(64: the small-M form, 128: the two-warpgroup form), and the forms' options."""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.plan import Tiles


@dataclass(frozen=True)
class RegisterATiles(Tiles):
    fold: int = 0  # small-M form: 1 = raw codes into the wgmma, zero point and scale per group applied in fp32
    bulk: int = 0  # 1 = the activation stages arrive by TMA tensor copy instead of cp.async; 2 = the two-warpgroup
    #                form's producer warp issues them
    stagger: int = 0  # warp-specialised forms: 1 = the second consumer warpgroup issues its first wgmmas after the
    #                   first one's, so each decodes while the other's wgmmas run
    raster: int = 0  # two-warpgroup form: token tiles per rasterization group (the blocks of a group take its token
    #                  tiles for one channel tile after another, sharing the activations in L2); 0 = launch order
    cluster: int = 0  # small-M form with TMA copies: blocks per thread-block cluster along the channel slabs (2 or 4),
    #                   each activation stage read from L2 once per cluster and multicast; two-warpgroup form: 2 = pairs
    prefetch: int = 0  # weight atoms in flight per lane (0 = the form's default)
    occupancy: int = 0  # small-M form: blocks per SM its registers are budgeted for (0: the form's own rule); set, each
    #                     stage waits for its own wgmmas so one set of decoded weights is live
    tail: int = 0  # two-warpgroup form: the last `tail` tiles in launch order run as TAIL_SPLITS blocks each (one per
    #                quarter of K, fp32 partials added by the last)
    streamk: int = 0  # two-warpgroup form: this many persistent blocks (one per SM) take the tiles in whole waves, then
    #                   split the left-over tiles' k atoms evenly (stream-K); 0 = one block per tile
    # stream-K: 1 = the next segment's first weight atoms are loaded right after a segment's last wgmmas (during its
    # epilogue)
    early: int = 0
    # 1 = the epilogue stages the output tile with stmatrix (.trans) instead of two 16-bit shared stores per value pair
    stsm: int = 0
