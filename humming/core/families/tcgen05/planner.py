"""Planning the tcgen05 kernels (Blackwell datacenter) from declared capabilities only: W8A8 (e4m3 x e4m3 -> f32 with
kind::f8f6f4, s8 x s8 -> s32 with kind::i8 where a profile declares it) and W4A4 block-scaled (NVFP4 with
kind::mxf4nvf4 scale_vec::4X ue4m3, MXFP4 with kind::mxf4 scale_vec::2X ue8m0; e2m1 x e2m1 -> f32).

The kernels are compiled for the profile's target (sm_100a, sm_103a, sm_107a, sm_110a, family targets) but have never
run on hardware: ``humming.plan`` returns its plan with a reason saying so, and the runtime selects it only with
HUMMING_UNVERIFIED_KERNELS=1 (``humming.core.common.paths.runnable_path``)."""
from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import replace

from humming.core.common.paths import UNVERIFIED_ENV, unverified_enabled
from humming.core.common.paths import unverified_note as paths_unverified_note
from humming.core.families.mma_blockscaled.layout import TC_STAGE_K, Tcgen05BlockScaledLayout
from humming.core.families.mma_blockscaled.planner import FORMS, BlockScaleDict
from humming.core.plan import _DEFAULT_SMS, Plan, Tiles
from humming.errors import ShapeError, UnsupportedOnDevice

BM, BK = 128, 128  # one tcgen05.mma M=128 (cta_group::1); 128-byte K-major rows (one swizzle row per tile row)
# operand type -> (tcgen05 kind, accumulator)
KINDS = {"e4m3": ("f8f6f4", "f32"), "s8": ("i8", "s32")}
STATIC_SMEM = 1024  # mbarriers and the TMEM address slot; ptxas reports 1024 bytes of static smem on sm_100a

__all__ = ["KINDS", "UNVERIFIED_ENV", "WNA16_PATH", "Tcgen05BlockScaledPlan", "Tcgen05WnA16Plan", "bs_spec",
           "plan_wna16_tcgen05", "tcgen05_f16_form", "wna16_unverified_note", "plan_blockscaled_tcgen05", "plan_w8a8_tcgen05",
           "tcgen05_bs_form", "tcgen05_bs_smem_bytes", "tcgen05_bs_tmem_cols", "tcgen05_form", "tcgen05_generated",
           "tcgen05_kernel", "tcgen05_smem_bytes", "unverified_enabled", "unverified_note"]


def unverified_note(caps) -> str:
    return paths_unverified_note(caps, "tcgen05")


def tcgen05_form(caps, a_type: str):
    """The declared dense tcgen05 form (M=128) for a_type x a_type with the kernel's accumulator, or None."""
    if a_type not in KINDS:
        return None
    kind, acc = KINDS[a_type]
    forms = [f for f in caps.find_mma(family="tcgen05", kind=kind, a_type=a_type, b_type=a_type, acc_type=acc)
             if f.shape[0] == 128 and f.shape[2] == 32 and not f.scale_format]
    return forms[0] if forms else None


def tcgen05_kernel(choice, scheme, caps=None) -> str | None:
    """Which generated tcgen05 kernel executes the path a profile prefers: "w8a8" (tcgen05 native, both operands 8-bit
    as stored (e4m3/s8), per-channel or per-tensor weight scales, per-token or per-tensor activation scales),
    "blockscaled" (tcgen05 native block-scaled e2m1 x e2m1: the NVFP4 / MXFP4 W4A4 recipes), "w4a8" (the tcgen05
    e2m1 -> e4m3 path of MXFP4 weights x FP8 activations, run as kind::mxf8f6f4 e4m3 x e2m1 with the weights' ue8m0
    scales in the MMA; needs that form declared when ``caps`` is given), or None."""
    ins = choice.instruction
    if choice.family != "tcgen05":
        return None
    if (choice.path == "dequant-to-activation" and choice.a_type == "e4m3" and scheme.weight == "e2m1"
            and scheme.act == "e4m3" and not scheme.zero_point and scheme.weight_scale.granularity == "group"
            and scheme.weight_scale.group_size == 32 and scheme.weight_scale.format == "ue8m0"
            and scheme.act_scale.mode in ("dynamic_token", "static_tensor")):
        return "w4a8" if caps is None or tcgen05_bs_form(caps, "mxfp4", "e4m3") is not None else None
    if choice.path != "native":
        return None
    if getattr(ins, "scale_format", None):
        from humming.core.families.mma_blockscaled.layout import recipe_of
        from humming.errors import UnsupportedOnDevice

        if choice.a_type != "e2m1" or choice.b_type != "e2m1" or ins.kind not in ("mxf4", "mxf4nvf4"):
            return None
        try:
            recipe_of(scheme)
        except UnsupportedOnDevice:
            return None
        return "blockscaled"
    if (choice.a_type == choice.b_type and choice.a_type in KINDS and ins.kind == KINDS[choice.a_type][0]
            and not scheme.zero_point and scheme.weight in ("int8", "e4m3")
            and scheme.weight_scale.granularity in ("channel", "tensor")
            and scheme.act_scale.mode in ("dynamic_token", "static_tensor")):
        return "w8a8"
    return None


