"""Where the register-A kernel's token rows come from and go to, other than rows m0 .. m0 + BT of A and C: the hook
through which the MoE form (humming.core.families.moe_register_a) gathers a block's rows through a routing, runs them
through the block's expert and scatters them to their slots. Only the two-warpgroup form with cp.async stages takes
one (a tensor copy reads whole row ranges)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenRows:
    """CUDA pieces replacing the dense ones. ``params``: parameters after GS (starting with ","); ``tile``: the block's
    m0 / n0 and what follows from them (may return early, ends with the block barrier its shared state needs);
    ``load_stage``: the ``load_stage(slot, kt)`` lambda and its setup; ``row_pair``: the staging stores' value pair
    (sets ``const uint32_t v`` from ``acc``, ``cs``, ``bs``, ``j``, ``h``); ``copy_out``: the staged tile to C, after
    the barrier, closing the kernel."""

    params: str
    tile: str
    load_stage: str
    row_pair: str
    copy_out: str
