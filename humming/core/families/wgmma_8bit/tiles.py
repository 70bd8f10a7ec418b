"""The wgmma W8A8 / W4A8 family's tiles: the shape and whether the warp-specialised kernel copies by TMA."""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.plan import Tiles


@dataclass(frozen=True)
class Wgmma8Tiles(Tiles):
    bulk: int = 0  # 1 = the warp-specialised kernel: a producer warpgroup's TMA tensor copies feed two consumers
