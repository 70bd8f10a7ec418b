"""Planning the wgmma W8A8 kernel (e4m3 x e4m3 -> f32, s8 x s8 -> s32) from declared capabilities only:
a wgmma m64nNk32 form for the operand types, cp.async, and the shared-memory limit."""
from __future__ import annotations

from dataclasses import replace

from humming.core.common.wgmma import choose_tile_width, declared_option, require_wgmma
from humming.core.families.wgmma_8bit.tiles import Wgmma8Tiles
from humming.core.plan import _DEFAULT_SMS, Plan
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

BM, BK = 128, 128  # two warpgroups of m64; 128-byte K-major rows (one 128-byte swizzle row per tile row)
_ACC = {"s8": "s32", "e4m3": "f32"}


def wgmma_form(caps, a_type: str):
    """The declared wgmma form with k32 for a_type x a_type and the kernel's accumulator, or None."""
    acc = _ACC.get(a_type)
    if acc is None:
        return None
    forms = [f for f in caps.find_mma(family="wgmma", a_type=a_type, b_type=a_type, acc_type=acc)
             if f.shape[0] == 64 and f.shape[2] == 32]
    return forms[0] if forms else None


def wgmma_smem_bytes(bn: int, stages: int) -> int:
    """Pipeline stages (A and B tiles) plus 1 KiB to round the dynamic shared memory up to 1024 bytes."""
    return stages * (BM * BK + bn * BK) + 1024


TMA_KNOB = "wgmma_8bit.w8a8_tma"  # the warp-specialised TMA kernel for promoted fp8 where the profile declares tma,
# mbarrier and setmaxnreg (false: the lock-step kernel). Measured on the H200 (bench_quantized, promoted e4m3 vs cuBLASLt FP8 row-wise): 8192x8192 M1024 186.5 -> 132.5 us (1.47x), M4096 710.8 ->
# 505.4 (1.47x); 28672x8192 M1024 600.2 -> 416.3 (1.05x), M4096 2593.8 -> 1871.6 (1.00x)
TMA_THREADS = 384  # producer warpgroup + two consumer warpgroups


def tma_smem_bytes(stages: int, bn: int = 128) -> int:
    """Slots of A and B tiles, the FULL and EMPTY mbarriers, and 1 KiB to align the slots to 1024 bytes."""
    return stages * (BM * BK + bn * BK) + 16 * stages + 1024


def _tma_wanted(caps, tma: bool | None, fp8_promoted: bool) -> bool:
    if tma and not fp8_promoted:
        raise ShapeError("the TMA wgmma W8A8 kernel runs promoted fp8 (e4m3 without fast accumulation) only")
    return fp8_promoted and declared_option(
        bool(caps.memory.tma and caps.memory.mbarrier and caps.memory.setmaxnreg), tma, TMA_KNOB, caps,
        f"{caps.name} does not declare tma, mbarrier and setmaxnreg (the TMA kernel)")


