"""The tuner's search space for the WnA16 kernels of the mma.sync layout (``python -m humming tune``): the
planner's default first, then every valid stream, tile, register-A small-form and two-warpgroup configuration."""
from __future__ import annotations

import dataclasses
import itertools
import math

from humming.core.families.mma_wna16.planner import STREAM_MAX_M, plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.core.families.mma_wna16.tuned import (
    _RS_OCCUPANCY,
    _RS_SPLITS,
    _RS_STAGES,
    _rs_prefill_plan,
    _rs_small_plan,
    runs_register_a_prefill,
)
from humming.core.families.register_a import layout as rs_layout
from humming.core.families.register_a import prefill as rs_prefill
from humming.core.plan import Plan
from humming.errors import HummingError

# ------------------------------------------------------------------------------------------------ candidates
_STREAM_WARPS_K = (2, 4, 8, 16)  # 16: 512 threads, 128 registers each (the small layers at M <= 8)


_STREAM_SPLITS = (1, 2, 4, 8)


_STREAM_IN_FLIGHT = (1, 2, 3)


_STREAM_BULK_SLOTS = (2, 4, 6, 8)  # ring slots per warp of the bulk-copy stream kernel (profiles declaring tma)


_TILE_SPLITS = (1, 2, 3, 4, 6, 8)


_SMALL_M_TILES = ((1, 3), (1, 4), (4, 3), (4, 4))  # (warps_k, stages) of the 64-wide slab tiles, M <= 64


# (bm, warps_m, warps_n, warps_k, bk, stages), M > 64
_LARGE_M_TILES = ((64, 2, 2, 1, 64, 4), (64, 2, 2, 2, 128, 3), (128, 2, 2, 1, 64, 4), (128, 2, 2, 2, 128, 3),
                  (128, 2, 4, 1, 64, 4), (64, 1, 2, 2, 128, 4), (128, 4, 2, 1, 64, 4), (128, 2, 2, 1, 64, 3),
                  (64, 1, 2, 2, 128, 3))


def candidate_configs(m: int) -> list[tuple[str, MmaWnA16Tiles, int]]:
    """(path, tiles, splits) to time for M (the search space humming tune times)."""
    out: list[tuple[str, MmaWnA16Tiles, int]] = []
    if m <= STREAM_MAX_M:
        bm = 8 if m <= 8 else 16
        for wk in _STREAM_WARPS_K:
            for splits in _STREAM_SPLITS:
                for in_flight in _STREAM_IN_FLIGHT:
                    # activations: loaded per atom (0, 0), in the register ring (1, 0), staged in shared memory (0, 1)
                    for x_ring, x_smem in ((0, 0), (1, 0), (0, 1)):
                        for fold in ((0, 1, 2) if x_ring or x_smem else (0, 1)):  # the planner refuses what a layout cannot take
                            out.append(("stream", MmaWnA16Tiles(bm, 64, 64 * wk, in_flight + 1, 1, 1, wk, x_ring, fold,
                                                             x_smem=x_smem), splits))
                for slots in _STREAM_BULK_SLOTS:
                    for fold in (0, 1, 2):
                        out.append(("stream", MmaWnA16Tiles(bm, 64, 64 * wk, slots, 1, 1, wk, 0, fold, 1), splits))
    if m <= 64:
        tm = (m + 15) // 16
        tiles = [MmaWnA16Tiles(16 * tm, 64, 64 * wk, stages, 1, 1, wk) for wk, stages in _SMALL_M_TILES]
    else:
        tiles = [MmaWnA16Tiles(bm, 64 * wn, bk, stages, wm, wn, wk) for bm, wm, wn, wk, bk, stages in _LARGE_M_TILES]
    out += [("tile", t, s) for t in tiles for s in _TILE_SPLITS]
    return out


def _add_unique(plans: list[Plan], seen: set, p: Plan) -> None:
    sig = (p.path, p.tiles, p.splits)
    if sig not in seen:
        seen.add(sig)
        plans.append(p)


