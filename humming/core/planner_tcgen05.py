"""Planning the tcgen05 W8A8 kernel (Blackwell datacenter: e4m3 x e4m3 -> f32 with kind::f8f6f4, s8 x s8 -> s32
with kind::i8 where a profile declares it) from declared capabilities only.

The kernel is compiled for the profile's target (sm_100a, sm_103a, sm_107a, sm_110a, family targets) but has never
run on hardware: ``humming.plan`` returns its plan with a reason saying so, and the runtime selects it only with
HUMMING_UNVERIFIED_KERNELS=1 (``humming.core.paths.runnable_path``)."""
from __future__ import annotations

import math
from dataclasses import replace

from humming.core.planner import _DEFAULT_SMS, Plan, TileConfig
from humming.core.planner_blockscaled import UNVERIFIED_ENV, unverified_enabled
from humming.errors import ShapeError, UnsupportedOnDevice

BM, BK = 128, 128  # one tcgen05.mma M=128 (cta_group::1); 128-byte K-major rows (one swizzle row per tile row)
# operand type -> (tcgen05 kind, accumulator)
KINDS = {"e4m3": ("f8f6f4", "f32"), "s8": ("i8", "s32")}
STATIC_SMEM = 1024  # mbarriers and the TMEM address slot; ptxas reports 1024 bytes of static smem on sm_100a

__all__ = ["KINDS", "UNVERIFIED_ENV", "plan_w8a8_tcgen05", "tcgen05_form", "tcgen05_generated",
           "tcgen05_smem_bytes", "unverified_enabled", "unverified_note"]


def unverified_note(caps) -> str:
    return (f"tcgen05 kernel generated and compiled for {caps.target.arch}, not yet validated on hardware: "
            f"set {UNVERIFIED_ENV}=1 to use it")


def tcgen05_form(caps, a_type: str):
    """The declared dense tcgen05 form (M=128) for a_type x a_type with the kernel's accumulator, or None."""
    if a_type not in KINDS:
        return None
    kind, acc = KINDS[a_type]
    forms = [f for f in caps.find_mma(family="tcgen05", kind=kind, a_type=a_type, b_type=a_type, acc_type=acc)
             if f.shape[0] == 128 and f.shape[2] == 32 and not f.scale_format]
    return forms[0] if forms else None


def tcgen05_generated(choice, scheme) -> bool:
    """True when the path a profile prefers is one the tcgen05 W8A8 kernel executes: tcgen05 native, both operands
    8-bit as stored (e4m3/s8), per-channel or per-tensor weight scales, per-token or per-tensor activation scales."""
    ins = choice.instruction
    return (choice.family == "tcgen05" and choice.path == "native" and not getattr(ins, "scale_format", None)
            and choice.a_type == choice.b_type and choice.a_type in KINDS and ins.kind == KINDS[choice.a_type][0]
            and not scheme.zero_point and scheme.weight in ("int8", "e4m3")
            and scheme.weight_scale.granularity in ("channel", "tensor")
            and scheme.act_scale.mode in ("dynamic_token", "static_tensor"))


def tcgen05_smem_bytes(bn: int, stages: int) -> int:
    """Pipeline stages (A and B tiles) plus 1 KiB to round the dynamic shared memory up to 1024 bytes."""
    return stages * (BM * BK + bn * BK) + 1024


def plan_w8a8_tcgen05(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """Plan the tcgen05 W8A8 kernel for ``layout`` (a ``WgmmaW8A8Layout``: weights as stored, [N, K] bytes), or
    UnsupportedOnDevice / ShapeError naming what is missing."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    if act not in ("f16", "bf16"):
        raise ShapeError(f"the output type must be f16 or bf16, got {act}")
    a_type = layout.a_type
    form = tcgen05_form(caps, a_type)
    if form is None:
        kind = KINDS.get(a_type, ("?", "?"))[0]
        have = sorted({i.kind for i in caps.find_mma(family="tcgen05")})
        raise UnsupportedOnDevice(
            f"{caps.name} declares no tcgen05 kind::{kind} m128 {a_type} x {a_type} (declared tcgen05 kinds: "
            f"{', '.join(have) or 'none'}); the 8-bit mma.sync kernel runs W8A8 there")
    if not caps.memory.cp_async or not caps.memory.mbarrier or not caps.memory.tmem_kb:
        raise UnsupportedOnDevice(f"{caps.name}: the tcgen05 kernel needs cp.async, mbarrier and Tensor Memory")
    kind, acc = KINDS[a_type]
    n, k = layout.n, layout.k
    if k % BK:
        raise ShapeError(f"K={k} must be a multiple of {BK} for the tcgen05 kernel")
    bns = [bn for bn in (256, 128) if n % bn == 0 and bn in form.n_values]
    if not bns:
        raise ShapeError(f"N={n} must be a multiple of 128 for the tcgen05 kernel")
    reasons = [f"tcgen05 kind::{kind} m128nBNk32 {a_type} x {a_type} -> {acc} declared ({caps.target.arch}); one CTA "
               f"(cta_group::1), both operands K-major in 128-byte-swizzled shared memory, accumulator in Tensor Memory"]
    sms = caps.limits.sms or _DEFAULT_SMS
    bn = bns[0]
    if len(bns) > 1:
        def waves(b: int) -> float:  # fraction of the launched SM slots that hold a tile
            tiles = math.ceil(m / BM) * (n // b)
            return tiles / (math.ceil(tiles / sms) * sms)

        if waves(128) > 1.25 * waves(256):
            bn = 128
            reasons.append(f"BN=128: {math.ceil(m / BM) * (n // 256)} tiles of 128x256 would leave most of {sms} SMs idle")
        else:
            reasons.append(f"BN=256: the widest cta_group::1 N; {math.ceil(m / BM) * (n // 256)} tiles on {sms} SMs")
    limit = caps.limits.smem_per_block_kb * 1024 - STATIC_SMEM
    stages = next((s for s in range(6, 2, -1) if tcgen05_smem_bytes(bn, s) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no tcgen05 tile 128x{bn}x128 with 3 stages fits {caps.name}'s shared memory")
    if bn > caps.memory.tmem_kb * 1024 // (128 * 4):
        raise UnsupportedOnDevice(f"{caps.name}: {bn} fp32 accumulator columns exceed its Tensor Memory")
    reasons.append(f"tile {BM}x{bn}x{BK}: 4 tcgen05.mma k32 per stage issued by one thread, {stages} stages (cp.async "
                   f"{stages - 1} ahead; a slot is refilled once the mbarrier of its tcgen05.commit completes), "
                   f"{bn} TMEM columns, {tcgen05_smem_bytes(bn, stages) // 1024} KiB of shared memory")
    if a_type == "e4m3":
        reasons.append("e4m3 partial sums stay in the fp32 Tensor Memory accumulator for the whole K (no promotion "
                       "through registers; the tensor core's fp8 accumulation width is not verified here)")
    reasons.append("no split-K: one K loop per output tile; epilogue tcgen05.ld 32x32b (warp w reads rows 32w..32w+31)")
    if not unverified_enabled():
        reasons.append(unverified_note(caps))
    tiles = TileConfig(BM, bn, BK, stages, 4, 1, 1)
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="tcgen05",
        instruction=replace(form, shape=(128, bn, 32)), path="native", layout=layout, tiles=tiles, splits=1,
        async_copy=True, smem_bytes=tcgen05_smem_bytes(bn, stages), reasons=tuple(reasons),
    )
