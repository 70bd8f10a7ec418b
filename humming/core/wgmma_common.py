"""What the wgmma planners share (planner_wgmma: W8A8/W4A8, planner_wgmma_wna16: WnA16): the checks every
wgmma plan starts with, and the choice between 128- and 256-wide tiles by how well they fill the SMs."""
from __future__ import annotations

import math
import os

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


def threshold_from_env(env: str, forced: int, default: int | None) -> int | None:
    """The smallest M a kernel takes by a switch: None when ``env`` is 0/false/off/no, ``forced`` when 1/true/on/yes,
    else ``default``."""
    value = os.environ.get(env, "").strip().lower()
    if value in ("0", "false", "off", "no"):
        return None
    if value in ("1", "true", "on", "yes"):
        return forced
    return default