def tcgen05_generated(choice, scheme, caps=None) -> bool:
    """True when the path a profile prefers is executed by a generated tcgen05 kernel (``tcgen05_kernel``)."""
    return tcgen05_kernel(choice, scheme, caps) is not None


def tcgen05_smem_bytes(bn: int, stages: int) -> int:
    """Pipeline stages (A and B tiles) plus 1 KiB to round the dynamic shared memory up to 1024 bytes."""
    return stages * (BM * BK + bn * BK) + 1024


# ---- checks and the tile width shared by the three tcgen05 planners (W8A8, block-scaled, WnA16) -------------------
def _check_m_act(m: int, act: str, role: str = "output") -> None:
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    if act not in ("f16", "bf16"):
        raise ShapeError(f"the {role} type must be f16 or bf16, got {act}")


def _need_tmem_pipeline(caps) -> None:
    if not caps.memory.cp_async or not caps.memory.mbarrier or not caps.memory.tmem_kb:
        raise UnsupportedOnDevice(f"{caps.name}: the tcgen05 kernel needs cp.async, mbarrier and Tensor Memory")


def _tile_widths(form, n: int) -> list[int]:
    """The tile N of 256 and 128 (widest first) that divide N and that the form declares."""
    return [bn for bn in (256, 128) if n % bn == 0 and bn in form.n_values]


def _tile_width(caps, bns: list[int], m: int, n: int, reasons: list) -> int:
    """The first of ``bns``, or 128 where 128x256 tiles would leave most SMs idle; appends the reason when there is
    a choice."""
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
    return bn


def plan_w8a8_tcgen05(caps, layout, m: int, act: str, scheme: str = "") -> Plan:
    """Plan the tcgen05 W8A8 kernel for ``layout`` (a ``WgmmaW8A8Layout``: weights as stored, [N, K] bytes), or
    UnsupportedOnDevice / ShapeError naming what is missing."""
    _check_m_act(m, act)
    a_type = layout.a_type
    form = tcgen05_form(caps, a_type)
    if form is None:
        kind = KINDS.get(a_type, ("?", "?"))[0]
        have = sorted({i.kind for i in caps.find_mma(family="tcgen05")})
        raise UnsupportedOnDevice(
            f"{caps.name} declares no tcgen05 kind::{kind} m128 {a_type} x {a_type} (declared tcgen05 kinds: "
            f"{', '.join(have) or 'none'}); the 8-bit mma.sync kernel runs W8A8 there")
    _need_tmem_pipeline(caps)
    kind, acc = KINDS[a_type]
    n, k = layout.n, layout.k
    if k % BK:
        raise ShapeError(f"K={k} must be a multiple of {BK} for the tcgen05 kernel")
    bns = _tile_widths(form, n)
    if not bns:
        raise ShapeError(f"N={n} must be a multiple of 128 for the tcgen05 kernel")
    reasons = [f"tcgen05 kind::{kind} m128nBNk32 {a_type} x {a_type} -> {acc} declared ({caps.target.arch}); one CTA "
               f"(cta_group::1), both operands K-major in 128-byte-swizzled shared memory, accumulator in Tensor Memory"]
    bn = _tile_width(caps, bns, m, n, reasons)
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
    tiles = Tiles(BM, bn, BK, stages, 4, 1, 1)
    return Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="tcgen05",
        instruction=replace(form, shape=(128, bn, 32)), path="native", layout=layout, tiles=tiles, splits=1,
        async_copy=True, smem_bytes=tcgen05_smem_bytes(bn, stages), reasons=tuple(reasons),
    )


