"""Measured MoE configurations: the entry `python -m humming tune --moe` stored for (profile, scheme, weight layout,
N, K, experts, top_k, bucket of tokens) (humming.core.tuning.entries), and what the MoE families make of it: which
kernel (the tile kernel or the register-A one) and its token tile, tile and split-K. An entry is only a request:
the planner checks it and a stale one is ignored (logged), as for the dense families."""
from __future__ import annotations

import logging

from humming.core.families.moe_wna16.activations import activation_step
from humming.core.families.moe_wna16.layout import moe_layout
from humming.core.plan import Tiles
from humming.core.tuning.entries import lookup, m_bucket, measured_reason
from humming.errors import HummingError

log = logging.getLogger("humming.tuning")

__all__ = ["entry_layout", "moe_entry", "entry_tiles", "entry_reason", "ignored", "other_kernel_chosen"]


def entry_layout(scheme, n: int, k: int, act: str):
    """The layout MoE entries are keyed by, whichever kernel won: the MoE tile kernel's for these weights
    (HummingError for weights no MoE kernel takes)."""
    step, _ = activation_step(scheme, n, k)
    return moe_layout(scheme.with_(act=None) if step != "x" else scheme, n, k, act)


def moe_entry(problem, caps) -> dict | None:
    """The stored winner for an MoE problem (its M: the tokens), or None (no entry, no tokens, or weights no MoE
    kernel takes)."""
    if problem.m < 1:  # no bucket holds zero tokens; the launch is skipped
        return None
    try:
        layout = entry_layout(problem.scheme, problem.n, problem.k, problem.act)
    except HummingError:
        return None
    return lookup(caps, layout, problem.n, problem.k, problem.m, problem.scheme.name,
                  moe=(problem.experts, problem.top_k))


def entry_tiles(entry: dict) -> tuple[Tiles, int]:
    """(tiles, splits) an entry stored (KeyError / TypeError where it is malformed)."""
    t = entry["tiles"]
    tiles = Tiles(*(int(t[name]) for name in ("bm", "bn", "bk", "stages", "warps_m", "warps_n", "warps_k")))
    return tiles, int(entry["splits"])


def entry_reason(entry: dict, tokens: int) -> str:
    return measured_reason(entry, m_bucket(tokens))


def ignored(entry: dict, tokens: int, exc: Exception) -> None:
    log.info("humming tuning: stored MoE config %s (bucket %s, %s) ignored: %s", entry.get("path"), m_bucket(tokens),
             entry.get("origin"), exc)


def other_kernel_chosen(problem, caps, path: str) -> tuple[str | None, dict | None]:
    """(why a family whose plans have ``path`` does not take an MoE problem before its own checks: a dense problem,
    or a measured entry that chose another kernel; None when neither), and the problem's entry."""
    if not problem.is_moe:
        return "dense GEMMs run on the dense families", None
    entry = moe_entry(problem, caps)
    if entry is not None and entry.get("path") != path:
        return f"a measured entry chose {entry.get('path')} for this MoE GEMM ({entry.get('origin')})", entry
    return None, entry
