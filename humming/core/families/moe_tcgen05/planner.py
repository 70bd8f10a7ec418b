"""Plans of the MoE tcgen05 kernels (Blackwell datacenter prefill): the tcgen05 WnA16 kernel (int4 dequantized into
shared memory, kind::f16, the accumulator in Tensor Memory; humming.core.families.tcgen05) and the tcgen05 W8A8
kernel (8-bit activation codes and weights as stored) over routed rows, with 128-row token tiles, where the experts
get enough rows on average that a tile is mostly full (the tuning knob moe.tcgen05_min_rows). Compiled for their
targets, never run on hardware: they take problems only with HUMMING_UNVERIFIED_KERNELS=1."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.moe_register_a.planner import rows_per_expert
from humming.core.families.moe_wgmma_8bit.planner import a_type_of, expert_layout, is_w4a8
from humming.core.families.moe_wna16.layout import padded_shape
from humming.core.families.moe_wna16.routed_forms import RoutedPlan, threshold_words
from humming.core.families.tcgen05.planner import (
    STATIC_SMEM,
    WNA16_BK,
    WNA16_BQ,
    _need_tmem_pipeline,
    plan_w8a8_tcgen05,
    tcgen05_f16_form,
    tcgen05_smem_bytes,
    wna16_smem_bytes,
)
from humming.core.families.wgmma_dequant.layout import supports, wgmma_wna16_layout
from humming.core.families.wgmma_dequant.planner import scale_rows
from humming.core.plan import Plan, Tiles
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

PATH = "moe-tcgen05-dequant-smem"
BT = 128  # token rows per block: one tcgen05.mma M (cta_group::1); the routing pads each expert's run to it
MIN_ROWS_KNOB = "moe.tcgen05_min_rows"
ROUTED_SMEM = 2 * BT * 4  # the block's slot and row of A per row (static shared memory)


class MoeTcgen05Plan(Plan):
    """A Plan of the MoE tcgen05 kernel (its own kernel name)."""

    @property
    def kernel_name(self) -> str:
        t = self.tiles
        d = self.layout.decode
        return f"hm_moe_tcgen05_{d.kind}{d.bits}_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}_{self.kernel_key}"


def _note(caps, kernel: str) -> str:
    return (f"{kernel} generated and compiled for {caps.target.arch}, not yet validated on hardware: set "
            f"HUMMING_UNVERIFIED_KERNELS=1 to use it from {knobs.value(MIN_ROWS_KNOB, caps)} rows per expert")


def unverified_note(caps) -> str:
    return _note(caps, "MoE tcgen05 kernel (int4 experts dequantized into shared memory, kind::f16, 128-row token "
                       "tiles)")


def _rows_refusal(lowest: float, tokens: int, top_k: int, experts: int) -> str:
    """Why the experts' average rows are too few for the MoE tcgen05 forms' 128-row token tile ("" when they are not)."""
    rows = rows_per_expert(tokens, top_k, experts)
    if rows < lowest:
        return f"{rows:.1f} rows per expert on average, the MoE tcgen05 forms take >= {lowest:g} ({MIN_ROWS_KNOB})"
    return ""


def refusal(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int) -> str:
    """Why this kernel does not take the MoE GEMM ("" when it does)."""
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    if lowest is None:
        return f"the MoE tcgen05 form is off ({MIN_ROWS_KNOB})"
    if getattr(scheme, "act", None):
        return "the MoE tcgen05 kernel takes 16-bit activations"
    why = supports(scheme)
    if why:
        return why
    if not caps.memory.tmem_kb:
        return f"{caps.name} declares no Tensor Memory"
    if tcgen05_f16_form(caps, act) is None:
        return f"{caps.name} declares no tcgen05 kind::f16 {act}"
    why = _rows_refusal(lowest, tokens, top_k, experts)
    if why:
        return why
    try:
        n_pad, _ = padded_shape(n, k)
    except ShapeError as exc:
        return str(exc)
    if n_pad % 128:
        return f"N={n} (padded to {n_pad}) is not a multiple of the 128-channel tile"
    return ""


def plan_moe_tcgen05(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int) -> MoeTcgen05Plan:
    """The plan of an indexed MoE GEMM on the tcgen05 kernel (``tokens`` rows of x, each to ``top_k`` of ``experts``
    weights [N, K]), or UnsupportedOnDevice / ShapeError naming what is missing."""
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    form = tcgen05_f16_form(caps, act)
    if form is None:
        raise UnsupportedOnDevice(f"{caps.name} declares no tcgen05 kind::f16 m128 {act} x {act} -> f32; the MoE tile "
                                  f"kernel runs it")
    _need_tmem_pipeline(caps)
    n_pad, k_pad = padded_shape(n, k)
    layout = wgmma_wna16_layout(scheme, n_pad, k_pad, act)
    if n_pad % 128:
        raise ShapeError(f"the MoE tcgen05 kernel needs N padded to a multiple of 128 (N={n} -> {n_pad})")
    bn = 256 if n_pad % 256 == 0 and 256 in form.n_values else 128
    group = layout.scale_group
    limit = caps.limits.smem_per_block_kb * 1024 - STATIC_SMEM - ROUTED_SMEM
    stages = next((s for s in range(6, 2, -1) if wna16_smem_bytes(bn, s, group) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no MoE tcgen05 tile {BT}x{bn}x{WNA16_BK} with 3 stages fits {caps.name}'s shared "
                                  f"memory")
    if bn > caps.memory.tmem_kb * 1024 // (BT * 4):
        raise UnsupportedOnDevice(f"{caps.name}: {bn} fp32 accumulator columns exceed its Tensor Memory")
    rows = rows_per_expert(tokens, top_k, experts)
    smem = wna16_smem_bytes(bn, stages, group)
    reasons = (
        f"tcgen05 kind::f16 m128nBNk16 {act} x {act} -> f32 declared ({caps.target.arch}): one CTA, both operands "
        f"K-major in 128-byte-swizzled shared memory, accumulator in Tensor Memory",
        f"MoE tcgen05 ({threshold_words(caps, MIN_ROWS_KNOB)}): rows of "
        f"x gathered through the routing's sorted slots by cp.async, the block's expert from the routing, int4 codes "
        f"dequantized into shared memory while the previous stage's MMAs run; weights padded to {n_pad}x{k_pad} once "
        f"when prepared",
        f"token tile {BT}: {tokens} token(s) x top-{top_k} over {experts} experts = {rows:.1f} rows per expert on "
        f"average",
        f"tile {BT}x{bn}x{WNA16_BK}: {stages} cp.async slots (activations, raw codes, {scale_rows(group)} scale "
        f"row(s)), {WNA16_BQ} dequantized weight tiles, {bn} TMEM columns, {smem // 1024} KiB of shared memory",
        "epilogue: tcgen05.ld 32x32b, scales and bias per channel, router weight per row, 16-byte stores of each "
        "row to its slot; no split-K",
    )
    return MoeTcgen05Plan(
        scheme=scheme.name, profile=caps.name, m=tokens, n=n, k=k, act=act, out=act, family="tcgen05",
        instruction=replace(form, shape=(BT, bn, 16)), path=PATH, layout=layout,
        tiles=Tiles(BT, bn, WNA16_BK, stages, 4, 1, 1), splits=1, async_copy=True, smem_bytes=smem, reasons=reasons)


# ---- W8A8 experts: the tcgen05 W8A8 kernel (kind::f8f6f4 e4m3 / kind::i8 s8, weights as stored) over routed rows
W8A8_PATH = "moe-tcgen05-w8a8"
_W8A8_SCALES = ("channel", "tensor")  # weight scale granularities its epilogue applies (activations per token)


def w8a8_unverified_note(caps) -> str:
    return _note(caps, "MoE tcgen05 W8A8 kernel (8-bit codes, 128-row token tiles)")


def w8a8_refusal(problem, caps, measured: bool = False) -> str:
    """Why the MoE tcgen05 W8A8 kernel does not take the MoE GEMM ("" when it does); ``measured``: a measured entry
    chose it (the knob's threshold does not apply)."""
    scheme, tokens, n, k, act, experts, top_k = (problem.scheme, problem.m, problem.n, problem.k, problem.act,
                                                 problem.experts, problem.top_k)
    lowest = knobs.value(MIN_ROWS_KNOB, caps)
    if lowest is None and not measured:
        return f"the MoE tcgen05 forms are off ({MIN_ROWS_KNOB})"
    if not a_type_of(scheme) or is_w4a8(scheme):
        return "the MoE tcgen05 W8A8 kernel takes int8 x int8 or e4m3 x e4m3 experts"
    if scheme.weight_scale.granularity not in _W8A8_SCALES or scheme.act_scale.mode != "dynamic_token":
        return "it takes per-channel or per-tensor weight scales with per-token activation scales"
    why = "" if measured else _rows_refusal(lowest, tokens, top_k, experts)
    if why:
        return why
    try:
        plan_moe_tcgen05_w8a8(caps, scheme, tokens, n, k, act, experts, top_k)
    except (ShapeError, UnsupportedOnDevice) as exc:
        return f"the tcgen05 W8A8 kernel cannot run these experts: {exc}"
    return ""


def plan_moe_tcgen05_w8a8(caps, scheme, tokens: int, n: int, k: int, act: str, experts: int, top_k: int) -> Plan:
    """The plan of an indexed MoE GEMM of W8A8 experts on the tcgen05 W8A8 kernel, or UnsupportedOnDevice /
    ShapeError naming what is missing."""
    if tokens < 0 or experts < 1 or top_k < 1:
        raise ShapeError(f"MoE GEMM: tokens={tokens}, experts={experts}, top_k={top_k}")
    layout = expert_layout(scheme, n, k)
    dense = plan_w8a8_tcgen05(caps, layout, max(tokens * top_k, 1), act, scheme=scheme.name)
    t = dense.tiles
    limit = caps.limits.smem_per_block_kb * 1024 - STATIC_SMEM - ROUTED_SMEM
    stages = next((s for s in range(t.stages, 2, -1) if tcgen05_smem_bytes(t.bn, s) <= limit), None)
    if stages is None:
        raise UnsupportedOnDevice(f"no MoE tcgen05 W8A8 tile {BT}x{t.bn}x128 with 3 stages fits {caps.name}'s "
                                  f"shared memory")
    rows = rows_per_expert(tokens, top_k, experts)
    keep = [r for r in dense.reasons if not r.startswith(("tile ", "no split-K", "tcgen05 kernel generated"))]
    reasons = tuple(keep) + (
        f"MoE tcgen05 W8A8 ({threshold_words(caps, MIN_ROWS_KNOB)}): "
        f"{layout.a_type} activation codes quantized once per token before the gather, rows gathered through the "
        f"routing's sorted slots by cp.async, the block's expert from the routing; weights as stored, padded to "
        f"{layout.n}x{layout.k} once when prepared",
        f"token tile {BT}: {tokens} token(s) x top-{top_k} over {experts} experts = {rows:.1f} rows per expert on "
        f"average",
        f"tile {BT}x{t.bn}x128: {stages} cp.async slots, {t.bn} TMEM columns, "
        f"{tcgen05_smem_bytes(t.bn, stages) // 1024} KiB of shared memory",
        "epilogue: tcgen05.ld 32x32b, per-token scale and router weight per row, scales and bias per channel, 16-byte "
        "stores of each row to its slot; no split-K",
    )
    return RoutedPlan(**{**{f: getattr(dense, f) for f in dense.__dataclass_fields__},
                         "m": tokens, "n": n, "k": k, "path": W8A8_PATH, "reasons": reasons,
                         "tiles": replace(t, stages=stages), "smem_bytes": tcgen05_smem_bytes(t.bn, stages)})