# ---- block-scaled: W4A4 (NVFP4 kind::mxf4nvf4 scale_vec::4X ue4m3, MXFP4 kind::mxf4 scale_vec::2X ue8m0) and W4A8
# MXFP4 x FP8 (kind::mxf8f6f4 scale_vec::1X ue8m0: e4m3 activations with unit block scales x e2m1 weights) ------------
BS_BK = TC_STAGE_K  # W4A4: e2m1 elements per stage (128 bytes of codes per tile row: one 128-byte swizzle row)
BS_MMA_K = 64  # e2m1 elements per tcgen05.mma of the mxf4 kinds (256 bits of A)


def bs_spec(layout: Tcgen05BlockScaledLayout) -> tuple[str, str, str, str, int, int]:
    """(kind, a_type, b_type, scale format, scale_vec, K per MMA) of a layout's tcgen05 block-scaled form."""
    kind, elem, fmt, vec = FORMS[layout.recipe]
    if layout.a_type == "e2m1":
        return kind, elem, elem, fmt, vec, BS_MMA_K
    if (layout.a_type, layout.recipe) == ("e4m3", "mxfp4"):
        return "mxf8f6f4", "e4m3", "e2m1", "ue8m0", 1, 32
    raise ValueError(f"no tcgen05 block-scaled form for {layout.a_type} x {layout.recipe}")


def tcgen05_bs_form(caps, recipe: str, a_type: str = "e2m1"):
    """The declared block-scaled tcgen05 form (M=128) of a recipe with a_type activations, or None."""
    try:
        kind, a, b, fmt, vec, mma_k = bs_spec(Tcgen05BlockScaledLayout(recipe, 128, 256, a_type=a_type))
    except ValueError:
        return None
    for ins in caps.find_mma(family="tcgen05", kind=kind, a_type=a, b_type=b):
        if ins.scale_format == fmt and vec in ins.scale_vec and ins.shape[0] == 128 and ins.shape[2] == mma_k:
            return ins
    return None


def _bs_cols(bn: int, layout: Tcgen05BlockScaledLayout) -> tuple[int, int]:
    """TMEM columns of one stage's scale factors: (SF_A, SF_B) = (4, BN / 32) per 32-bit scale word of a row; W4A8
    has no per-stage SF_A (one constant block of unit scales, 4 columns, for the whole K)."""
    w = layout.words_per_stage
    return (4 * w if layout.a_type == "e2m1" else 0), bn // 32 * w


def tcgen05_bs_tmem_cols(bn: int, stages: int, layout: Tcgen05BlockScaledLayout) -> int:
    """Columns to allocate: the fp32 accumulator (BN), W4A8's unit SF_A (4), every stage's scale factors; a power of
    two >= 32."""
    sfa, sfb = _bs_cols(bn, layout)
    need = bn + (4 if layout.a_type != "e2m1" else 0) + stages * (sfa + sfb)
    return max(32, 1 << (need - 1).bit_length())


