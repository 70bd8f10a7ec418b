"""Planning the wgmma WnA16 kernel (16-bit activations x int4 weights dequantized into shared memory) from
declared capabilities only: a wgmma m64nNk16 form for the activation type with fp32 accumulation, cp.async, and
the shared-memory limit."""
from __future__ import annotations

from dataclasses import replace

from humming.core.common.wgmma import choose_tile_width, require_wgmma, wgmma_k16_form
from humming.core.plan import _DEFAULT_SMS, Plan, Tiles
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "wgmma-dequant-smem"
BM, BK = 128, 64  # two warpgroups of m64; 64 activation values = one 128-byte swizzle row per tile row
BQ = 3  # dequantized B tiles in flight: written (s + 1), read by wgmma (s), maybe still read by wgmma (s - 1)
MAX_STAGES = 6
MIN_M = 128  # below one full 128-row tile the mma.sync kernels (with split-K) fill the GPU better


def scale_rows(group: int) -> int:
    """Rows of the group-scale table one 64-deep stage needs (0 without group scales)."""
    return 0 if not group else max(1, BK // group)


def stage_bytes(bn: int, group: int) -> int:
    """One pipeline slot: A tile (128 rows x 128 B), raw int4 codes (bn x 32 B), scale rows; 1024-aligned."""
    raw = BM * BK * 2 + bn * BK // 2 + scale_rows(group) * bn * 2
    return (raw + 1023) // 1024 * 1024


def wgmma_wna16_smem_bytes(bn: int, stages: int, group: int) -> int:
    """BQ dequantized B tiles (bn rows x 128 B), the pipeline slots, and 1 KiB to align to 1024 bytes."""
    return BQ * bn * BK * 2 + stages * stage_bytes(bn, group) + 1024


def plan_wna16_wgmma(caps, layout, m: int, act: str, scheme: str = "", bn: int | None = None) -> Plan:
    """Plan the wgmma WnA16 kernel for ``layout`` (a ``WgmmaWnA16Layout``), or UnsupportedOnDevice / ShapeError
    naming what is missing. ``bn`` forces the tile width (128 or 256)."""
    form = wgmma_k16_form(caps, act)
    require_wgmma(caps, m, form, f"m64nNk16 {act} x {act} -> f32", "the mma.sync kernels run WnA16 there",
                  "wgmma WnA16 pipeline")
    n, k = layout.n, layout.k
    if k % BK:
        raise ShapeError(f"K={k} must be a multiple of {BK} for the wgmma WnA16 kernel")
    group = layout.scale_group
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms or _DEFAULT_SMS
    d = layout.decode
    reasons = [
        f"wgmma m64n{{N}}k16 {act} declared ({caps.target.arch}): {act} x {act} -> f32, both operands K-major in "
        f"shared memory (128-byte swizzle)",
        f"path {PATH}: {d.kind}{d.bits} codes dequantized to {act} into shared memory once per block "
        f"(magic number {d.magic_bits:#06x} | code, minus {-layout.zero_const:g} exactly, "
        + ("times the group scale" if group else "scales in the fp32 epilogue") + "), then read by wgmma",
    ]
    cands = [b for b in ((bn,) if bn else (256, 128)) if n % b == 0 and b in form.n_values]
    if not cands:
        raise ShapeError(f"N={n} must be a multiple of 128 for the wgmma WnA16 kernel")
    bn = choose_tile_width(m, n, BM, sms, cands, reasons)
    stages = next((s for s in range(MAX_STAGES, 3, -1) if wgmma_wna16_smem_bytes(bn, s, group) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(
            f"no wgmma WnA16 tile 128x{bn}x{BK} with 4 stages fits {caps.name}'s {limit} B of shared memory")
    smem = wgmma_wna16_smem_bytes(bn, stages, group)
    reasons[0] = reasons[0].replace("{N}", str(bn))
    reasons.append(
        f"tile {BM}x{bn}x{BK}: 2 warpgroups x m64n{bn}k16, 4 k16 steps per stage; {stages} cp.async slots "
        f"(activations, raw codes, scales; {stages - 2} in flight), {BQ} dequantized weight tiles (dequant of "
        f"stage s+1 overlaps the wgmma of stage s); {smem // 1024} KiB of {limit // 1024} KiB shared memory")
    reasons.append("no split-K: one K loop per output tile")
    tiles = Tiles(BM, bn, BK, stages, 8, 1, 1)
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="wgmma",
        instruction=replace(form, shape=(64, bn, 16)), path=PATH, layout=layout, tiles=tiles, splits=1,
        async_copy=True, smem_bytes=smem, reasons=tuple(reasons),
    )
