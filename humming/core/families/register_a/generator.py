"""Generates the register-A wgmma WnA16 kernel (sm_90a; from M 513 by default, the tuning knob register_a.min_m): the
stream kernel's idea at prefill sizes. Each block computes C^T = W x^T for 128 output channels x BT tokens (BT = 128
or 256, fitted to M in multiples of 16); the small-M form, one warpgroup, 64 channels x 16..128 tokens with K split
over the grid's z:

  * A = weights, from registers: warp w of warpgroup wg supplies rows 16w .. 16w+15 of the warpgroup's 64 rows =
    channels n0 + 64 wg + 16 w + {g, g + 8} (g = lane / 4) in the m16n8k16 A-fragment layout (wgmma RS form). Those
    are exactly the pairs (n8 tiles 2w and 2w + 1, r = 0/1) of the mma.sync atom layout (humming.core.common.layout): for the
    64 x 64 atom (slab n0/64 + wg, k atom kt), in the tile-major order that profiles with this kernel get, a lane's
    chunk tt (16 bytes) holds 16-channel tile tt, word ks = k16 step ks, pair J = 2h + r of that word = register
    a[r * 2 + h]. So the lane loads chunk w with one 16-byte load (each warp its own 512 contiguous bytes; in the
    step-major order, word w of each of the four chunks: four 4-byte loads, 2.4-4.8% slower at M 16-256 on the
    H200), PF atoms ahead in a register ring, and decodes a[ks][0..3] with the helpers
    of the mma.sync kernels (dq_raw: magic number | code, + -(magic + zero), x scale, in the activation type). The
    scale/zero tables ([rows][N/64][8 (g)][8 (n8 tile)]) give the lane its two channels' values in one 4-byte word
    (n8 tiles 2w, 2w + 1), once per atom (groups are multiples of 64). (weights)
  * B = activations: BT token rows x 64 k (128 bytes), copied with cp.async or TMA into 128-byte-swizzled K-major
    shared memory (the layout of the other wgmma kernels' tiles; rows past M zero-filled), STAGES slots, read through
    a matrix descriptor (+32 bytes per k16 step). (activations)

The main loop (stage_loop) keeps LOOKAHEAD = STAGES - 2 activation stages in flight and is unrolled by U = 2 R
stages so that ring slots are constants. The epilogue (epilogue) scales, stages and copies out the tile. The
parameter list is that of the mma.sync tile kernel (WS and CNT hold split-K partials and counters where a form splits
K; k_per_split is the small form's), so the same launcher and the same prepared weights
(humming.core.common.layout.prepare) serve both (kernel).

Options (RegisterATiles; checks says which form takes which): the small form's clusters, split-K clusters, occupancy and
fold (fold); the two-warpgroup form's producer warpgroup, stagger, raster, pairs of blocks (pair_cluster), ``tail``
(the last tiles as four blocks each, one per quarter of K: splitk) and ``streamk`` (persistent blocks that take whole
tiles in waves, then the left-over tiles' k atoms in even runs: the tile body becomes a loop over the block's
segments, streamk).
"""
from __future__ import annotations

from math import lcm

from humming.core.common.mma_pieces import gs_epilogue_parts, pair_decode
from humming.core.common.wgmma import SLOT0_DESCRIPTOR, tile_of_block
from humming.core.families.register_a import epilogue, pair_cluster, splitk, stage_loop, streamk
from humming.core.families.register_a.activations import (
    CLUSTER_SETUP,
    LOAD_STAGE,
    PDL_PRODUCER_WAIT,
    SMALL_LOAD_STAGE,
    cluster_producer,
    producer_warpgroup,
    tma_load_stage,
)
from humming.core.families.register_a.checks import check_plan
from humming.core.families.register_a.fold import fold_parts
from humming.core.families.register_a.kernel import (
    HEAD,
    RAGGED_SLAB,
    SLAB,
    STAGING_AFTER_SLOTS,
    TILE_START,
    indented,
    ragged_n,
)
from humming.core.families.register_a.layout import int4_codes
from humming.core.families.register_a.planner import BK, OUT_PAD, PATH, RING_2WG, SMALL_BC, fold_group_atoms, small_ring
from humming.core.families.register_a.token_rows import TokenRows
from humming.core.families.register_a.weights import (
    DECODE_RAW,
    TAB,
    X16_CONSTANTS,
    X16_DECODE,
    WeightRing,
    decode_pairs,
    decode_pairs_x16,
    weight_source,
)
from humming.core.plan import TAIL_SPLITS
from humming.devices.base import HelperRequest

