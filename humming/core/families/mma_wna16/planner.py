"""Planning the mma.sync WnA16 kernels: the stream kernel (M <= 16: weights as the MMA's A operand, streamed from
global memory into registers) and the tile kernel (weights widened to the activation type in registers, tiles and
split-K from M, N, K and the profile's limits). ``tiles`` / ``splits`` / ``path`` force a configuration (a tuned
entry or a tuning candidate); it is still checked against the shape and the limits."""
from __future__ import annotations

import math

from humming.core.common.layout import WeightLayout
from humming.core.common.paths import choose_mma
from humming.core.families.mma_wna16.sizing import (
    X_SMEM_MAX_COPIES,
    bulk_slot_bytes,
    fold_applies,
    stream_smem_bytes,
    x_smem_layout,
    x_smem_tokens,
)
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.core.plan import _DEFAULT_SMS, Plan, _choose_splits, _occupancy
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice


def _tile_candidates(m: int, n: int, k: int, layout: WeightLayout, sms: int) -> list[tuple[MmaWnA16Tiles, str]]:
    """Tile shapes for an M bucket, best first; the caller keeps the first that fits shared memory.
    The orders come from measured sweeps (docs/performance.md)."""
    groups = [g for g in (layout.scale_group, layout.zero_group) if g > 0]

    def fits(t: MmaWnA16Tiles) -> bool:
        return k % t.bk == 0 and n % t.bn == 0 and all(g % t.bk == 0 or t.bk % g == 0 for g in groups)

    out: list[tuple[MmaWnA16Tiles, str]] = []
    if m <= 64:
        tm = math.ceil(m / 16)
        for warps_k in (4, 2, 1):
            for stages in (3, 4, 2):
                out.append((
                    MmaWnA16Tiles(16 * tm, 64, 64 * warps_k, stages, 1, 1, warps_k),
                    f"M={m} <= 64: memory-bound; {tm} m16 tile(s), 64-wide column slabs, "
                    f"{warps_k} warp(s) split each stage's K",
                ))
    else:
        big = MmaWnA16Tiles(128, 256, 64, 4, 2, 4, 1)
        tiles_big = math.ceil(m / 128) * (n // 256) if n % 256 == 0 else 0
        if m <= 128 and tiles_big < sms:
            out.append((MmaWnA16Tiles(64, 128, 128, 4, 1, 2, 2), f"M={m} <= 128 on {n // 128} column tiles: 64x128 tile, 4 warps (2 split K)"))
        if tiles_big >= sms or m > 128:
            out.append((big, f"M={m}: 128x256 block tile, 8 warps of 64x64 ({tiles_big} tiles for {sms} SMs)"))
        for stages in (3, 2):
            out.append((MmaWnA16Tiles(128, 128, 64, stages, 2, 2, 1), f"M={m}: 128x128 block tile, 4 warps of 64x64"))
            out.append((MmaWnA16Tiles(64, 64, 64, stages, 2, 1, 1), f"M={m}: 64x64 block tile, 2 warps"))
    out = [c for c in out if fits(c[0])]
    if not out:
        raise ShapeError(
            f"no tile fits N={n}, K={k} with group sizes {groups}: N and K must be multiples of 64 and each "
            f"group size a multiple or a divisor of 64"
        )
    return out


def _check_forced(t: MmaWnA16Tiles, m: int, n: int, k: int, layout: WeightLayout) -> None:
    groups = [g for g in (layout.scale_group, layout.zero_group) if g > 0]
    problems = []
    if t.bm % (16 * t.warps_m) or t.bn % (64 * t.warps_n) or t.bk % (64 * t.warps_k):
        problems.append("BM must be a multiple of 16*warps_m, BN of 64*warps_n, BK of 64*warps_k")
    if k % t.bk or n % t.bn:
        problems.append(f"BK={t.bk} must divide K={k} and BN={t.bn} must divide N={n}")
    if any(not (g % t.bk == 0 or t.bk % g == 0) for g in groups):
        problems.append(f"group sizes {groups} must divide or be multiples of BK={t.bk}")
    if t.stages < 2 or t.threads > 1024:
        problems.append("at least 2 stages and at most 1024 threads")
    if t.x_ring or t.fold or t.x_smem:
        problems.append("x_ring, x_smem and fold are stream-path options")
    if problems:
        raise ShapeError(f"tile {t} is not valid here: " + "; ".join(problems))


STREAM_MAX_M = 16


STREAM_BULK_KNOB = "mma_wna16.stream_bulk"  # the default stream plans use the bulk-copy ring where declared


def _bulk_declared(caps) -> bool:
    return bool(caps.memory.tma and caps.memory.mbarrier)


def _bulk_ring_slots(layout: WeightLayout, warps_k: int, bm: int, limit: int) -> int:
    """Ring slots per warp of the bulk stream kernel: 8 (eight atoms in flight per warp), fewer where the block's
    rings would take more than half the shared memory (two blocks per SM)."""
    slots = 8
    while slots > 2 and warps_k * slots * (bulk_slot_bytes(layout, bm) + 8) > limit // 2:
        slots -= 1
    return slots


def _stream_config(n: int, k: int, m: int, container: int, sms: int) -> tuple[int, int, int, str]:
    """(warps per slab, atoms in flight per warp, split-K, why) for the stream path. Measured on an H200
    (humming tune): 8-16 warps per SM with two atoms in flight per warp stream best."""
    slabs = n // 64
    warps_k = 8 if slabs <= sms else 4
    while warps_k > 1 and (k % (64 * warps_k) or k // (64 * warps_k) < 2):
        warps_k //= 2
    in_flight = 2 if m <= 8 and container <= 4 else 1
    atoms = k // 64 // warps_k
    splits = 1
    while slabs * warps_k * splits < 6 * sms and atoms % (splits * 2) == 0 and atoms // (splits * 2) >= 2:
        splits *= 2
    warps = slabs * warps_k * splits
    return warps_k, in_flight, splits, (
        f"{warps_k} warps per 64-channel slab, {in_flight} atom(s) in flight per warp, split-K {splits}: "
        f"{warps} warps for {sms} SMs"
    )


# x_smem by rule (no tuned entry): a split's K range at most this long, so the staged activations stay small
X_SMEM_RULE_MAX_K = 4096


def _x_smem_default(layout: WeightLayout, m: int, k: int, warps_k: int, auto_splits: int, forced_splits,
                    smem_limit: int) -> int | None:
    """The split count for the stream kernel's x_smem variant by rule (codes of at most 4 bits, groups of 64 or
    more, a split's K range <= X_SMEM_RULE_MAX_K, at most half of X_SMEM_MAX_COPIES activation copies per thread,
    the staging within the profile's shared memory per block), or None where the rule does not take it. H200 measurements (tune --only x_smem): with those
    settings x_smem with fold=2 ran at or ahead of the register-ring default at M 1, 2, 4 and 8 on 8192x8192,
    28672x8192 and 4096x14336 (e.g. 28672x8192 M=1 38.4 against 48.3 us)."""
    if layout.decode.container > 4:
        return None
    atoms = k // 64 // warps_k
    choices = [forced_splits] if forced_splits else [s for s in (1, 2, 4, 8, 16) if s >= auto_splits]
    for splits in choices:
        if atoms % splits or k // splits > X_SMEM_RULE_MAX_K:
            continue
        if x_smem_tokens(m, 8) * (k // splits) * 2 // 16 > X_SMEM_MAX_COPIES // 2 * 32 * warps_k:
            continue
        fold_area = stream_smem_bytes(MmaWnA16Tiles(8, 64, 64 * warps_k, 3, 1, 1, warps_k), layout)
        staged = x_smem_layout(layout, x_smem_tokens(m, 8), k // splits, fold_area, 32 * warps_k)
        if isinstance(staged, str) or staged["total"] > smem_limit:
            return None
        return splits
    return None


def plan_wna16(caps, layout: WeightLayout, m: int, act: str, out: str = "", scheme: str = "",
               tiles: MmaWnA16Tiles | None = None, splits: int | None = None, path: str | None = None) -> Plan:
    """Plan a WnA16 GEMM C[M, N] = A[M, K] @ W[N, K]^T for a prepared weight layout on a profile.

    ``tiles``/``splits`` force a configuration (measured tuning); it is still checked against the limits."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    n, k = layout.n, layout.k
    reasons: list[str] = []
    instruction, why = choose_mma(caps, act)
    reasons.append(why)
    reasons.append(f"path dequant-to-activation: {layout.decode.kind}{layout.decode.bits} codes widened to {act} in registers")
    async_copy = bool(caps.memory.cp_async)
    reasons.append("cp.async declared: multi-stage asynchronous pipeline" if async_copy
                   else "cp.async not declared: synchronous global->shared copies")
    if not caps.memory.ldmatrix:
        raise UnsupportedOnDevice(f"{caps.name} does not declare ldmatrix, which the mma.sync kernels use for A")
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms
    if not sms:
        sms = _DEFAULT_SMS
        reasons.append(f"the profile does not know its SM count; tiles and split-K assume {sms}")
    if path is None:
        path = "stream" if m <= STREAM_MAX_M and tiles is None else "tile"
    if path == "stream":
        if m > STREAM_MAX_M:
            raise ShapeError(f"the stream path takes M <= {STREAM_MAX_M}, got M={m}")
        warps_k, in_flight, auto_splits, why = _stream_config(n, k, m, layout.decode.container, sms)
        x_ring = fold = x_smem_rule = 0
        bulk_wanted = tiles is None and bool(knobs.value(STREAM_BULK_KNOB, caps)) and _bulk_declared(caps)
        if tiles is None and m <= 8:
            if not fold_applies(layout):  # measured on the H200: 10-15% faster at M=1 on every shape
                x_ring = fold = 1
                why += "; M <= 8: codes multiplied raw, zero point and scale per atom in fp32 (fold), activations in flight"
                staged = None if bulk_wanted else _x_smem_default(layout, m, k, warps_k, auto_splits, splits, limit)
                if staged is not None:
                    x_ring, x_smem_rule, fold, auto_splits = 0, 1, 2, staged
                    why += (f"; activations and tables staged in shared memory instead (x_smem, channel tiles outermost) "
                            f"over {k // staged} of K per split (X_SMEM_RULE_MAX_K; see _x_smem_default for the "
                            f"measurements)")
        bulk = 0
        if bulk_wanted:
            bulk = 1
            in_flight = _bulk_ring_slots(layout, warps_k, 8 if m <= 8 else 16, limit) - 1
            x_ring = 0
            why += (f"; {STREAM_BULK_KNOB}: weights, tables and activations bulk-copied into a ring of "
                    f"{in_flight + 1} shared-memory slots per warp")
        x_smem, balance = x_smem_rule, 0
        if tiles is not None:
            warps_k, in_flight, x_ring, fold, bulk = tiles.warps_k, tiles.stages - 1, tiles.x_ring, tiles.fold, tiles.bulk
            x_smem, balance = tiles.x_smem, tiles.balance
            why = f"{warps_k} warps per slab, {in_flight} atom(s) in flight forced (tuned)"
            if x_ring:
                why += ", activations in flight with them"
            if x_smem:
                if x_ring or bulk:
                    raise ShapeError("x_smem excludes x_ring and bulk: the activations come from one place")
                why += ", activations and tables staged once in shared memory"
            if bulk:
                if not _bulk_declared(caps):
                    raise UnsupportedOnDevice(f"{caps.name} does not declare tma and mbarrier, which the bulk-copy "
                                              f"stream kernel uses")
                if x_ring:
                    raise ShapeError("bulk and x_ring exclude each other: with bulk the activations arrive in the slot")
                in_flight += 1  # every slot of the ring is in flight while the warp computes on registers
                why = (f"{warps_k} warps per slab, weights, tables and activations bulk-copied into a ring of "
                       f"{in_flight} shared-memory slots per warp, forced (tuned)")
            if fold:
                if fold_applies(layout):
                    raise ShapeError(fold_applies(layout))
                if fold == 2 and not (x_ring or bulk or x_smem):
                    raise ShapeError("fold=2 (channel tiles outermost) needs x_ring, x_smem or bulk: every k16 step's "
                                     "activations at hand")
                if fold == 2:
                    why += " with the channel tiles outermost (fewer live registers)"
                why += ", codes multiplied raw, zero point and scale applied per atom in fp32 (fold)"
        if k % (64 * warps_k):
            raise ShapeError(f"K={k} must be a multiple of {64 * warps_k} for {warps_k} warps per slab")
        if bulk:
            st = MmaWnA16Tiles(8 if m <= 8 else 16, 64, 64 * warps_k, in_flight, 1, 1, warps_k, 0, fold, 1)
            if stream_smem_bytes(st, layout) > limit:
                raise UnsupportedOnDevice(f"{warps_k} warps x {in_flight} slots need {stream_smem_bytes(st, layout)} B "
                                          f"of shared memory; {caps.name} allows {limit}")
            reasons.append(f"M={m} <= {STREAM_MAX_M}: stream path: weights are the MMA's A operand, bulk-copied into "
                           f"shared memory and read once per atom into registers")
        else:
            st = MmaWnA16Tiles(8 if m <= 8 else 16, 64, 64 * warps_k, in_flight + 1, 1, 1, warps_k, x_ring, fold,
                            x_smem=x_smem, balance=balance)
            reasons.append(f"M={m} <= {STREAM_MAX_M}: stream path: weights are the MMA's A operand, loaded straight "
                           f"into registers with 16-byte loads" + ("" if x_smem else "; no shared-memory staging"))
        if splits is None:
            splits = auto_splits
        elif (k // 64 // warps_k) % splits:
            raise ShapeError(f"split-K {splits} does not divide the {k // 64 // warps_k} atoms per warp")
        else:
            why += f"; split-K {splits} forced (tuned)"
        if balance:
            if bulk:
                raise ShapeError("balance is written for the register-ring stream kernel, not bulk")
            if splits != 1:
                raise ShapeError(f"balance splits some slabs in two halves of K itself; split-K {splits} excludes it")
            if not 0 < balance <= n // 64:
                raise ShapeError(f"balance {balance}: between 1 and the {n // 64} slabs of N={n}")
            if (k // 64 // warps_k) % 2:
                raise ShapeError(f"balance halves K: the {k // 64 // warps_k} atoms per warp must be even")
            why += (f"; balance {balance}: the last {balance} of {n // 64} slabs run as two blocks each (one per half "
                    f"of K), {n // 64 + balance} blocks")
        reasons.append(why)
        smem = stream_smem_bytes(st, layout)
        if x_smem:
            rows = x_smem_tokens(m, st.bm)
            staged = x_smem_layout(layout, rows, k // splits, smem, st.threads)
            if isinstance(staged, str):
                raise ShapeError(staged)
            smem = staged["total"]
            if smem > limit:
                raise UnsupportedOnDevice(f"staging {rows} token row(s) x {k // splits} of K in shared memory needs "
                                          f"{smem} B; {caps.name} allows {limit}")
            reasons.append(f"x_smem: {staged['x_bytes']} B of activations ({rows} token row(s) reserved) and "
                           f"{staged['table_bytes']} B of tables per block copied into shared memory once, after the launch")
        return Plan(
            scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=out or act, family="mma_sync",
            instruction=instruction, path="stream", layout=layout, tiles=st, splits=splits,
            async_copy=async_copy, smem_bytes=smem, reasons=tuple(reasons),
        )
    candidates = _tile_candidates(m, n, k, layout, sms)
    if tiles is not None:
        _check_forced(tiles, m, n, k, layout)
        candidates = [(tiles, f"tile {tiles.bm}x{tiles.bn}x{tiles.bk} forced (tuned)")]
    fitting = [c for c in candidates if c[0].smem_bytes(layout) <= limit]
    if not fitting:
        t0 = candidates[-1][0]
        raise UnsupportedOnDevice(
            f"the smallest tile {t0.bm}x{t0.bn}x{t0.bk} needs {t0.smem_bytes(layout)} B of shared memory; "
            f"{caps.name} allows {limit}"
        )
    tiles, why = fitting[0]
    reasons.append(why)
    smem = tiles.smem_bytes(layout)
    reasons.append(f"{tiles.stages} stages: {smem // 1024} KiB of {caps.limits.smem_per_block_kb} KiB shared memory per block")
    occ = _occupancy(tiles, smem, caps)
    tiles_mn = math.ceil(m / tiles.bm) * (n // tiles.bn)
    if splits is not None:
        if splits < 1 or k % (tiles.bk * splits):
            raise ShapeError(f"split-K {splits} does not divide K={k} into multiples of BK={tiles.bk}")
        why = f"split-K {splits} forced (tuned)"
    else:
        splits, why = _choose_splits(tiles_mn, k, tiles.bk, tiles.stages, sms, occ, m <= 64)
    reasons.append(why)
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=out or act, family="mma_sync",
        instruction=instruction, path="dequant-to-activation", layout=layout, tiles=tiles, splits=splits,
        async_copy=async_copy, smem_bytes=smem, reasons=tuple(reasons),
    )
