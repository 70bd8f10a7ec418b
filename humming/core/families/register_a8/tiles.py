"""The register-A W4A8 family's tiles: ``bm`` the token tile (the wgmma N), ``bn`` 128 output channels, and the
narrow and wide forms' options."""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.plan import Tiles


@dataclass(frozen=True)
class RegisterA8Tiles(Tiles):
    bulk: int = 0  # 1 = the activation codes arrive by TMA tensor copy
    stagger: int = 0  # warp-specialised forms: the second consumer warpgroup starts this many chains after the first
    raster: int = 0  # token tiles per rasterization group (sharing activations in L2); 0 = launch order
    cluster: int = 0  # 2 = clusters of two blocks sharing activation stages
    prefetch: int = 0  # narrow form: weight stages in flight per lane (0 = the form's default)
    streamk: int = 0  # wide form: this many persistent blocks split the left-over tiles' k atoms (stream-K)
    stsm: int = 0  # 1 = the epilogue stages the output with stmatrix
    # 1 = the wide form (weights by bulk copy into the stage's slot, each fragment widened once for every chain) at a
    # 128-token tile, which alone would read as the narrow form
    wide: int = 0
    # N > 0 = converter warps of the producer warpgroup widen each stage's codes into a ring of N shared-memory slots
    # of A fragments that the consumers load (instead of widening in the consumer warps)
    widened: int = 0
    # 1 = the producer, once it issued the tile's last stage, asks the L2 for the first stages of the block launched
    # one wave later
    l2next: int = 0
    # per-channel scales: 1 = the wgmmas accumulate across every stage straight into the block's accumulators (no
    # partials, no promotion; humming.core.families.register_a8.direct)
    direct: int = 0