__all__ = ["X16_DECODE", "wgmma_rs_kernel_source"]

# the spaces before the comment of the stage's wait for the previous group (aligned with its neighbours' comments)
_PLAIN_WAIT_PAD, _FOLD_WAIT_PAD = " " * 13, " " * 11


def wgmma_rs_kernel_source(plan, backend, caps=None, rows: TokenRows | None = None, path: str = PATH) -> str:
    """The CUDA C++ of a register-A plan; ``rows``: another source of the token rows (the MoE form, whose plans have
    their own ``path``)."""
    t = plan.tiles
    lay = plan.layout
    check_plan(plan, caps, path)
    if rows and (t.bn == SMALL_BC or t.bulk or t.streamk or t.tail or t.cluster):
        raise ValueError("token rows from a routing are written for the two-warpgroup form with cp.async stages, "
                         f"without stream-K, tail or clusters; got {t}")
    small = t.bn == SMALL_BC  # the small-M form (the two-warpgroup form otherwise)
    ragged = ragged_n(plan)
    if ragged and not rows:
        raise ValueError(f"N={lay.n}: an odd number of 64-channel slabs is written for the MoE form only")
    tma = bool(t.bulk)  # the activations by TMA tensor copy (one thread, an mbarrier per slot) instead of cp.async
    ws = t.bulk == 2  # a producer warpgroup issues the tensor copies; the consumers release slots by mbarrier
    cluster = t.cluster if small else 0  # the small form's multicast clusters
    pair = 0 if small else t.cluster     # the two-warpgroup form's pairs of blocks
    early = bool(t.streamk and t.early)
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=lay.decode, async_copy=True, caps=caps)
    prelude = backend.helpers("wgmma_rs", request, n=t.bm, tensor_copy=tma, consumer_threads=256 if ws else 0,
                              stagger=bool(t.stagger), cluster=bool(cluster), streamk=bool(t.streamk))
    if pair:
        prelude += "\n" + backend.helpers("cluster_multicast", caps=caps)

    # ---- the weights: the ring of atoms in flight and their decode
    s_group, z_group = lay.scale_group, lay.zero_group
    _, math, zero_decl = pair_decode(lay, bool(s_group), bool(z_group))
    # f16: odd pairs decoded in place as magic + 16 code (no shift; x 1/16 in the zero-point fma), X16_DECODE
    x16 = X16_DECODE and plan.act == "f16" and t.fold != 2 and int4_codes(lay.decode)
    if x16:
        zero_decl += X16_CONSTANTS
    ring = WeightRing(lay, split=bool(small or t.tail or t.streamk), walk=not t.early and not t.occupancy)
    wsrc_lane, wsrc_doc = weight_source(lay.tile_major)
    # two-warpgroup forms: the refill's address as the trip's base plus a constant (u is unrolled), which ptxas folds
    # into the load's offset (the stream-K loop computed it per stage: 1062 -> 1044 SASS instructions per 10 stages)
    refill_words = "" if small else "(size_t)kb * ATOM_WORDS + (u + PF) * ATOM_WORDS"
    pf, bounds = (small_ring(caps, t.bm, t.stages, t.cluster, t.occupancy, t.prefetch) if small
                  else (t.prefetch or RING_2WG, 1))  # bounds: blocks per SM the registers must allow
    if t.fold == 2:
        decode = DECODE_RAW
    elif t.fold == 1:  # the zero point as before, the scale later: a[] = code - zero, exact small integers
        _, zmath, _ = pair_decode(lay, False, bool(z_group))
        zpick = [ln for ln in ring.pick if ln.startswith("const uint32_t zz")]
        decode = decode_pairs_x16(zpick, False) if x16 else decode_pairs(zpick, zmath)
    else:
        decode = decode_pairs_x16(ring.pick, bool(s_group)) if x16 else decode_pairs(ring.pick, math)
    ga = fold_group_atoms(lay) if t.fold else 0
    unroll = "2 * R" if not ga or (2 * (pf + 1)) % ga == 0 else str(lcm(2 * (pf + 1), ga))
    unroll_n = 2 * (pf + 1) if unroll == "2 * R" else int(unroll)

    # ---- the activations: the form's k range and stage loads, how a stage is waited for, refilled and released
    # small form up to 64 tokens: the register ring has one slot per activation stage (R = STAGES), so the unrolled
    # trip (a multiple of 2 R stages) makes every slot index a constant: no slot arithmetic or descriptor building per
    # stage (measured 7% faster at M 32-64; at 128 tokens the extra ring slot cost more registers than it saved)
    kt_slot, next_slot, kt_phase = stage_loop.stage_slots(small, small and t.bm <= 64, bool(t.streamk or t.tail),
                                                          bool(t.streamk), unroll_n, t.stages)
    split_wsrc = f"const uint32_t* wsrc = B + ((size_t)slab * katoms + kt0) * ATOM_WORDS + {wsrc_lane};"
    if small:
        ktiles_line, wsrc_line = splitk.SMALL_KTILES, split_wsrc
        load_code = (CLUSTER_SETUP + cluster_producer("(kt0 + kt) * BK", bool(plan.pdl)) if cluster else
                     tma_load_stage("(kt0 + kt) * BK") if tma else SMALL_LOAD_STAGE)
        # (a copy of more than 64 tokens' accumulators raised the registers per block)
        splitk_code = splitk.small_splitk(own=t.bm <= 64, sync="consumer_sync" if cluster else "__syncthreads")
        if plan.cluster_splits:
            prelude += backend.helpers("cluster_dsmem", caps=caps)
            splitk_code = splitk.SMALL_SPLITK_CLUSTER
    elif t.streamk:  # katoms in the schedule, kt0 and ktiles per segment; the producer warpgroup copies
        ktiles_line, load_code, wsrc_line, splitk_code = "", "", split_wsrc, streamk.handover(bool(pair))
    elif t.tail:
        ktiles_line, load_code, wsrc_line = splitk.TAIL_KTILES, "", split_wsrc
        splitk_code = splitk.tail_splitk(own=t.bm <= 128)
    else:
        ktiles_line = "const int ktiles = K / BK;"
        load_code = rows.load_stage if rows else tma_load_stage("kt * BK") if tma else LOAD_STAGE
        wsrc_line = f"const uint32_t* wsrc = B + (size_t)slab * ktiles * ATOM_WORDS + {wsrc_lane};"
        splitk_code = ""
    gs_doc, scale_line, _ = gs_epilogue_parts(plan, "")
    if not plan.row_scale:
        gs_doc = "// a device scalar multiplying the output (activation global scale) or null"
    if tma:
        commit = commit_in_loop = ""
        stage_wait, final_wait = stage_loop.tma_stage_wait(kt_slot, kt_phase), stage_loop.TMA_FINAL_WAIT
        params_end = (",        " + gs_doc + "\n"
                      "    const __grid_constant__ TmaMap XMAP) {  // activations [M, K]: boxes of BT rows x 64, 128-byte swizzle")
    else:
        commit, commit_in_loop = "\n    copy_commit();", "\n        copy_commit();"
        stage_wait, final_wait = stage_loop.CP_ASYNC_STAGE_WAIT, stage_loop.CP_ASYNC_FINAL_WAIT
        params_end = (",        " + gs_doc + rows.params.removeprefix(",") + ") {" if rows else
                      ") {        " + gs_doc)
    prologue = "" if ws else stage_loop.prologue(commit)
    refill = "" if ws else stage_loop.refill(next_slot, commit_in_loop)
    after_commit = stage_loop.STAGGER_GIVE if t.stagger else ""
    if small and tma and not cluster and (t.occupancy or t.bm >= 64):
        # the block barrier and the refill after the stage's wgmmas are issued, which run during the barrier (the
        # slot of kt - 2 is free all the same: every warp is past its wait of stage kt - 1). H200
        # (scripts/ablate.py late_refill): 28672x8192 M16 / M32 (occupancy 7) 47.4 -> 45.0 / 55.2 -> 53.0 us, M64
        # 70.9 -> 70.3, 8192x8192 M128 33.4 -> 33.0, 4096x14336 M64 / M128 22.1 -> 21.6 / 32.2 -> 31.3; slower at
        # 16 tokens with 4 blocks per SM (8192x8192 M16 17.3 -> 18.1), hence not there
        after_commit, refill = refill, ""
    pdl_trigger = pdl_wait = ""
    if plan.pdl:  # weights are constant: their first stages load before the wait for the previous kernel
        prelude += backend.helpers("grid_dependency", caps=caps)
        pdl_trigger = "\n  pdl_launch_dependents();  // the next kernel may start its weight prefetch as SMs free up"
        pdl_wait = ("  pdl_wait();  // the previous kernel's outputs (our activations) are visible; nothing was read or "
                    "written yet\n" + prologue)
        prologue = ""
    release, block_sync, producer_threads = "", "__syncthreads", ""
    if cluster:  # the producer warp copies every stage; no block barrier per stage (slots released by mbarrier)
        refill = prologue = ""
        pdl_wait = "  pdl_wait();  // the previous kernel's outputs are visible and nothing of it is read any more\n" \
            if plan.pdl else ""
        block_sync = "consumer_sync"
        producer_threads = "\nconstexpr int BLOCK_THREADS = THREADS + 32;  // and a producer warp (warp 4) for the tensor copies"
        release = stage_loop.cluster_release(stage_loop.previous_slot(kt_slot))
    if ws:
        if t.streamk:
            load_code = streamk.producer(bool(pair), PDL_PRODUCER_WAIT if plan.pdl else "")
            # (the slot before the stage's own, not a second division: ptxas computed that one per lane)
            prev_slot, arrive = f"({kt_slot} == 0 ? STAGES - 1 : {kt_slot} - 1)", streamk.release(bool(pair))
        else:
            load_code = producer_warpgroup("kt0 + " if t.tail else "", bool(plan.pdl), bool(pair))
            prev_slot = stage_loop.previous_slot(kt_slot)
            arrive = (pair_cluster.release_both("kt > 0 && kt - 1 + STAGES < ktiles",
                                                "  // (the last STAGES stages are not refilled)") if pair else
                      "if (lane == 0 && kt > 0) mbar_arrive(empty);")
        release = stage_loop.producer_release(prev_slot, arrive)
        block_sync = "consumer_sync"
        producer_threads = "\nconstexpr int BLOCK_THREADS = THREADS + 128;  // and a producer warpgroup (warps 8-11)"

    # ---- a stage's wgmmas (and with fold, the group's fold)
    if t.fold:
        parts = fold_parts(lay, plan.act, t.fold == 2, after_commit,
                           stage_loop.group_wait(bool(t.occupancy), _FOLD_WAIT_PAD))
        stage, fence, fold_decl, fold_tail = parts.stage, parts.fence, parts.decl, parts.tail
    else:
        stage = stage_loop.PLAIN_STAGE.fill(after_commit=after_commit,
                                            group_wait=stage_loop.group_wait(bool(t.occupancy), _PLAIN_WAIT_PAD))
        fence, fold_decl, fold_tail = "wgmma_fence_operand(acc);", "", ""

    # ---- the kernel
    staging = "stg0" if t.streamk else "x0"  # stream-K: a staging tile after the activation slots (which keep loading)
    if t.stsm:
        prelude += backend.helpers("stmatrix", caps=caps)
    if rows:
        tile_code = rows.tile
    elif t.streamk:
        tile_code = streamk.SCHEDULE
    else:
        tile_code = splitk.TAIL_TILE if t.tail else pair_cluster.tile(t.raster) if pair else tile_of_block(t.raster)
    head = HEAD.fill(
        name=plan.kernel_name, summary=plan.summary(), prelude=prelude, bt=t.bm, bc=t.bn, bk=BK, stages=t.stages,
        threads_line=("constexpr int THREADS = 128;             // one warpgroup: the tile's 64 channels (one slab)"
                      if small else "constexpr int THREADS = 256;             // two warpgroups; warpgroup wg owns "
                      "channels 64 wg .. 64 wg + 63 of the tile"),
        producer_threads=producer_threads, raster=t.raster,
        cluster_line=(f"\nconstexpr int CLUSTER = {cluster};           // blocks per cluster (adjacent slabs) sharing "
                      "each activation stage" if cluster else ""),
        tail_line=(f"\nconstexpr int TAIL = {t.tail}, TAIL_SPLITS = {TAIL_SPLITS};   // the last TAIL tiles: "
                   "TAIL_SPLITS blocks each" if t.tail else ""),
        pf=pf, unroll=unroll, out_pad=OUT_PAD,
        schedule=streamk.helpers(t.raster, t.streamk, plan.k, BK, bool(pair)) if t.streamk else "",
        block_threads="BLOCK_THREADS" if ws or cluster else "THREADS", blocks_per_sm=bounds,
        workspace_doc=("// split-K partials and tile counters" if small or t.tail or t.streamk else
                       "// unused (no split-K)"),
        params_end=params_end, tile=tile_code, pdl_trigger=pdl_trigger, ktiles=ktiles_line,
        slab="" if t.streamk else RAGGED_SLAB if ragged else SLAB,
        # slot 0's descriptor, declared where ptxas's loop comes out shortest (the small form: at the top, the
        # others: with the accumulators; 1210 -> 1096 SASS instructions per 10 stream-K stages with the unsigned
        # slot arithmetic)
        desc0=SLOT0_DESCRIPTOR if small else "", load_stages=load_code)
    body = TILE_START.fill(
        slab=SLAB + STAGING_AFTER_SLOTS if t.streamk else "", weights_doc=wsrc_doc, wsrc=wsrc_line, tab=TAB,
        row_ptrs=ring.row_ptr_code(), zero_decl=zero_decl, ring="" if early else ring.declarations(),
        fixed=ring.fixed_code(), fold_decl=fold_decl, desc0="" if small else SLOT0_DESCRIPTOR)
    body += stage_loop.MAIN_LOOP.fill(
        prologue=prologue, ring_empty="!ring_ready && " if early else "", first_fetch=ring.fetch("s", "s", "      "),
        pdl_wait=pdl_wait, stagger_take=stage_loop.STAGGER_TAKE if t.stagger else "", decode=decode,
        fetch=ring.fetch("(s + PF) % R", "kt + PF", "        ", refill_words), stage_wait=stage_wait, refill=refill,
        kt_slot=kt_slot, stage=stage, release=release, fence=fence,
        fence_after_loop="\n  ".join(fence.split("\n")),  # (its later lines at the loop's indentation)
        fold_tail=fold_tail, final_wait=final_wait)
    body += epilogue.EPILOGUE.fill(
        block_sync=block_sync,
        sync_words=("// all wgmmas done; the last segment's copy-out has read the staging tile" if t.streamk else
                    "// all wgmmas and copies done: the activation slots become the staging tile"),
        early_fetch=(streamk.early_fetch(ring.fetch("s", "s", "          "), SLAB, wsrc_line, TAB, bool(pair))
                     if early else ""),
        splitk=splitk_code, scale_line=scale_line,
        staging_stores=epilogue.staging_stores(bool(t.stsm), staging, plan.row_scale, rows.row_pair if rows else "",
                                               ragged),
        copy_out=rows.copy_out if rows else epilogue.copy_out(small, block_sync, staging, closes=not t.streamk))
    if not t.streamk:
        return head + body
    # the tile body runs once per segment (with the early ring, the ring's declarations before the segment loop)
    return (head + streamk.segment_open(bool(pair), ring.declarations() if early else "")
            + indented(body).rstrip() + "\n" + streamk.SEGMENT_CLOSE)
