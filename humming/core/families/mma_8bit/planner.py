"""Planning the mma.sync 8-bit kernel (W8A8 as stored, W4A8 widened in registers; 128x128 weight blocks)."""
from __future__ import annotations

import math

from humming.core.plan import _DEFAULT_SMS, Plan, Tiles, _choose_splits
from humming.errors import ShapeError, UnsupportedOnDevice


def plan_w8a8(caps, layout, m: int, act: str, choice, scheme: str = "",
              tiles: Tiles | None = None, splits: int | None = None) -> Plan:
    """Plan the 8-bit tile kernel (mma.sync 16x8x32 on int8 or e4m3 operands as stored) for a path choice
    from humming.core.common.paths (native or legacy mma_sync)."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    if act == "bf16" and not caps.find_mma(family="mma_sync", a_type="bf16"):  # (sm_75: no bf16 conversions)
        raise UnsupportedOnDevice(f"{caps.name} declares no bf16 arithmetic (no bf16 mma.sync): the 8-bit kernel cannot "
                                  f"write bf16 outputs there; use float16 activations")
    int4 = getattr(layout, "weight_bits", 8) == 4
    block = getattr(layout, "weight_scale", "") == "block"  # 128x128 weight blocks: fp32 sums next to the partials
    if choice.family != "mma_sync" or choice.a_type not in ("s8", "e4m3") or choice.b_type != choice.a_type:
        raise UnsupportedOnDevice(f"{scheme}: the 8-bit kernel runs mma_sync s8/e4m3 paths, not {choice.describe()}")
    n, k = layout.n, layout.k
    if k % 128:
        raise ShapeError(f"K={k} must be a multiple of 128 for the 8-bit kernel")
    reasons = list(choice.reasons)
    async_copy = bool(caps.memory.cp_async)
    if not caps.memory.ldmatrix:
        raise UnsupportedOnDevice(f"{caps.name} does not declare ldmatrix, which the 8-bit kernel uses for A")
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms or _DEFAULT_SMS
    if tiles is None:
        tm = math.ceil(m / 16)
        if int4 or block:  # partials and fp32 sums both live in registers: at most 2 m16 tiles per warp
            cands = ([Tiles(16 * tm, 64, 128, st, 1, 1, 2) for st in (4, 3, 2)] if m <= 32 else
                     [Tiles(64, 128, 128, st, 2, 2, 1) for st in (4, 3, 2)])
            if block and m > 32:  # N % 128 == 64 (block tables have a part-filled last block): 64-wide tiles
                cands += [Tiles(64, 64, 128, st, 2, 1, 2) for st in (4, 3, 2)]
        else:
            cands = ([Tiles(16 * tm, 64, 128, st, 1, 1, 2) for st in (4, 3, 2)] if m <= 64 else
                     [Tiles(128, 128, 128, st, 2, 2, 1) for st in (3, 2)] + [Tiles(64, 128, 128, 2, 1, 2, 1)])
        cands = [t for t in cands if n % t.bn == 0]

        def smem(t: Tiles) -> int:
            b = t.bk * t.bn // (2 if int4 else 1)
            return max(t.stages * (t.bm * t.bk + b), (t.warps_k - 1) * t.bm * t.bn * 4)

        fitting = [t for t in cands if smem(t) <= limit]
        if not fitting:
            raise UnsupportedOnDevice(f"no 8-bit tile fits {caps.name}'s {limit} B of shared memory with N={n}")
        tiles = fitting[0]
        reasons.append(f"8-bit tile {tiles.bm}x{tiles.bn}x{tiles.bk}, {tiles.stages} stages")
    else:
        reasons.append(f"tile {tiles.bm}x{tiles.bn}x{tiles.bk} forced (tuned)")
    if block:
        reasons.append("128x128 weight blocks: each stage's partial (one k block) is added into fp32 sums times "
                       "activation scale (row, k block) x weight scale (n block, k block)")
    b_bytes = tiles.bk * tiles.bn // (2 if int4 else 1)
    smem_bytes = max(tiles.stages * (tiles.bm * tiles.bk + b_bytes), (tiles.warps_k - 1) * tiles.bm * tiles.bn * 4)
    group = getattr(layout, "group", 0)
    if int4 and not (group % tiles.bk == 0 or tiles.bk % group == 0):
        raise ShapeError(f"group size {group} must divide or be a multiple of the {tiles.bk}-wide k tile")
    if int4 and (getattr(layout, "weight_format", ""), getattr(layout, "a_type", "")) == ("int4", "e4m3"):
        from humming.core.common.layout import LINEAR_WIDENING_REASON

        reasons.append("int4 -> e4m3 by tables (GemmOptions.w4a8_widen='prmt'): two byte-permute lookups per 4 codes"
                       if getattr(layout, "widen", "linear") == "prmt" else LINEAR_WIDENING_REASON)
    if splits is None:
        tiles_mn = math.ceil(m / tiles.bm) * (n // tiles.bn)
        occ = max(1, min(limit // max(smem_bytes, 1), 2048 // tiles.threads, 4))
        splits, why = _choose_splits(tiles_mn, k, tiles.bk, tiles.stages, sms, occ, m <= 64)
        reasons.append(why)
    elif k % (tiles.bk * splits):
        raise ShapeError(f"split-K {splits} does not divide K={k} into multiples of BK={tiles.bk}")
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="mma_sync",
        instruction=choice.instruction, path=choice.path, layout=layout, tiles=tiles, splits=splits,
        async_copy=async_copy, smem_bytes=smem_bytes, reasons=tuple(reasons),
    )
