"""The pieces both kernels of the wide register-A W4A8 form share (the plain one, humming.core.families.register_a8.wide,
and stream-K's, humming.core.families.register_a8.streamk): the form's checks, its constants, the consumers' scales
and held values, and their stage loop (promoted chains, or the direct loop of humming.core.families.register_a8.direct)."""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.common.emit import Template
from humming.core.families.register_a8.cluster import RELEASE as PAIR_RELEASE
from humming.core.families.register_a8.direct import direct_loop
from humming.core.families.register_a8.pieces import (
    HELD_LUTS,
    HELD_ZERO,
    channel_scales,
    group_and_chain,
    to_f32,
    uses_tables,
    widening,
)
from humming.core.families.register_a8.planner import BC, BK, BT, QUARTER_WT, S_BYTES, W_BYTES, WIDE_BT
from humming.core.families.register_a8.wide_loop import (
    RELEASE,
    halves_loop,
    quarter_loop,
    stage_head,
    widened_stage_head,
)
from humming.devices.base import HelperRequest

# the wide form's constants (``chain_doc``: the chains' count and what they share)
_CFG = Template("""constexpr int BT = ${bt}, WT = ${chain}, BC = ${bc}, BK = ${bk}, STAGES = ${stages};   // tokens (per wgmma), channels, k bytes per stage
constexpr int ${chain_doc}
static_assert(BT % WT == 0, "whole chains");
constexpr int THREADS = 256;             // two warpgroups; warpgroup wg owns channels 64 wg .. 64 wg + 63 of the tile
constexpr int BLOCK_THREADS = THREADS + 128;  // and a producer warpgroup (warps 8-11)
constexpr int RASTER = ${raster};             // token tiles per rasterization group (0: launch order)
constexpr int X_BYTES = BT * BK;         // one activation tile: BT rows x 128 bytes (128-byte swizzle)
constexpr int SLAB_BYTES = 4096;         // one 64-channel x 128-k stage of int4 codes (layout_wgmma_rs8)
constexpr int W_BYTES = ${w_bytes}, S_BYTES = ${s_bytes};   // a slot's codes (two slabs) and group scales (fp32)
constexpr int STAGE_TX = ${tx};   // bytes each stage's copies bring""", bc=str(BC), bk=str(BK), w_bytes=str(W_BYTES),
                s_bytes=str(S_BYTES))

# the converter warps' constants (RegisterA8Tiles.widened)
_CONVERTER_CFG = Template("""
constexpr int A_SLOTS = ${slots};   // slots of widened fragments (the converter warps')
constexpr int A_BYTES = THREADS * 64;   // a slot: 64 bytes per consumer lane, k32 step ks at + ks * THREADS * 16
constexpr int CONVERTERS = 96;          // converter threads: the producer warpgroup's warps 1-3""")


@dataclass(frozen=True)
class WideParts:
    request: HelperRequest  # the helpers' request
    chain: int              # tokens per wgmma chain
    per_channel: bool       # per-channel scales (else groups of 128: one a stage)
    cluster: int            # blocks per cluster (0: none)
    slots: int              # slots of the converter warps' fragments (0: the consumers widen)
    direct: bool            # the direct loop (no partials)
    luts: str               # the consumers' held tables (e4m3 "prmt") and zero
    scale_decl: str         # the consumers' per-channel scales, loaded once ("" with group scales)
    scale_copy: str         # the producer's copy of stage kt's group scales ("" per channel)
    partials: str           # the partials' declaration and zeroing
    main_loop: str          # the consumers' stage loop
    cfg_head: str           # the form's constants