def candidates(caps, layout, m: int, act: str, scheme: str = "", *, include_tile_for_stream: bool = True) -> list[Plan]:
    """The planner's default plan first (what humming.gemm runs without a tuning entry: from the register-A prefill
    form's threshold that form's rules), then every valid candidate plan for M (duplicates removed)."""
    from humming.core.families.register_a import planner as rs

    if runs_register_a_prefill(caps, layout, m):
        default = rs_prefill.prefill_default(caps, layout, m, act, scheme)
    else:
        default = plan_wna16(caps, layout, m, act, scheme=scheme)
    plans, seen = [default], {(default.path, default.tiles, default.splits)}
    for path, tiles, splits in candidate_configs(m):
        if path == "tile" and m <= STREAM_MAX_M and not include_tile_for_stream:
            continue
        try:
            p = plan_wna16(caps, layout, m, act, scheme=scheme, tiles=tiles, splits=splits, path=path)
        except HummingError:
            continue
        _add_unique(plans, seen, p)
    _add_balanced(plans, seen, caps, layout, m, act, scheme)

    # the small-M register-A wgmma form where the profile runs wgmma here: (token tile, splits, stages, fold, tma);
    # fold=2 was never faster than fold=1 on the H200 and is not timed; above 64 tokens, tiles of 64 / 128;
    # activations by cp.async and, where the profile declares it, by TMA tensor copy
    copies = (False, True) if caps.memory.tma and caps.memory.mbarrier else (False,)
    if rs.SMALL_MIN_M <= m <= rs.SMALL_MAX_M:
        configs = itertools.product((None,), _RS_SPLITS, _RS_STAGES, (0, 1), copies)
    elif rs.SMALL_MAX_M < m < rs.DEFAULT_MIN_M:
        configs = itertools.product((64, 128), (1, 2, 4), (4, 6), (0,), copies)
    else:
        configs = ()
    # with TMA copies, also as thread-block clusters of 2 / 4 slabs sharing each activation stage (multicast)
    clusters = (0,) + (rs.CLUSTER_SIZES if caps.memory.cluster_multicast else ())
    for bt, splits, stages, fold, tma in configs:
        for cluster in clusters if tma else (0,):
            try:
                p = _rs_small_plan(caps, layout, m, act, scheme, splits, stages, bt, fold, tma, cluster)
            except HummingError:
                continue
            _add_unique(plans, seen, p)
    # up to 64 tokens, also with the occupancy option (more warpgroups per SM, each with a shallow ring), activations
    # by TMA where declared
    if rs.SMALL_MIN_M <= m <= rs.SMALL_MAX_M:
        for splits, stages, fold, occupancy in itertools.product(_RS_SPLITS, (4, 8), (0, 1), _RS_OCCUPANCY):
            try:
                p = _rs_small_plan(caps, layout, m, act, scheme, splits, stages, None, fold, copies[-1], 0, occupancy)
            except HummingError:
                continue
            _add_unique(plans, seen, p)
    # the two-warpgroup form (128 channels per block: half the activation reads), from one 128-token tile; from
    # DEFAULT_MIN_M humming.gemm runs it (its own handle), so the bucket's winner is measured against it there too
    if m >= rs.MIN_M:
        # also with the tail option where the last round's tiles split in K quarters fill a round better, and as
        # stream-K over one persistent block per SM
        sms = caps.limits.sms or 0
        for bt in (128, 256):
            tail = rs.tail_tiles(math.ceil(m / bt) * (layout.n // rs_layout.BC), sms)
            for split_tail, streamk in ((0, 0), *(((tail, 0),) if tail else ()), *(((0, sms),) if sms else ())):
                try:
                    p = _rs_prefill_plan(caps, layout, m, act, scheme, bt, split_tail, streamk)
                except HummingError:
                    continue
                _add_unique(plans, seen, p)
    return plans


def _add_balanced(plans: list, seen: set, caps, layout, m: int, act: str, scheme: str) -> None:
    """Stream candidates without split-K, again with ``balance``: the last slabs split in two halves of K so that
    N/64 + balance blocks fill whole rounds of blocks per SM. How many blocks of a kernel fit an SM depends on its
    registers (known after compiling), so the first two rounds above the slab count are timed."""
    sms, slabs = caps.limits.sms or 0, layout.n // 64
    rounds = [r for r in range(1, 9) if slabs < sms * r <= 2 * slabs][:2]
    if not sms or m > STREAM_MAX_M or not rounds:
        return
    for p in [p for p in plans if p.path == "stream" and p.splits == 1 and not p.tiles.bulk]:
        for r in rounds:
            try:
                q = plan_wna16(caps, layout, m, act, scheme=scheme, path="stream", splits=1,
                               tiles=dataclasses.replace(p.tiles, balance=sms * r - slabs))
            except HummingError:
                continue
            _add_unique(plans, seen, q)