def tcgen05_bs_stage_bytes(bn: int, layout: Tcgen05BlockScaledLayout) -> int:
    """A and B code tiles (128-byte rows), then the stage's scale blocks (512 bytes per word: SF_A, then BN/128 x SF_B),
    rounded up to 1024 bytes (the swizzle period)."""
    w = layout.words_per_stage
    sa = w * 512 if layout.a_type == "e2m1" else 0
    return -(-(BM * 128 + bn * 128 + sa + bn // 128 * w * 512) // 1024) * 1024


def tcgen05_bs_smem_bytes(bn: int, stages: int, layout: Tcgen05BlockScaledLayout) -> int:
    """The stages, W4A8's block of unit activation scales (512 bytes), 1 KiB to round up to 1024 bytes."""
    return stages * tcgen05_bs_stage_bytes(bn, layout) + (512 if layout.a_type != "e2m1" else 0) + 1024


@dataclasses.dataclass(frozen=True)
class Tcgen05BlockScaledPlan(BlockScaleDict, Plan):
    """A Plan of the tcgen05 block-scaled kernel (name, key and summary do not depend on a WnA16 decode)."""

    @property
    def scale_vec(self) -> int:
        return bs_spec(self.layout)[4]

    @property
    def kernel_key(self) -> str:
        ins = self.instruction
        parts = (self.family, self.path, tuple(ins.shape), ins.kind, ins.a_type, ins.b_type, ins.scale_format,
                 self.scale_vec, self.layout.recipe, self.act, self.tiles.key_text(), self.async_copy)
        return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]

    @property
    def kernel_name(self) -> str:
        t = self.tiles
        w = "w4a4" if self.layout.a_type == "e2m1" else "w4a8"
        return f"hm_{w}_{self.layout.recipe}_tcgen05_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}_{self.kernel_key}"

    def summary(self) -> str:
        t = self.tiles
        ins = self.instruction
        return (f"{self.scheme} M={self.m} N={self.n} K={self.k} on {self.profile}: tcgen05 m128n{t.bn}k{ins.shape[2]} "
                f"kind::{ins.kind}.block_scale.scale_vec::{self.scale_vec}X {ins.a_type}x{ins.b_type}->f32 "
                f"({ins.scale_format} per {self.layout.vec}), {self.path}, tile {t.bm}x{t.bn}x{t.bk}, {t.stages} stages, "
                f"{t.threads} threads, TMEM {tcgen05_bs_tmem_cols(t.bn, t.stages, self.layout)} columns, "
                f"smem {self.smem_bytes // 1024} KiB")


def plan_blockscaled_tcgen05(caps, layout: Tcgen05BlockScaledLayout, m: int, act: str, choice=None,
                             scheme: str = "") -> Tcgen05BlockScaledPlan:
    """Plan C[M, N] = A[M, K] @ W[N, K]^T with e2m1 weights and block scales multiplied by the declared block-scaled
    tcgen05.mma (W4A4: e2m1 activations with their block scales; W4A8: e4m3 activations, unit block scales in the
    MMA and their per-token/tensor scales in the epilogue), or UnsupportedOnDevice / ShapeError naming what is
    missing. ``choice`` (a paths.PathChoice) contributes its reasons."""
    _check_m_act(m, act)
    kind, a_type, b_type, fmt, vec, mma_k = bs_spec(layout)
    form = tcgen05_bs_form(caps, layout.recipe, layout.a_type)
    if form is None:
        have = sorted({i.kind for i in caps.find_mma(family="tcgen05")})
        raise UnsupportedOnDevice(
            f"{caps.name} declares no tcgen05 kind::{kind}.block_scale.scale_vec::{vec}X m128 {a_type} x {b_type} with "
            f"{fmt} scales (declared tcgen05 kinds: {', '.join(have) or 'none'}); {scheme or layout.recipe} runs another "
            f"path")
    _need_tmem_pipeline(caps)
    n, k, bk = layout.n, layout.k, layout.stage_k
    if n % 128 or k % bk:
        raise ShapeError(f"the tcgen05 block-scaled kernel needs N % 128 == 0 and K % {bk} == 0 (N={n}, K={k})")
    reasons = list(getattr(choice, "reasons", ()) or ())
    if layout.a_type == "e2m1":
        reasons.append(f"native: tcgen05 kind::{kind}.block_scale.scale_vec::{vec}X m128nBNk{mma_k} {a_type} x {b_type} "
                       f"-> f32 declared ({caps.target.arch}; {fmt} scale per {layout.vec} elements of K); one CTA "
                       f"(cta_group::1), packed codes K-major in 128-byte-swizzled shared memory, block scales copied to "
                       f"Tensor Memory (tcgen05.cp 32x128b.warpx4), accumulator in Tensor Memory, global scales in the "
                       f"fp32 epilogue")
    else:
        reasons.append(f"instead of widening the weights: tcgen05 kind::{kind}.block_scale.scale_vec::{vec}X m128nBNk{mma_k} "
                       f"{a_type} x {b_type} -> f32 declared ({caps.target.arch}): the weights' {fmt} scales per "
                       f"{layout.vec} multiply inside the MMA (exact), the activations get unit block scales there and "
                       f"their per-token/tensor scales in the fp32 epilogue; e2m1 codes copied into the padded 8-bit "
                       f"layout (16 codes in 16 bytes) of shared memory, scales to Tensor Memory by tcgen05.cp")
    bns = _tile_widths(form, n)
    if not bns:
        raise ShapeError(f"N={n}: no declared tcgen05 N of 128 or 256 divides it")
    bn = _tile_width(caps, bns, m, n, reasons)
    limit = caps.limits.smem_per_block_kb * 1024 - STATIC_SMEM
    tmem_limit = caps.memory.tmem_kb * 1024 // (128 * 4)  # 32-bit columns of 128 lanes
    stages = next((s for s in range(6, 1, -1) if tcgen05_bs_smem_bytes(bn, s, layout) <= limit
                   and tcgen05_bs_tmem_cols(bn, s, layout) <= tmem_limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no tcgen05 block-scaled tile 128x{bn}x{bk} with 2 stages fits {caps.name}'s "
                                  f"shared or Tensor Memory")
    sfa, sfb = _bs_cols(bn, layout)
    reasons.append(f"tile {BM}x{bn}x{bk}: per stage thread 0 copies the scale factors to Tensor Memory "
                   f"({sfa} + {sfb} columns per stage slot) and issues 4 tcgen05.mma k{mma_k} (scale IDs per step), "
                   f"{stages} stages (cp.async {stages - 1} ahead; a slot's shared and Tensor Memory are refilled once "
                   f"the mbarrier of its tcgen05.commit completes), {tcgen05_bs_tmem_cols(bn, stages, layout)} TMEM "
                   f"columns, {tcgen05_bs_smem_bytes(bn, stages, layout) // 1024} KiB of shared memory")
    reasons.append("no split-K: one K loop per output tile; epilogue tcgen05.ld 32x32b (warp w reads rows 32w..32w+31)")
    if not unverified_enabled():
        reasons.append(unverified_note(caps))
    tiles = Tiles(BM, bn, bk, stages, 4, 1, 1)
    return Tcgen05BlockScaledPlan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="tcgen05",
        instruction=replace(form, shape=(128, bn, mma_k)), path="native", layout=layout, tiles=tiles, splits=1,
        async_copy=True,
        smem_bytes=tcgen05_bs_smem_bytes(bn, stages, layout), reasons=tuple(reasons),
    )


# ---- WnA16: 16-bit activations x int4 weights dequantized into shared memory, kind::f16 --------------------------
WNA16_PATH = "tcgen05-dequant-smem"
WNA16_BK = 64  # 16-bit values per stage: one 128-byte swizzle row per tile row
WNA16_BQ = 2  # dequantized B tiles: written for stage s + 1 while the MMAs of stage s read the other
WNA16_MIN_M = 128  # one full 128-row tile (below it the mma.sync kernels with split-K fill the GPU better)


def tcgen05_f16_form(caps, act: str):
    """The declared tcgen05 kind::f16 form (M=128, K=16) for act x act -> f32, or None."""
    forms = [f for f in caps.find_mma(family="tcgen05", kind="f16", a_type=act, b_type=act, acc_type="f32")
             if f.shape[0] == 128 and f.shape[2] == 16]
    return forms[0] if forms else None


def wna16_smem_bytes(bn: int, stages: int, group: int) -> int:
    """WNA16_BQ dequantized B tiles (bn rows x 128 B), the cp.async slots (those of the wgmma WnA16 kernel: A tile,
    raw codes, scale rows) and 1 KiB to align to 1024 bytes."""
    from humming.core.families.wgmma_dequant.planner import stage_bytes

    return WNA16_BQ * bn * WNA16_BK * 2 + stages * stage_bytes(bn, group) + 1024


@dataclasses.dataclass(frozen=True)
class Tcgen05WnA16Plan(Plan):
    """A Plan of the tcgen05 WnA16 kernel (its own kernel name; key and summary as the WnA16 plans)."""

    @property
    def kernel_name(self) -> str:
        t = self.tiles
        d = self.layout.decode
        return f"hm_wna16_tcgen05_{d.kind}{d.bits}_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}_{self.kernel_key}"


def wna16_unverified_note(caps) -> str:
    return (f"tcgen05 WnA16 kernel (int4 dequantized into shared memory, kind::f16) generated and compiled for "
            f"{caps.target.arch}, not yet validated on hardware: set {UNVERIFIED_ENV}=1 to use it at M >= {WNA16_MIN_M}")


def plan_wna16_tcgen05(caps, layout, m: int, act: str, scheme: str = "") -> Tcgen05WnA16Plan:
    """Plan the tcgen05 WnA16 kernel for ``layout`` (a ``WgmmaWnA16Layout``: signed int4 in 64x64 blocks, the wgmma
    WnA16 kernel's prepared weights), or UnsupportedOnDevice / ShapeError naming what is missing."""
    from humming.core.families.wgmma_dequant.planner import scale_rows

    _check_m_act(m, act, "activation")
    form = tcgen05_f16_form(caps, act)
    if form is None:
        have = sorted({i.kind for i in caps.find_mma(family="tcgen05")})
        raise UnsupportedOnDevice(f"{caps.name} declares no tcgen05 kind::f16 m128 {act} x {act} -> f32 (declared "
                                  f"tcgen05 kinds: {', '.join(have) or 'none'}); the mma.sync kernels run WnA16 there")
    _need_tmem_pipeline(caps)
    d = layout.decode
    if (d.kind, d.bits, d.container, d.int_path) != ("int", 4, 4, "magic") or layout.zero_group:
        raise UnsupportedOnDevice(f"{scheme or 'this scheme'}: the tcgen05 WnA16 kernel decodes signed int4 with the "
                                  f"magic number only (no zero points)")
    n, k = layout.n, layout.k
    if n % 128 or k % WNA16_BK:
        raise ShapeError(f"the tcgen05 WnA16 kernel needs N % 128 == 0 and K % {WNA16_BK} == 0 (N={n}, K={k})")
    group = layout.scale_group
    reasons = [f"tcgen05 kind::f16 m128nBNk16 {act} x {act} -> f32 declared ({caps.target.arch}): one CTA "
               f"(cta_group::1), both operands K-major in 128-byte-swizzled shared memory, accumulator in Tensor Memory",
               f"path {WNA16_PATH}: int4 codes dequantized to {act} into shared memory by every thread (magic number "
               f"{d.magic_bits:#06x} | code, minus {-layout.zero_const:g} exactly, "
               + (f"times the group scale of {group}" if group else "scales in the fp32 epilogue")
               + ") while the MMAs of the previous stage run"]
    bn = _tile_width(caps, _tile_widths(form, n), m, n, reasons)
    limit = caps.limits.smem_per_block_kb * 1024 - STATIC_SMEM
    stages = next((s for s in range(6, 2, -1) if wna16_smem_bytes(bn, s, group) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no tcgen05 WnA16 tile 128x{bn}x{WNA16_BK} with 3 stages fits {caps.name}'s shared "
                                  f"memory")
    if bn > caps.memory.tmem_kb * 1024 // (128 * 4):
        raise UnsupportedOnDevice(f"{caps.name}: {bn} fp32 accumulator columns exceed its Tensor Memory")
    reasons.append(f"tile {BM}x{bn}x{WNA16_BK}: 4 tcgen05.mma k16 per stage issued by one thread, {stages} cp.async "
                   f"slots (activations, raw codes, {scale_rows(group)} scale row(s); {stages - 1} ahead), {WNA16_BQ} "
                   f"dequantized weight tiles (a slot and a tile are rewritten once the mbarrier of the tcgen05.commit "
                   f"of the MMAs that read them completes), {bn} TMEM columns, "
                   f"{wna16_smem_bytes(bn, stages, group) // 1024} KiB of shared memory")
    reasons.append("no split-K: one K loop per output tile; epilogue tcgen05.ld 32x32b (warp w reads rows 32w..32w+31)")
    if not unverified_enabled():
        reasons.append(wna16_unverified_note(caps))
    tiles = Tiles(BM, bn, WNA16_BK, stages, 4, 1, 1)
    return Tcgen05WnA16Plan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="tcgen05",
        instruction=replace(form, shape=(128, bn, 16)), path=WNA16_PATH, layout=layout, tiles=tiles, splits=1,
        async_copy=True, smem_bytes=wna16_smem_bytes(bn, stages, group), reasons=tuple(reasons),
    )