def wide_parts(plan, caps) -> WideParts:
    """The wide form's pieces for ``plan`` (ValueError where its tiles ask for a combination not written)."""
    t = plan.tiles
    lay = plan.layout
    per_channel, request, chain = group_and_chain(plan, caps)
    cluster = t.cluster  # blocks of a cluster (adjacent channel tiles, one token tile) take turns multicasting stages
    if cluster and (cluster != 2 or t.streamk or t.bm != WIDE_BT):
        raise ValueError(f"the wide W4A8 form's cluster option is written for pairs without stream-K, not {t}")
    slots = t.widened  # converter warps widen the weights into this many slots of fragments (0: the consumers do)
    if slots and (cluster or t.streamk or plan.pdl or t.bm != WIDE_BT):
        raise ValueError(f"the wide W4A8 form's converter warps are written for 256-token tiles without stream-K, "
                         f"clusters or PDL, not {t}")
    direct = bool(t.direct)  # per channel: no partials (humming.core.families.register_a8.direct)
    if direct and (not per_channel or chain != (BT if t.bm == WIDE_BT else QUARTER_WT) or cluster or slots
                   or t.streamk or plan.pdl):
        raise ValueError(f"the wide W4A8 form's direct accumulation is written for per-channel scales and the plain "
                         f"grid in {BT}-token chains ({QUARTER_WT} in tiles fitted to M; no stream-K, clusters, converter "
                         f"warps or PDL), not {t} (group {lay.group}, chain {chain})")
    segment = bool(t.streamk)  # persistent blocks: stage kt of a segment is the block's stage it0 + kt
    widen = widening(lay, "wq[j >> 2][j & 3]", "    ")
    if per_channel:
        scale_decl, scale_pick = channel_scales("S + n0 + tab")
        scale_copy = ""
        tx = "X_BYTES + W_BYTES"
    else:
        scale_decl = ""
        scale_pick = ("const float sc0 = lds_f32(slane + s * S_BYTES), "
                      "sc1 = lds_f32(slane + s * S_BYTES + 32);  // group kt")
        scale_copy = "bulk_copy_g2s(s0 + s * S_BYTES, S + (size_t)kt * N + n0, S_BYTES, full);  // group kt's scales"
        tx = "X_BYTES + W_BYTES + S_BYTES"
    release = PAIR_RELEASE if cluster else RELEASE  # a pair's consumers release each slot that is refilled, in both
    if direct:
        main_loop = direct_loop(bool(t.stagger), lay.a_type, t.bm // chain, max(t.stagger, 1), lay.widen)
        partials = ""
        chain_doc = ("CHAINS = BT / WT;          // token chains of WT: each accumulating straight into its part of "
                     "facc (or the int32 sums)")
    elif chain == BT:
        if slots:
            raise ValueError("the converter warps are written for the 64-token chains of the wide form")
        main_loop = halves_loop(stage_head(scale_pick, widen, segment), to_f32(lay), bool(t.stagger), segment, release)
        partials = ("  wg_acc_t part[WG_ACC_REGS];\n  #pragma unroll\n"
                    "  for (int i = 0; i < WG_ACC_REGS; ++i) part[i] = 0;\n")
        chain_doc = "HALVES = BT / WT;          // token halves: one m64n128k32 chain each, sharing the widened A fragment"
    else:  # (with converter warps the stage's fragments come from their slot instead of the consumers' widening)
        head = widened_stage_head(scale_pick) if slots else stage_head(scale_pick, widen, segment)
        main_loop = quarter_loop(head, to_f32(lay), t.bm // chain, bool(t.stagger), max(t.stagger, 1), segment, release)
        partials = ("  wg_acc_t pa[WG_ACC_REGS], pb[WG_ACC_REGS];   // two partials: one chain runs while the other's "
                    "is promoted\n  #pragma unroll\n  for (int i = 0; i < WG_ACC_REGS; ++i) { pa[i] = 0; pb[i] = 0; }\n")
        chain_doc = ("CHAINS = BT / WT;          // token quarters: one m64n64k32 chain each, sharing the widened A "
                     "fragment")
    cfg_head = _CFG.fill(bt=t.bm, chain=chain, stages=t.stages, chain_doc=chain_doc, raster=t.raster, tx=tx)
    if slots:
        cfg_head += _CONVERTER_CFG.fill(slots=slots)
    return WideParts(request=request, chain=chain, per_channel=per_channel, cluster=cluster, slots=slots,
                     direct=direct, luts=HELD_LUTS if uses_tables(lay) else HELD_ZERO, scale_decl=scale_decl,
                     scale_copy=scale_copy, partials=partials, main_loop=main_loop, cfg_head=cfg_head)