def _most_stages(fewest: int, smem_of, limit: int, refusal: str, most: int = 6) -> tuple[int, int]:
    """The most stages (most .. fewest) whose shared memory ``smem_of(stages)`` fits ``limit``, and that size;
    UnsupportedOnDevice(``refusal``) when not even ``fewest`` fit."""
    stages = next((s for s in range(most, fewest - 1, -1) if smem_of(s) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(refusal)
    return stages, smem_of(stages)


def plan_w8a8_wgmma(caps, layout, m: int, act: str, scheme: str = "", tma: bool | None = None) -> Plan:
    """Plan the wgmma W8A8 kernel for ``layout`` (a ``WgmmaW8A8Layout``), or UnsupportedOnDevice / ShapeError
    naming what is missing. ``tma``: the warp-specialised kernel whose producer brings both tiles in by TMA tensor
    copy (promoted fp8 only); None: the tuning knob wgmma_8bit.w8a8_tma."""
    a_type = layout.a_type
    form = wgmma_form(caps, a_type)
    require_wgmma(caps, m, form, f"m64nNk32 {a_type} x {a_type} -> {_ACC.get(a_type, '?')}",
                  "the 8-bit mma.sync kernel runs W8A8 there", "wgmma kernel's pipeline")
    n, k = layout.n, layout.k
    if k % BK:
        raise ShapeError(f"K={k} must be a multiple of {BK} for the wgmma kernel")
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms or _DEFAULT_SMS
    reasons = [f"wgmma m64n{{N}}k32 {a_type} declared ({caps.target.arch}); {a_type} x {a_type} -> {_ACC[a_type]}, "
               f"both operands K-major in shared memory (128-byte swizzle)"]
    block = getattr(layout, "weight_scale", "") == "block"
    promote = a_type == "e4m3" and not getattr(layout, "fast_accum", False)
    bns = [bn for bn in ((128,) if promote or block else (256, 128)) if n % bn == 0 and bn in form.n_values]
    if not bns:
        raise ShapeError(f"N={n} must be a multiple of 128 for the wgmma kernel")
    if block:
        reasons.append("128x128 weight blocks, activations per 128 of K: each stage (one k block) is a partial sum "
                       "started from zero, added into fp32 registers times activation scale (row, k block) x weight "
                       "scale (n block, k block); BN=128 = one n block per tile")
    elif promote:
        reasons.append("e4m3: each 128-deep partial sum is added into fp32 registers (the tensor core's fp8 "
                       "accumulation keeps fewer bits); BN=128 leaves registers for both accumulators")
    elif a_type == "e4m3":
        reasons.append("e4m3 fast accumulation (GemmOptions.fast_accum): partial sums stay in the tensor core's "
                       "accumulator for the whole K")
    bn = choose_tile_width(m, n, BM, sms, bns, reasons)
    if _tma_wanted(caps, tma, (promote or block) and a_type in ("e4m3", "e5m2")):
        stages, smem = _most_stages(2, lambda s: tma_smem_bytes(s, bn), limit,
                                    f"no TMA wgmma tile 128x{bn}x128 with 2 slots fits {caps.name}'s {limit} B")
        tile = (f"tile {BM}x{bn}x{BK}, warp-specialised: one producer warpgroup (its thread 0 issues a TMA "
                f"tensor copy of each operand tile per stage into {stages} slots, FULL/EMPTY mbarriers), two "
                f"consumer warpgroups x m64n{bn}k32 that meet only at the mbarriers, so one promotes while "
                f"the other's wgmmas run; {smem // 1024} KiB of {limit // 1024} KiB shared memory")
        tiles = Wgmma8Tiles(BM, bn, BK, stages, TMA_THREADS // 32, 1, 1, bulk=1)
    else:
        stages, smem = _most_stages(3, lambda s: wgmma_smem_bytes(bn, s), limit,
                                    f"no wgmma tile 128x{bn}x128 with 3 stages fits {caps.name}'s {limit} B of "
                                    "shared memory")
        tile = (f"tile {BM}x{bn}x{BK}: 2 warpgroups x m64n{bn}k32, 4 k32 steps per stage; {stages} stages "
                f"(cp.async, {stages - 2} in flight + 1 stage under wgmma), "
                f"{smem // 1024} KiB of {limit // 1024} KiB shared memory")
        tiles = Wgmma8Tiles(BM, bn, BK, stages, 8, 1, 1)
    reasons[0] = reasons[0].replace("{N}", str(bn))
    reasons += [tile, "no split-K: one K loop per output tile"]
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="wgmma",
        instruction=replace(form, shape=(64, bn, 32)), path="native", layout=layout, tiles=tiles, splits=1, async_copy=True,
        smem_bytes=smem, reasons=tuple(reasons),
    )


def wgmma_w4a8_smem_bytes(stages: int, bn: int = 128) -> int:
    """W4A8: per stage the A tile and the packed 4-bit B rows (BK/2 bytes each); three widened 8-bit B tiles;
    1 KiB to round the dynamic shared memory up to 1024 bytes."""
    return stages * (BM * BK + bn * BK // 2) + 3 * bn * BK + 1024


def wgmma_w4a8_ws_smem_bytes(stages: int, bn: int = 128) -> int:
    """Warp-specialised W4A8: per slot the A tile, the widened B tile and the packed B rows; two mbarriers per
    slot; 1 KiB to round the dynamic shared memory up to 1024 bytes."""
    return stages * (BM * BK + bn * BK + bn * BK // 2 + 16) + 1024


WS_KNOB = "wgmma_8bit.w4a8_warp_specialised"  # false: the lock-step W4A8 kernel instead of the warp-specialised one


def _warp_specialised(caps) -> bool:
    if not knobs.value(WS_KNOB, caps):
        return False
    return bool(caps.memory.mbarrier and caps.memory.setmaxnreg)


W4A8_TMA_KNOB = "wgmma_8bit.w4a8_tma"  # the warp-specialised W4A8 kernel's copies by TMA (false: by cp.async).
# Measured on the H200 (bench_quantized, register-A W4A8 off): the TMA producer variant
# is slower, 8192x8192 M4096 W4A8-FP8 1559 us against 1311 (cp.async producer) and 1070 (the register-A kernel, the
# default from M 128): the widening by one producer warpgroup, not the copies, limits it


def wgmma_w4a8_tma_smem_bytes(stages: int, bn: int = 128) -> int:
    """The warp-specialised W4A8 kernel with TMA copies: its slots and a third mbarrier per slot (LOAD)."""
    return wgmma_w4a8_ws_smem_bytes(stages, bn) + 8 * stages


def _w4a8_tma_wanted(caps, tma: bool | None) -> bool:
    return declared_option(bool(caps.memory.tma and caps.memory.mbarrier), tma, W4A8_TMA_KNOB, caps,
                           f"{caps.name} does not declare tma and mbarrier (the W4A8 kernel's TMA copies)")


def plan_w4a8_wgmma(caps, layout, m: int, act: str, scheme: str = "", ws: bool | None = None,
                    tma: bool | None = None) -> Plan:
    """Plan the wgmma W4A8 kernel for ``layout`` (a ``WgmmaW4A8Layout``): 4-bit weights widened exactly to
    the 8-bit operand type in shared memory, group scales on fp32 sums of the group partials. ``ws`` picks
    the warp-specialised kernel (default: where the profile declares mbarrier and setmaxnreg, unless the tuning knob
    wgmma_8bit.w4a8_warp_specialised is off) or the lock-step one; ``tma`` (warp-specialised only) brings A and the
    packed weights in by TMA tensor copies from one thread instead of every producer thread's cp.async (None: the
    tuning knob wgmma_8bit.w4a8_tma)."""
    a_type = layout.a_type
    form = wgmma_form(caps, a_type)
    require_wgmma(caps, m, form, f"m64nNk32 {a_type} x {a_type} -> {_ACC.get(a_type, '?')}",
                  "the 8-bit mma.sync kernel runs W4A8 there", "wgmma kernel's pipeline")
    n, k, group = layout.n, layout.k, layout.group
    bn = 128
    if k % BK:
        raise ShapeError(f"K={k} must be a multiple of {BK} for the wgmma W4A8 kernel")
    if n % bn or bn not in form.n_values:
        raise ShapeError(f"N={n} must be a multiple of {bn} for the wgmma W4A8 kernel")
    if not (group in (32, 64) or (group % BK == 0 and k % group == 0)):
        raise UnsupportedOnDevice(f"{scheme}: group {group}: the wgmma W4A8 kernel takes groups of 32, 64 or a "
                                  f"multiple of {BK} dividing K")
    limit = caps.limits.smem_per_block_kb * 1024
    if ws is None:
        ws = _warp_specialised(caps)
    src = {"s8": "int4 -> s8 (16 x code; the scales carry 1/16)", "e4m3": f"{layout.weight_format} -> e4m3"}[a_type]
    if tma and not ws:
        raise ShapeError("the W4A8 kernel's TMA copies belong to the warp-specialised kernel (ws)")
    if ws:
        use_tma = _w4a8_tma_wanted(caps, tma)
        smem_of = wgmma_w4a8_tma_smem_bytes if use_tma else wgmma_w4a8_ws_smem_bytes
        stages = _w4a8_stages(caps, limit, smem_of, range(6, 2, -1), "warp-specialised ")
        smem = smem_of(stages, bn)
        copies = ("its thread 0 issues TMA tensor copies of A and of the packed 4-bit weights; the warpgroup waits "
                  "for them and widens" if use_tma else "copies A and the packed 4-bit weights with cp.async and widens")
        how = (f"W4A8, warp-specialised (mbarrier and setmaxnreg declared): a producer warpgroup {copies} them exactly "
               f"({src}) into the slot's swizzled B tile; two consumer warpgroups wait on the slot's mbarrier, "
               f"multiply, release the slot and promote (wgmma_8bit.w4a8_warp_specialised false: the lock-step kernel)")
        tile = (f"2 consumer warpgroups x m64n{bn}k32 + 1 producer warpgroup; {stages} slots ({stages - 2} stages of "
                f"copies ahead of the one being widened)")
        return _plan_w4a8(caps, layout, m, act, scheme, form, stages, smem, 12, how, "", tile, limit,
                          bulk=int(use_tma))  # 384 threads
    stages = _w4a8_stages(caps, limit, wgmma_w4a8_smem_bytes, range(7, 3, -1), "")
    how = (f"W4A8: packed 4-bit weights [N, K/2] copied with cp.async, widened exactly ({src}) by the thread that "
           f"copied them into one of three swizzled B tiles while the tensor core multiplies the previous stage "
           f"(the barrier also sits under the wgmma)")
    tile = (f"2 warpgroups x m64n{bn}k32, 4 k32 steps per stage; {stages} stages (cp.async, {stages - 2} in flight), "
            f"3 widened B tiles")
    return _plan_w4a8(caps, layout, m, act, scheme, form, stages, wgmma_w4a8_smem_bytes(stages, bn), 8, how,
                      " (the tensor core waits more)", tile, limit)


def _w4a8_stages(caps, limit: int, smem_bytes, candidates: range, kind: str) -> int:
    """The most slots (of ``candidates``, best first) whose shared memory fits ``limit``, or UnsupportedOnDevice."""
    stages = next((s for s in candidates if smem_bytes(s, 128) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no {kind}wgmma W4A8 tile 128x128x128 with {candidates[-1]} slots fits "
                                  f"{caps.name}'s {limit} B of shared memory")
    return stages


def _plan_w4a8(caps, layout, m: int, act: str, scheme: str, form, stages: int, smem: int, warps: int, how: str,
               wait_note: str, tile: str, limit: int, bulk: int = 0) -> Plan:
    """The Plan of either W4A8 kernel (``warps`` = 8: lock-step, 12: warp-specialised) and its reasons: the form,
    ``how`` the weights are copied and widened, the group promotion (``wait_note`` for groups below 128), the
    ``tile`` and its shared memory."""
    a_type, n, k, group, bn = layout.a_type, layout.n, layout.k, layout.group, 128
    reasons = [
        f"wgmma m64n{bn}k32 {a_type} declared ({caps.target.arch}); {a_type} x {a_type} -> {_ACC[a_type]}, both "
        f"operands K-major in shared memory (128-byte swizzle)",
        how,
    ]
    if group >= BK:
        reasons.append(f"group {group}: each 128-deep partial is added into fp32 registers times its group scale")
    else:
        reasons.append(f"group {group}: each stage is {BK // group} wgmma groups of {group // 32} k32 step(s), each "
                       f"partial waited and added into fp32 registers times its scale{wait_note}")
    reasons.append(f"tile {BM}x{bn}x{BK}: {tile}, {smem // 1024} KiB of {limit // 1024} KiB shared memory")
    reasons.append("no split-K: one K loop per output tile")
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="wgmma",
        instruction=replace(form, shape=(64, bn, 32)), path="dequant-to-activation", layout=layout,
        tiles=Wgmma8Tiles(BM, bn, BK, stages, warps, 1, 1, bulk=bulk), splits=1, async_copy=True, smem_bytes=smem,
        reasons=tuple(reasons),
    )
