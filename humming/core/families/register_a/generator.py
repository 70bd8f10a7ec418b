"""Generates the register-A wgmma WnA16 kernel (sm_90a; from M 513 by default, the tuning knob register_a.min_m): the stream kernel's idea
at prefill sizes. Each block computes C^T = W x^T for 128 output channels x BT tokens (BT = 128 or 256, fitted to M
in multiples of 16):

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
    (n8 tiles 2w, 2w + 1), once per atom (groups are multiples of 64).
  * B = activations: BT token rows x 64 k (128 bytes), copied with cp.async into 128-byte-swizzled K-major shared
    memory (the layout of the other wgmma kernels' tiles; rows past M zero-filled), STAGES slots, read through a
    matrix descriptor (+32 bytes per k16 step).

Pipeline, iteration kt (LOOKAHEAD = STAGES - 2 activation stages in flight; the main loop is unrolled by U = 2 R
stages so that ring slots are constants, and drains the wgmma queue once per trip, see below):
  decode the weights of kt (ring slot kt % R) into a[4][4] -> load the weights of kt + PF (global -> registers) ->
  wait for this thread's copies of kt -> fence.proxy.async -> __syncthreads (everyone's copies of kt landed; both
  warpgroups finished the wgmmas of kt - 2) -> refill the slot of kt - 2 -> wgmma.fence, four m64nBTk16 (A from
  a[ks]), commit -> wgmma_wait<1> (the group of kt - 1 is done: its A registers and slot are free).
A wgmma group left in flight across the loop's back edge while a[] is rewritten makes ptxas serialize every wgmma
(C7513 "non wgmma instructions defining input registers of a wgmma between start and end of the pipeline stage";
it does not when the same code is straight-line), hence wgmma_wait<0> at the end of each trip of U stages.

Epilogue: accumulator x out_scale (x *GS) x per-channel scale CS[n] + bias[n]; acc[4j + 2h + e] is channel
64 wg + 16 w + 8 h + g, token 8 j + 2 q + e (q = lane % 4); the tile is written transposed into shared memory
([token][channel], pitch 136 values), then copied out one 16-byte chunk per thread and step (whole token rows of
256 bytes; rows past M skipped). The parameter list is that of the mma.sync tile kernel (WS and CNT hold split-K
partials and counters where a form splits K; k_per_split is the small form's), so the same launcher and the same
prepared weights (humming.core.common.layout.prepare) serve both.

Options of the two-warpgroup form that split the last round of tiles (TileConfig): ``tail`` runs the last tiles as
four blocks each, one per quarter of K (_TAIL_TILE, _tail_splitk); ``streamk`` launches persistent blocks that take
whole tiles in waves, then the left-over tiles' k atoms in even runs (humming.core.families.register_a.streamk: the
tile body becomes a loop over the block's segments).
"""
from __future__ import annotations

import re
from math import lcm

from humming.core.common.mma_pieces import _c, gs_epilogue_parts, pair_decode
from humming.core.common.wgmma import (
    PRODUCER_WARPGROUP_WAITING,
    SLOT0_DESCRIPTOR,
    STAGED_COPY_OUT,
    add_partial,
    claim_tile,
    stmatrix_staging,
    store_partial,
    tile_of_block,
)
from humming.core.families.register_a import streamk as streamk
from humming.core.families.register_a.planner import (
    BC,
    BK,
    OUT_PAD,
    PATH,
    RING_2WG,
    SMALL_BC,
    cluster_refusal,
    fold_group_atoms,
    layout_refusal,
    small_ring,
)
from humming.core.plan import TAIL_SPLITS
from humming.devices.base import HelperRequest

X16_DECODE = True  # see _decode_pairs_x16
# the wait after a stage's commit that leaves the stage's own group in flight (replaced under the occupancy option)
_PREVIOUS_GROUP_WAIT = re.compile(r"wgmma_wait<1>\(\);( +)// the group of kt - 1 has finished \(its registers and its "
                                  r"slot are free\)")


def wgmma_rs_kernel_source(plan, backend, caps=None) -> str:
    t = plan.tiles
    lay = plan.layout
    small = t.bn == SMALL_BC  # the small-M form: one warpgroup (64 channels), BT = 16..128 tokens, split-K
    if small:
        if plan.path != PATH or (t.bk, t.threads) != (BK, 160 if t.cluster else 128) or t.stages < 4 or t.bm % 16 \
                or t.bm > 128:
            raise ValueError(f"the small-M register-A wgmma kernel is written for 16..128 tokens (a multiple of 16) x "
                             f"64 channels x 64 k, 128 threads (160 with cluster), >= 4 stages; got {t}")
    elif plan.path != PATH or (t.bn, t.bk, t.threads) != (BC, BK, 384 if t.bulk == 2 else 256) or t.stages < 4 \
            or t.bm % (16 if t.bulk else 32) or not 64 <= t.bm <= 256:
        raise ValueError(f"the register-A wgmma kernel is written for 64..256 tokens (a multiple of 16, of 32 with "
                         f"cp.async copies) x 128 channels x 64 k, 256 threads (384 with the producer warpgroup), >= 4 "
                         f"stages; got {t}")
    why = layout_refusal(lay, t.bn)
    if why:
        raise ValueError(f"the register-A wgmma kernel cannot run this layout: {why}")
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=lay.decode, async_copy=True, caps=caps)
    tma = bool(t.bulk)  # the activations by TMA tensor copy (one thread, an mbarrier per slot) instead of cp.async
    stagger = bool(t.stagger)
    if t.raster and small:
        raise ValueError("block rasterization is an option of the two-warpgroup form (the small form splits K over z)")
    if stagger and (small or t.bulk != 2):
        raise ValueError("the staggered start is an option of the two-warpgroup form with the producer warpgroup")
    cluster = t.cluster if small else 0  # the small form's multicast clusters (the text below)
    pair = 0 if small else t.cluster     # the two-warpgroup form's pairs (humming.core.families.register_a.pair_cluster, at the end)
    if t.early and (small or not t.streamk):
        raise ValueError("early (the next segment's weights loaded before the epilogue) is a stream-K option")
    if pair and (pair != 2 or t.bulk != 2 or t.tail or t.streamk % 2):
        raise ValueError(f"the two-warpgroup form's cluster option is written for pairs with the producer warpgroup, "
                         f"without tail (stream-K over an even block count), not {t}")
    why = cluster_refusal(caps, plan.n, t.stages, t.bulk == 1, cluster)  # the planner's own check
    if why:
        raise ValueError(why)
    prelude = backend.helpers("wgmma_rs", request, n=t.bm, tensor_copy=tma, consumer_threads=256 if t.bulk == 2 else 0,
                              stagger=stagger, cluster=bool(cluster), streamk=bool(t.streamk))
    if pair:
        prelude += "\n" + backend.helpers("cluster_multicast", caps=caps)
    s_group, z_group = lay.scale_group, lay.zero_group
    _, math, zero_decl = pair_decode(lay, bool(s_group), bool(z_group))
    # f16: odd pairs decoded in place as magic + 16 code (no shift; x 1/16 in the zero-point fma), X16_DECODE
    x16 = X16_DECODE and plan.act == "f16" and t.fold != 2
    if x16:
        zero_decl += ("  const uint32_t x16_scale = f32x2_to_act2(0.0625f, 0.0625f);  // (magic + 16 code) / 16 = 64 + code\n"
                      "  const uint32_t x16_bias = f32x2_to_act2(960.0f, 960.0f);   // -(magic + zero) + 960 = -(64 + zero)\n")

    def table(ptr: str, group: int, atom: str) -> str:
        row = "0" if group < 0 else f"(size_t)((unsigned)({atom}) * BK / {group}) * N + "  # (unsigned: no signed division)
        return f"load_g32({ptr} + {row if group > 0 else ''}tab)"

    ring_decl, ring_load, pick, fixed, row_ptrs = [], [], [], [], []
    # a table of groups that are whole atoms walks its rows with a pointer (the atoms are fetched in order): one add
    # every group / BK atoms instead of a row index, a multiply and a 64-bit address per atom (not with the early ring,
    # which fetches the next segment's atoms before this one's are done)
    walk = not t.early and not t.occupancy  # (occupancy: registers too short for the pointer; more instructions)
    for ptr, var, group in (("S", "s", s_group), ("Z", "z", z_group)):
        if group > 0:  # one row per atom: travels in the ring with the codes
            ring_decl.append(f"uint32_t {var}q[R];  // this lane's two channels' {ptr} values of each atom in flight")
            if walk and group % BK == 0:
                first = "kt0" if small or t.tail or t.streamk else "0"
                row_ptrs.append(f"const uint16_t* {var}p = {ptr} + (size_t)((unsigned)({first}) * BK / {group}) * N + tab;"
                                f"  // the {ptr} row of the next atom fetched")
                step = f"{var}p += N;" if group == BK else \
                    f"if (((unsigned)(ATOM) + 1) % {group // BK} == 0) {var}p += N;"
                ring_load.append(f"{var}q[SLOT] = load_g32({var}p);  {step}  // (its group's last atom: the next row)"
                                 if group != BK else f"{var}q[SLOT] = load_g32({var}p);  {step}")
            else:
                ring_load.append(f"{var}q[SLOT] = {table(ptr, group, 'ATOM')};")
            pick.append(f"const uint32_t {var}{var} = h ? dup_hi({var}q[s]) : dup_lo({var}q[s]);")
        elif group < 0:  # one row (per channel): loaded once
            fixed.append(f"const uint32_t {var}w = {table(ptr, group, '0')};  // this lane's two channels")
            pick.append(f"const uint32_t {var}{var} = h ? dup_hi({var}w) : dup_lo({var}w);")
    if not z_group:
        pick.append("const uint32_t zz = zz_const;")

    def fetch(slot: str, atom: str, indent: str, words: str = "") -> str:
        """Atom ``atom``'s codes (and table rows) into ring slot ``slot``; ``words``: its offset from wsrc in words
        when not (atom) * ATOM_WORDS."""
        offset = "kt0 + " if small or t.tail or t.streamk else ""
        lines = [f"const uint32_t* p = wsrc + {words or f'(size_t)({atom}) * ATOM_WORDS'};"]
        if lay.tile_major:
            lines.append(f"load_g128(wq[{slot}], p);  // chunk w: k16 steps 0..3 of this warp's 16 channels")
        else:
            lines += ["#pragma unroll",
                      f"for (int ks = 0; ks < 4; ++ks) wq[{slot}][ks] = load_g32(p + ks * 128);  // word w of chunk ks"]
        lines += [ln.replace("SLOT", slot).replace("ATOM", offset + atom) for ln in ring_load]
        return "\n".join(indent + ln for ln in lines)

    if lay.tile_major:
        wsrc_lane = "w * 128 + lane * 4"
        wsrc_doc = "// weights: this lane's chunk w of atom (slab, kt) at ((slab * K/64 + kt) * 4 + w) * 128 + lane * 4 (words)"
    else:
        wsrc_lane = "lane * 4 + w"
        wsrc_doc = ("// weights: word w of this lane's chunk ks of atom (slab, kt) at ((slab * K/64 + kt) * 4 + ks) * 128 + "
                    "lane * 4 + w")
    ring_decl_code = "".join("\n  " + ln for ln in ring_decl)
    fixed_code = "".join("\n  " + ln for ln in fixed)
    pick_code = "\n          ".join(pick)

    # small form up to 64 tokens: the register ring has one slot per activation stage (R = STAGES), so the unrolled
    # trip (a multiple of 2 R stages) makes every slot index a constant: no slot arithmetic or descriptor building per
    # stage (measured 7% faster at M 32-64; at 128 tokens the extra ring slot cost more registers than it saved)
    const_slots = small and t.bm <= 64
    # two-warpgroup forms: the refill's address as the trip's base plus a constant (u is unrolled), which ptxas folds
    # into the load's offset (the stream-K loop computed it per stage: 1062 -> 1044 SASS instructions per 10 stages)
    refill_words = "" if small else "(size_t)kb * ATOM_WORDS + (u + PF) * ATOM_WORDS"
    ring_pf, ring_blocks = (small_ring(caps, t.bm, t.stages, t.cluster, t.occupancy, t.prefetch) if small
                            else (t.prefetch or RING_2WG, 1))
    if t.occupancy and not small:
        raise ValueError("occupancy is an option of the small-M form")
    pf = ring_pf
    fold = t.fold
    if fold and not small:
        raise ValueError("fold (the scale, and with fold=2 the zero point, applied per group in fp32) is a small-M option")
    if fold == 2:
        decode_body = """          #pragma unroll
          for (int r = 0; r < 2; ++r) a[ks][r * 2 + h] = dq_raw(wq[s][ks], 2 * h + r);  // magic + code, exact"""
    elif fold == 1:  # the zero point as before, the scale later: a[] = code - zero, exact small integers
        _, zmath, _ = pair_decode(lay, False, bool(z_group))
        zpick = "\n          ".join(ln for ln in pick if ln.startswith("const uint32_t zz"))
        decode_body = _decode_pairs_x16(zpick, False) if x16 else _decode_pairs(zpick, zmath)
    if fold:
        fold_decl, mma_block, fence_acc, fold_tail = _fold_parts(lay, s_group, z_group, plan.act, fold == 2)
        ga = fold_group_atoms(lay)
        unroll = "2 * R" if not ga or (2 * (pf + 1)) % ga == 0 else str(lcm(2 * (pf + 1), ga))
    else:
        decode_body = _decode_pairs_x16(pick_code, bool(s_group)) if x16 else _decode_pairs(pick_code, math)
        fold_decl = fold_tail = ""
        mma_block = _PLAIN_MMA
        if stagger:
            mma_block = mma_block.replace("      wgmma_commit();\n", "      wgmma_commit();\n" + _STAGGER_GIVE)
        fence_acc = "wgmma_fence_operand(acc);"
        unroll = "2 * R"
    if t.occupancy:  # each stage waits for its own group: the decoded a[] registers need not outlive the stage
        mma_block, count = _PREVIOUS_GROUP_WAIT.subn(
            r"wgmma_wait<0>();\1// this stage's group has finished (occupancy: one set of decoded registers)", mma_block)
        if not count:
            raise ValueError("internal: the small form's stage has no wait for the previous wgmma group")
    threads_line = ("constexpr int THREADS = 128;             // one warpgroup: the tile's 64 channels (one slab)" if small
                    else "constexpr int THREADS = 256;             // two warpgroups; warpgroup wg owns channels 64 wg .. 64 wg + 63 of the tile")
    bounds = ring_blocks  # blocks per SM the registers must allow
    unroll_n = 2 * (pf + 1) if unroll == "2 * R" else int(unroll)
    kt_phase = "((unsigned)kt / STAGES) & 1"  # (unsigned: a mask and a shift, not a signed division's fix-ups)
    if const_slots and unroll_n % t.stages == 0:  # constant slots (kb is a multiple of the trip, hence of STAGES)
        kt_slot, next_slot = "(u % STAGES)", "((u + LOOKAHEAD) % STAGES)"
    elif not small and not t.streamk and not t.tail and unroll_n % t.stages == 0:
        # the two-warpgroup plain form whose trip is whole rounds of the slots (the default ring of 5 at 6 stages,
        # register_a.planner.RING_2WG): slot and phase from the unrolled stage and the trip (1022 -> 954 SASS
        # instructions per 10 stages at M 1024)
        kt_slot, next_slot = "(u % STAGES)", "((u + LOOKAHEAD) % STAGES)"
        kt_phase = ("((u / STAGES) & 1)" if unroll_n % (2 * t.stages) == 0 else
                    "(((unsigned)kb / STAGES + u / STAGES) & 1)")
    else:
        kt_slot, next_slot = "((unsigned)kt % STAGES)", "(unsigned)next % STAGES"
    if t.streamk:  # stage kt of a segment is the block's stage it0 + kt (the producer copies segment after segment)
        kt_slot, kt_phase = "((unsigned)(it0 + kt) % STAGES)", "((unsigned)(it0 + kt) / STAGES) & 1"
    if small:
        ktiles_line = ("const int katoms = K / BK, ktiles = k_per_split / BK;   // k atoms of a slab, of this split\n"
                       "  const int kt0 = blockIdx.z * ktiles;                        // this split's first k atom")
        load_code = (_CLUSTER_SETUP + _cluster_producer("(kt0 + kt) * BK", bool(plan.pdl)) if cluster else
                     _tma_load_stage("(kt0 + kt) * BK") if tma else _SMALL_LOAD_STAGE)
        wsrc_line = f"const uint32_t* wsrc = B + ((size_t)slab * katoms + kt0) * ATOM_WORDS + {wsrc_lane};"
        splitk_code = _small_splitk(own=t.bm <= 64)  # (a copy of more raised the registers per block)
        if plan.cluster_splits:
            if cluster:
                raise ValueError("split-K clusters exclude the multicast cluster option (one cluster shape per launch)")
            prelude += backend.helpers("cluster_dsmem", caps=caps)
            splitk_code = _SMALL_SPLITK_CLUSTER
        copy_out = STAGED_COPY_OUT.fill().replace("c >> 4, ch = c & 15", "c >> 3, ch = c & 7").replace(
            "token row c / 16, channels 8 (c % 16)", "token row c / 8, channels 8 (c % 8)").replace(
            "chunk c = tid + 256 i", "chunk c = tid + 128 i")
    elif t.streamk:  # the planner's streamk_refusal: the producer warpgroup, no stagger, no tail
        if t.bulk != 2 or t.stagger or t.tail:
            raise ValueError("stream-K is written for the producer-warpgroup form without the staggered start or tail")
        ktiles_line = ""  # katoms in the schedule, kt0 and ktiles per segment
        load_code = ""
        wsrc_line = f"const uint32_t* wsrc = B + ((size_t)slab * katoms + kt0) * ATOM_WORDS + {wsrc_lane};"
        splitk_code = streamk.HANDOVER
        copy_out = STAGED_COPY_OUT.fill()
    elif t.tail:  # the planner's tail_refusal: the producer warpgroup, whole K quarters
        if t.bulk != 2 or t.raster:
            raise ValueError("tail is written for the producer-warpgroup form in launch order")
        ktiles_line = _TAIL_KTILES
        load_code = ""
        wsrc_line = f"const uint32_t* wsrc = B + ((size_t)slab * katoms + kt0) * ATOM_WORDS + {wsrc_lane};"
        splitk_code = _tail_splitk(own=t.bm <= 128)
        copy_out = STAGED_COPY_OUT.fill()
    else:
        ktiles_line = "const int ktiles = K / BK;"
        load_code = _tma_load_stage("kt * BK") if tma else _LOAD_STAGE
        wsrc_line = f"const uint32_t* wsrc = B + (size_t)slab * ktiles * ATOM_WORDS + {wsrc_lane};"
        splitk_code = ""
        copy_out = STAGED_COPY_OUT.fill()
    gs_doc, scale_line, _ = gs_epilogue_parts(plan, "")
    if not plan.row_scale:
        gs_doc = "// a device scalar multiplying the output (activation global scale) or null"
    if plan.row_scale:  # per-token scales (GS [M]) of tokens m0 + 8j + 2q and the next
        row_pair = """
      const int t0 = m0 + 8 * j + 2 * q;
      const float r0 = t0 < M ? load_f32(GS + t0) : 0.0f, r1 = t0 + 1 < M ? load_f32(GS + t0 + 1) : 0.0f;
      const uint32_t v = f32x2_to_act2(acc[4 * j + 2 * h] * cs * r0 + bs, acc[4 * j + 2 * h + 1] * cs * r1 + bs);"""
    else:
        row_pair = """
      const uint32_t v = f32x2_to_act2(acc[4 * j + 2 * h] * cs + bs, acc[4 * j + 2 * h + 1] * cs + bs);"""
    if tma:
        commit = commit_in_loop = ""
        stage_wait = ("      mbar_wait(xbar0 + 8 * " + kt_slot + ", " + kt_phase + ");  // the tensor copy of stage kt "
                      "has landed (phase: the slot's use count)")
        final_wait = "  fence_proxy_async();"
        params_end = (",        " + gs_doc + "\n"
                      "    const __grid_constant__ TmaMap XMAP) {  // activations [M, K]: boxes of BT rows x 64, 128-byte swizzle")
    else:
        commit, commit_in_loop = "\n    copy_commit();", "\n        copy_commit();"
        stage_wait = ("      copy_wait<LOOKAHEAD - 1>();  // this thread's copies of stage kt have landed\n"
                      "      fence_proxy_async();         // ... and are visible to wgmma (async proxy)")
        final_wait = "  copy_wait<0>();\n  fence_proxy_async();"
        params_end = ") {        " + gs_doc
    ws = t.bulk == 2  # a producer warpgroup issues the tensor copies; the consumers release slots by mbarrier
    if ws and (small or fold):
        raise ValueError("the producer-warp variant (bulk = 2) is written for the two-warpgroup form")
    prologue = "" if ws else f"""  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {{
    if (s < ktiles) load_stage(s, s);{commit}
  }}
"""
    refill = "" if ws else f"""      __syncthreads();             // everyone's; both warpgroups are done with the wgmmas of kt - 2
      {{
        const int next = kt + LOOKAHEAD;  // refills the slot of kt - 2
        if (next < ktiles) load_stage({next_slot}, next);{commit_in_loop}
      }}
"""
    if small and tma and not cluster and (t.occupancy or t.bm >= 64):
        # the block barrier and the refill after the stage's wgmmas are issued, which run during the barrier (the
        # slot of kt - 2 is free all the same: every warp is past its wait of stage kt - 1). H200
        # (scripts/ablate.py late_refill): 28672x8192 M16 / M32 (occupancy 7) 47.4 -> 45.0 / 55.2 -> 53.0 us, M64
        # 70.9 -> 70.3, 8192x8192 M128 33.4 -> 33.0, 4096x14336 M64 / M128 22.1 -> 21.6 / 32.2 -> 31.3; slower at
        # 16 tokens with 4 blocks per SM (8192x8192 M16 17.3 -> 18.1), hence not there
        wgmma_commit = "      wgmma_commit();\n"
        if wgmma_commit not in mma_block:
            raise ValueError("internal: the small form's stage has no wgmma commit to put the block barrier after")
        mma_block, refill = mma_block.replace(wgmma_commit, wgmma_commit + refill, 1), ""
    pdl_trigger = pdl_tail = ""
    if plan.pdl:  # weights are constant: their first stages load before the wait for the previous kernel
        prelude += backend.helpers("grid_dependency", caps=caps)
        pdl_trigger = "\n  pdl_launch_dependents();  // the next kernel may start its weight prefetch as SMs free up"
        pdl_tail = ("  pdl_wait();  // the previous kernel's outputs (our activations) are visible; nothing was read or "
                    "written yet\n" + prologue)
        prologue = ""
    stagger_take = _STAGGER_TAKE if stagger else ""
    release = ""
    block_sync = "__syncthreads"
    ws_threads = ""
    if cluster:  # the producer warp copies every stage; no block barrier per stage (slots released by mbarrier)
        refill = prologue = ""
        pdl_tail = "  pdl_wait();  // the previous kernel's outputs are visible and nothing of it is read any more\n" \
            if plan.pdl else ""
        block_sync = "consumer_sync"
        splitk_code = splitk_code.replace("__syncthreads()", "consumer_sync()")
        ws_threads = "\nconstexpr int BLOCK_THREADS = THREADS + 32;  // and a producer warp (warp 4) for the tensor copies"
        prev = "((u + STAGES - 1) % STAGES)" if kt_slot == "(u % STAGES)" else "((unsigned)(kt + STAGES - 1) % STAGES)"
        release = ("\n      if (lane == 0 && kt > 0 && kt - 1 + STAGES < ktiles)  // this warp is done with stage kt - 1: "
                   "release its slot to the block that refills it\n"
                   f"        mbar_arrive_peer(xbar0 + 8 * (STAGES + {prev}), (kt - 1) % CLUSTER);")
    if ws:
        # the producer thread polls its slots' releases politely (mbar_wait_polite: the consumer warps of its SM
        # sub-partition keep their issue slots)
        load_code = (streamk.PRODUCER if t.streamk else
                     PRODUCER_WARPGROUP_WAITING.replace("WAIT(", "mbar_wait_polite("))
        if plan.pdl:  # the producer's first copy reads activations: after the previous kernel (the consumers' weight
            # prefetch runs before their own wait, pdl_tail, and everything they write comes after it)
            load_code = _after_producer_start(load_code, PDL_PRODUCER_WAIT)
        if t.tail:  # the block's K range starts at atom kt0
            load_code = load_code.replace("&XMAP, kt * BK, m0", "&XMAP, (kt0 + kt) * BK, m0")
            if "(kt0 + kt) * BK" not in load_code:
                raise ValueError("internal: the producer warpgroup's tensor copy has no k coordinate to offset")
        prev_slot = ("((u + STAGES - 1) % STAGES)" if kt_slot == "(u % STAGES)" else
                     "((unsigned)(kt + STAGES - 1) % STAGES)")
        first = "kt > 0"
        if t.streamk:  # (the first stage of a segment releases the last of the one before)
            # (the slot before the stage's own, not a second division: ptxas computed that one per lane)
            prev_slot, first = f"({kt_slot} == 0 ? STAGES - 1 : {kt_slot} - 1)", "(kt > 0 || it0 > 0)"
        # (the EMPTY mbarrier's address outside the lane-0 branch: computed once per warp in uniform registers)
        release = ("\n      {  // this warp is done with stage kt - 1: its slot may be refilled\n"
                   f"        const uint32_t empty = xbar0 + 8 * (STAGES + {prev_slot});\n"
                   f"        if (lane == 0 && {first}) mbar_arrive(empty);\n      }}")
        block_sync = "consumer_sync"
        ws_threads = "\nconstexpr int BLOCK_THREADS = THREADS + 128;  // and a producer warpgroup (warps 8-11)"
    tail_line = (f"\nconstexpr int TAIL = {t.tail}, TAIL_SPLITS = {TAIL_SPLITS};   // the last TAIL tiles: "
                 "TAIL_SPLITS blocks each" if t.tail else "")
    sync_words = ("// all wgmmas done; the last segment's copy-out has read the staging tile" if t.streamk else
                  "// all wgmmas and copies done: the activation slots become the staging tile")
    tile_code = (streamk.SCHEDULE if t.streamk else _TAIL_TILE if t.tail else tile_of_block(t.raster))
    streamk_helpers = streamk.helpers(t.raster, t.streamk, plan.k, BK, bool(pair)) if t.streamk else ""
    slab_line = "  const int slab = n0 / 64 + wg;                                 // this warpgroup's 64-channel atom row\n"
    staging = "x0"
    if t.streamk:  # per segment: the tile's slab, and a staging tile after the activation slots (which keep loading)
        staging = "stg0"
        slab_head, slab_body = "", slab_line + "  const uint32_t stg0 = x0 + STAGES * X_BYTES;                  // the staging tile\n"
        copy_out = copy_out[:-2] if copy_out.endswith("}\n") else copy_out
    else:
        slab_head, slab_body = slab_line, ""
    cluster_line = (f"\nconstexpr int CLUSTER = {cluster};           // blocks per cluster (adjacent slabs) sharing each "
                    "activation stage" if cluster else "")
    # slot 0's descriptor, declared where ptxas's loop comes out shortest (the small form: at the top, the others: with
    # the accumulators; 1210 -> 1096 SASS instructions per 10 stream-K stages with the unsigned slot arithmetic)
    desc0_small, desc0_wide = (SLOT0_DESCRIPTOR, "") if small else ("", SLOT0_DESCRIPTOR)
    # the weight ring's declarations: in the tile body, or with the early ring before the segment loop (streamk.early_open)
    ring_code = "  uint32_t wq[R][4];  // codes of the atoms in flight: k16 step ks of channels 16w + g (+8)" + ring_decl_code
    tab_line = "const int tab = slab * 64 + g * 8 + 2 * w;"
    row_ptr_code = "".join("\n  " + ln for ln in row_ptrs)
    early = bool(t.streamk and t.early)
    early_code = streamk.early_fetch(fetch("s", "s", "          "), slab_line, wsrc_line, tab_line) if early else ""
    if t.stsm:
        prelude += backend.helpers("stmatrix", caps=caps)
        staging_stores = _STSM_SCALES + stmatrix_staging(
            staging, "      const float cs = cs_h[h], bs = bs_h[h];" + row_pair)
    else:
        staging_stores = _STS_STAGING.replace("{ROW_PAIR}", row_pair).replace("{STAGING}", staging)
    source = f"""// ===== humming generated kernel: {plan.kernel_name}
// {plan.summary()}
{prelude}

namespace cfg {{
constexpr int BT = {t.bm}, BC = {t.bn}, BK = {BK}, STAGES = {t.stages};   // tokens, channels, k per stage
{threads_line}{ws_threads}
constexpr int RASTER = {t.raster};             // token tiles per rasterization group (0: launch order){cluster_line}{tail_line}
constexpr int LOOKAHEAD = STAGES - 2;    // activation stages loading while one is multiplied and one may still be read
constexpr int PF = {pf}, R = PF + 1;           // weight atoms in flight per lane, register ring size
constexpr int U = {unroll};                 // stages per trip of the main loop (unrolled: ring slots are constants)
constexpr int X_BYTES = BT * BK * 2;     // one activation tile: BT rows x 128 bytes
constexpr int ATOM_WORDS = 32 * 4 * 4;   // 32-bit words of one 64 x 64 int4 atom (2 KB)
constexpr int OUT_LD = BC + {OUT_PAD};         // staging pitch (16-bit values): 272 bytes, conflict-free stores
static_assert(BK == 64, "one 128-byte swizzle row of 16-bit values per token per stage");
static_assert(X_BYTES % 1024 == 0, "1024-byte aligned activation tiles");
static_assert(WG_ACC_REGS == BT / 2, "m64nBT accumulators: BT/2 registers per thread");
static_assert(LOOKAHEAD >= 2, "at least four stages");
static_assert(BT * OUT_LD * 2 <= STAGES * X_BYTES, "the staging tile fits in the activation slots");
static_assert((BT * (BC / 8)) % THREADS == 0, "whole copy-out passes");
}}
{streamk_helpers}
extern "C" __global__ void __launch_bounds__(cfg::{"BLOCK_THREADS" if ws or cluster else "THREADS"}, {bounds}) {plan.kernel_name}(
    const uint16_t* __restrict__ A,      // activations [M, K], row-major (K-major)
    const uint32_t* __restrict__ B,      // int4 codes in the mma.sync atom layout (humming.core.common.layout)
    const uint16_t* __restrict__ S,      // group scales [K/group, N] (act type, permuted columns) or null
    const uint16_t* __restrict__ Z,      // -(magic + zero) [K/group or 1, N] (act type, permuted columns) or null
    const float* __restrict__ CS,        // per-channel fp32 scale [N] or null
    const uint16_t* __restrict__ BIAS,   // [N] or null
    uint16_t* __restrict__ C,            // output [M, N], row-major
    float* __restrict__ WS, int* __restrict__ CNT,   {"// split-K partials and tile counters" if small or t.tail or t.streamk else "// unused (no split-K)"}
    int M, int N, int K, int k_per_split, float out_scale,
    const float* __restrict__ GS{params_end}
  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, w = warp & 3;
  const int g = lane >> 2, q = lane & 3;
{tile_code}{pdl_trigger}
  {ktiles_line}
{slab_head}  // the swizzle repeats every 1024 bytes of address: start on such a boundary (1 KiB is reserved)
  const uint32_t x0 = (smem_u32(smem) + 1023u) & ~1023u;         // STAGES activation slots, then the staging tile
{desc0_small}
{load_code}
{{SEGMENT_BODY}}{slab_body}  {wsrc_doc}
  {wsrc_line}
  {tab_line}                     // tables: n8 tiles 2w (low half), 2w + 1 (high){row_ptr_code}
{zero_decl}{"" if early else ring_code}{fixed_code}

  float acc[WG_ACC_REGS];
  #pragma unroll
  for (int i = 0; i < WG_ACC_REGS; ++i) acc[i] = 0.0f;{fold_decl}
{desc0_wide}
{prologue}  #pragma unroll
  for (int s = 0; s < PF; ++s)
    if ({"!ring_ready && " if early else ""}s < ktiles) {{
{fetch("s", "s", "      ")}
    }}
{pdl_tail}{stagger_take}
  for (int kb = 0; kb < ktiles; kb += U) {{
    #pragma unroll
    for (int u = 0; u < U; ++u) {{
      const int kt = kb + u, s = u % R;   // ring slot of stage kt
      if (kt >= ktiles) break;
      // A of stage kt: a[ks][r * 2 + h] = channels 16w + g + 8h, k 16 ks + 8 r + 2q (+1), as the activation type
      uint32_t a[4][4];
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
{decode_body}
        }}
      if (kt + PF < ktiles) {{  // the ring slot of kt - 1 (decoded last iteration) takes atom kt + PF
{fetch("(s + PF) % R", "kt + PF", "        ", refill_words)}
      }}
{stage_wait}
{refill}      const uint64_t desc_x = desc0 + (uint64_t)({kt_slot} * (X_BYTES >> 4));   // slot 0's descriptor + the slot's offset
{mma_block}{release}
    }}
    // drain before the loop's back edge: ptxas serializes every wgmma when a group whose A registers it cannot
    // track (a wgmma in flight across the back edge) is pending while a[] is written (C7513); once per U stages
    wgmma_wait<0>();
    {fence_acc}
  }}
  wgmma_wait<0>();
  {fence_acc}{fold_tail}
{final_wait}
  {block_sync}();                 {sync_words}{early_code}
{splitk_code}
  // acc[4j + 2h + e] = channel 64 wg + 16 w + 8 h + g, token 8 j + 2 q + e -> staging [token][channel]
  {scale_line}
{staging_stores}
{copy_out.replace("__syncthreads()", block_sync + "()").replace("lds_128(r, x0 + ", f"lds_128(r, {staging} + ")}"""
    if t.streamk:  # the tile body runs once per segment
        head, body = source.split("{SEGMENT_BODY}")
        open_text = streamk.early_open(ring_code) if early else streamk.SEGMENT_OPEN  # (the ring across segments)
        body = "\n".join(("  " + ln) if ln else ln for ln in body.split("\n"))
        source = head + open_text + "\n" + body.rstrip() + "\n" + streamk.SEGMENT_CLOSE
        return streamk.pair_rewrite(source) if pair else source
    source = source.replace("{SEGMENT_BODY}", "")
    return _pair_source(source, t.raster) if pair else source


# the epilogue's staging stores (ROW_PAIR: the value pair v of acc[4j + 2h], acc[4j + 2h + 1] with cs, bs; STAGING:
# the staging tile's address): two 16-bit stores a pair, or (TileConfig.stsm) one stmatrix .trans per two 8-token
# blocks x both channel halves (matrix i = token block j + i / 2, channels 8 (i % 2) + g)
_STS_STAGING = """  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = wg * 64 + w * 16 + 8 * h + g;
    const float cs = CS ? scale * load_f32(CS + n0 + ch) : scale;
    const float bs = BIAS ? act_to_f32(load_u16(BIAS + n0 + ch)) : 0.0f;
    #pragma unroll
    for (int j = 0; j < BT / 8; ++j) {{ROW_PAIR}
      const uint32_t o = {STAGING} + ((8 * j + 2 * q) * OUT_LD + ch) * 2;   // tokens 8j + 2q and 8j + 2q + 1
      sts_u16(o, (uint16_t)(v & 0xFFFFu));
      sts_u16(o + OUT_LD * 2, (uint16_t)(v >> 16));
    }
  }"""
_STSM_SCALES = """  float cs_h[2], bs_h[2];  // channels 8h + g's scale and bias
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = wg * 64 + w * 16 + 8 * h + g;
    cs_h[h] = CS ? scale * load_f32(CS + n0 + ch) : scale;
    bs_h[h] = BIAS ? act_to_f32(load_u16(BIAS + n0 + ch)) : 0.0f;
  }
"""


PDL_PRODUCER_WAIT = "      pdl_wait();  // the previous kernel's outputs (our activations) are visible\n"


def _after_producer_start(load_code: str, line: str) -> str:
    """The producer warpgroup's code with ``line`` as the first statement of its copying thread."""
    start = "    if (tid == THREADS) {\n"
    if load_code.count(start) != 1:
        raise ValueError("internal: the producer warpgroup's code has no single copying-thread branch")
    return load_code.replace(start, start + line)


def _pair_source(source: str, raster: int) -> str:
    """The two-warpgroup kernel as a pair of a cluster (humming.core.families.register_a.pair_cluster): its producer copies stage kt in
    block kt % 2's turn, multicast into both blocks' slots, and each consumer warp releases a slot that is refilled
    in both blocks."""
    from humming.core.families.register_a import pair_cluster

    release = "if (lane == 0 && kt > 0) mbar_arrive(empty);"
    both = ("if (lane == 0 && kt > 0 && kt - 1 + STAGES < ktiles) {  // (the last STAGES stages are not refilled)\n"
            "          mbar_arrive_peer(empty, 0);\n"
            "          mbar_arrive_peer(empty, 1);\n"
            "        }")
    return pair_cluster.rewrite(source, raster, "tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, xbar0 + 8 * s);",
                                "two-warpgroup kernel", ((release, both),))


_LOAD_STAGE = """  // activations: thread tid copies chunk tid % 8 of token rows tid / 8 + 32 i ((row mod 8) is the same for every i)
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const uint16_t* a_src = A + (size_t)(m0 + lrow) * K + lch * 8;
  auto load_stage = [&](int slot, int kt) {
    const uint32_t base = x0 + slot * X_BYTES;
    #pragma unroll
    for (int i = 0; i < BT / 32; ++i) {
      const bool ok = m0 + lrow + 32 * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(base + lswz + i * 32 * 128, ok ? a_src + ((size_t)32 * i * K + kt * BK) : A, ok);
    }
  };
"""

# the small-M form: 16 token rows per pass of 128 threads, rows past BT skipped; the split's first atom is at kt0
_SMALL_LOAD_STAGE = """  // activations: thread tid copies chunk tid % 8 of token rows tid / 8 + 16 i ((row mod 8) is the same for every i)
  const int lrow = tid >> 3, lch = tid & 7;
  const uint32_t lswz = swz128(lrow, lch);
  const uint16_t* a_src = A + (size_t)(m0 + lrow) * K + (size_t)kt0 * BK + lch * 8;
  auto load_stage = [&](int slot, int kt) {
    const uint32_t base = x0 + slot * X_BYTES;
    #pragma unroll
    for (int i = 0; i < BT / 16; ++i) {
      const bool ok = m0 + lrow + 16 * i < M;  // rows past M are zero-filled (the source stays a valid address)
      copy_16_async(base + lswz + i * 16 * 128, ok ? a_src + ((size_t)16 * i * K + kt * BK) : A, ok);
    }
  };
"""

def _tma_load_stage(k_coord: str) -> str:
    """Activation stages by TMA: thread 0 arms slot ``slot``'s mbarrier with the tile's bytes and starts one tensor
    copy of BT token rows x 64 k (the map's box) at k element ``k_coord``; the map swizzles it like swz128 (128-byte
    rows, 16-byte chunk c of row r at c ^ (r % 8), in 1024-byte aligned slots) and zero-fills rows past M."""
    return f"""  // activations: one tensor copy per stage (thread 0), completing on the slot's mbarrier
  __shared__ __align__(8) uint64_t xbar[STAGES];
  const uint32_t xbar0 = smem_u32(xbar);
  if (tid == 0) {{
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) mbar_init(xbar0 + 8 * s, 1);
    mbar_init_fence();
  }}
  __syncthreads();
  auto load_stage = [&](int slot, int kt) {{
    if (tid == 0) {{
      mbar_expect_tx(xbar0 + 8 * slot, X_BYTES);
      tma_load_2d(x0 + slot * X_BYTES, &XMAP, {k_coord}, m0, xbar0 + 8 * slot);
    }}
  }};
"""


# the cluster variant of the small-M form (TileConfig.cluster): CLUSTER blocks of adjacent slabs (the same token tile
# and split) share each activation stage. Stage kt is copied by the block of rank kt % CLUSTER, by one multicast
# tensor copy into the same slot of every block of the cluster (one read from L2 instead of CLUSTER), completing on
# each block's own slot mbarrier ("full"). A slot's copying block is fixed (STAGES % CLUSTER == 0); before it refills
# the slot it waits on its "empty" mbarrier for the releases of all 4 x CLUSTER consumer warps (mbar_arrive_peer after
# their wgmma wait). A fifth warp does the copies, so no consumer ever waits for a peer: a slot is refilled as soon as
# the slowest block of the cluster released it, STAGES - 2 stages before it is needed.
_CLUSTER_SETUP = """  // activation slots: full mbarriers [0, STAGES) (this block's copy landed), empty [STAGES, 2 STAGES) (released)
  __shared__ __align__(8) uint64_t xbar[2 * STAGES];
  const uint32_t xbar0 = smem_u32(xbar);
  if (tid == 0) {
    #pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(xbar0 + 8 * s, 1);
      mbar_init(xbar0 + 8 * (STAGES + s), 4 * CLUSTER);  // every consumer warp of every block of the cluster
    }
    mbar_init_fence();
  }
  cluster_sync();  // every block's mbarriers exist before a peer copies into its slots or arrives on them
"""


def _cluster_producer(k_coord: str, pdl: bool) -> str:
    """Warp 4's loop (one lane): for every stage kt of the split, arm this block's full mbarrier of its slot with the
    tile's bytes (once the slot's previous phase has completed), and where this block copies kt, wait until every
    warp of the cluster released the slot, then multicast the tile."""
    wait = "      pdl_wait();  // the previous kernel's outputs (our activations) are visible\n" if pdl else ""
    return f"""  if (warp == 4) {{  // the producer warp: every activation stage of this block, and the cluster's share of copies
    if (lane == 0) {{
{wait}      const int crank = (int)cluster_rank();
      for (int kt = 0; kt < ktiles; ++kt) {{
        const int slot = kt % STAGES;
        const uint32_t phase = (uint32_t)(kt / STAGES - 1) & 1u;  // the slot's previous use (kt >= STAGES)
        if (kt >= STAGES) mbar_wait(xbar0 + 8 * slot, phase);  // its last tile landed here: arm the next phase
        mbar_expect_tx(xbar0 + 8 * slot, X_BYTES);  // this block's slot receives the whole tile, whoever copies it
        if (kt % CLUSTER == crank) {{
          if (kt >= STAGES) mbar_wait(xbar0 + 8 * (STAGES + slot), phase);  // every warp released it
          tma_load_2d_multicast(x0 + slot * X_BYTES, &XMAP, {k_coord}, m0, xbar0 + 8 * slot,
                                (uint16_t)((1u << CLUSTER) - 1));
        }}
      }}
    }}
    return;  // the consumers meet at consumer_sync() (named barrier 1) from here on
  }}
"""


# split-K of the small-M form: every block stores its fp32 partial (common.wgmma.store_partial; the channel-major
# layout before, one 4-byte store per register N apart, cost up to a third of the kernel: 8192x8192 M=64 26.3 us, 20.9
# without any fix-up), WS[tile][split][chunk][thread]; the last block of the tile (self-resetting counter) adds the
# splits 0, 1, ... in that order.
def _small_splitk(own: bool) -> str:
    """The small form's split-K step (``own``: see streamk.splitk)."""
    keep = "own" if own else ""
    return ("""  if (gridDim.z > 1) {
    __shared__ int last_block;
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_FLOATS = WG_ACC_REGS * 128;  // one split's partial of the tile
    float* tile_ws = WS + (size_t)(blockIdx.x * gridDim.y + blockIdx.y) * gridDim.z * SPLIT_FLOATS + tid * 4;
""" + store_partial("tile_ws + (size_t)blockIdx.z * SPLIT_FLOATS", "512")
        + claim_tile("CNT + blockIdx.x * gridDim.y + blockIdx.y", "1", "(int)gridDim.z", "__syncthreads", "return;",
                     own=keep)
        + """    #pragma unroll 1
    for (int z = 0; z < (int)gridDim.z; ++z) {  // rolled: the loads of one pass overlap (one L2 round trip per split)
""" + add_partial("tile_ws + (size_t)z * SPLIT_FLOATS", "512", own=keep, is_own="z == (int)blockIdx.z") + """    }
  }
""")


# the tail option of the two-warpgroup form (launch order): blocks 0 .. tiles - TAIL - 1 take whole tiles (token tile
# fastest), the rest are the TAIL_SPLITS quarters of K of each of the last TAIL tiles
_TAIL_TILE = """  // tail: blocks before `full` take whole tiles; each of the last TAIL tiles runs as TAIL_SPLITS blocks
  const int tiles_x = (M + BT - 1) / BT, full = tiles_x * (N / BC) - TAIL, unit = blockIdx.y;
  const int tail = unit < full ? -1 : (unit - full) / TAIL_SPLITS;   // this block's tail tile, or -1
  const int tile = tail < 0 ? unit : full + tail;
  const int m0 = tile % tiles_x * BT, n0 = tile / tiles_x * BC;"""
_TAIL_KTILES = """const int katoms = K / BK, ktiles = tail < 0 ? katoms : katoms / TAIL_SPLITS;   // k atoms of a slab, of this block
  const int zsplit = tail < 0 ? 0 : (unit - full) % TAIL_SPLITS, kt0 = zsplit * ktiles;   // this block's first k atom"""

# split-K of the tail tiles (the consumer warpgroups; the producer has returned): as _small_splitk, for 256 threads,
# WS[tail tile][split][chunk v][thread], a counter per tail tile
def _tail_splitk(own: bool) -> str:
    """The tail tiles' split-K step (``own``: see streamk.splitk)."""
    keep = "own" if own else ""
    return ("""  if (tail >= 0) {
    __shared__ int last_block;
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_FLOATS = WG_ACC_REGS * THREADS;  // one split's partial of the tile
    float* tile_ws = WS + (size_t)tail * TAIL_SPLITS * SPLIT_FLOATS + tid * 4;
""" + store_partial("tile_ws + (size_t)zsplit * SPLIT_FLOATS", "4 * THREADS")
        + claim_tile("CNT + tail", "1", "TAIL_SPLITS", "consumer_sync", "return;", own=keep)
        + """    #pragma unroll 1
    for (int z = 0; z < TAIL_SPLITS; ++z) {  // in split order: the sum does not depend on which block came last
""" + add_partial("tile_ws + (size_t)z * SPLIT_FLOATS", "4 * THREADS", own=keep, is_own="z == zsplit") + """    }
  }
""")


# split-K of the small-M form in a thread-block cluster (1 x 1 x splits; Plan.cluster_splits): once every block of the
# cluster is past its main loop, the first block's activation slots are free; the other splits store their
# accumulators there (register order, [split - 1][chunk v][thread] x 16 bytes), and the first block adds them in split
# order before the slots become its staging tile. No workspace, no fence, no counter.
_SMALL_SPLITK_CLUSTER = """  if (gridDim.z > 1) {
    constexpr int CHUNKS = WG_ACC_REGS / 4, SPLIT_BYTES = WG_ACC_REGS * 128 * 4;
    const uint32_t rank = cluster_rank();  // = blockIdx.z (the cluster spans the grid's z)
    cluster_sync();  // every block of the cluster is past its main loop: the first block's slots are free
    if (rank > 0) {
      const uint32_t dst = cluster_peer_addr(x0, 0) + (rank - 1) * SPLIT_BYTES + tid * 16;
      #pragma unroll
      for (int v = 0; v < CHUNKS; ++v)
        st_cluster_f32x4(dst + v * 2048, acc[4 * v], acc[4 * v + 1], acc[4 * v + 2], acc[4 * v + 3]);
    }
    cluster_sync();  // the other splits' partials are in the first block
    if (rank > 0) return;
    #pragma unroll 1
    for (int z = 1; z < (int)gridDim.z; ++z)
      #pragma unroll
      for (int v = 0; v < CHUNKS; ++v) {
        uint32_t r[4];
        lds_128(r, x0 + (z - 1) * SPLIT_BYTES + v * 2048 + tid * 16);
        #pragma unroll
        for (int e = 0; e < 4; ++e) acc[4 * v + e] += u32_as_f32(r[e]);
      }
    __syncthreads();  // every partial is read before the staging tile overwrites the slots
  }
"""


def _decode_pairs_x16(pick: str, scales: bool) -> str:
    """f16 only: the two code pairs of half h of k16 step ks from one shift of the word by 8 h: pair 2h (bits 0-3 and
    16-19) as magic + code plus -(magic + zero); pair 2h + 1 (bits 4-7 and 20-23) in place as magic + 16 code, exact
    in f16 (unit spacing up to 2048), times 1/16 plus -(64 + zero) in one exact fma; then the scale. One shift per
    word instead of three."""
    mul = (lambda e: f"act2_mul({e}, ss)") if scales else (lambda e: e)
    return f"""          {pick}
          const uint32_t zz16 = act2_add(zz, x16_bias);
          const uint32_t wh = wq[s][ks] >> (8 * h);
          a[ks][h] = {mul("act2_add(dq_raw(wh, 0), zz)")};
          a[ks][2 + h] = {mul("act2_fma(dq_raw_x16(wh), x16_scale, zz16)")};"""


def _decode_pairs(pick: str, math: str) -> str:
    """The two code pairs of half h of k16 step ks: the table values picked, dq_raw, then the arithmetic."""
    return f"""          {pick}
          #pragma unroll
          for (int r = 0; r < 2; ++r) {{
            uint32_t v = dq_raw(wq[s][ks], 2 * h + r);
            {math}
            a[ks][r * 2 + h] = v;
          }}"""


# one stage's wgmmas into the accumulators (the prefill and the plain small-M form)
_STAGGER_TAKE = ("\n  if (wg == 1) consumer_turn_take();  // start one wgmma group behind warpgroup 0, so that each decodes "
                 "while the other's wgmmas run")
_STAGGER_GIVE = "      if (wg == 0 && kt == 0) consumer_turn_give();  // warpgroup 1 may start\n"

_PLAIN_MMA = """      wgmma_fence_operand(acc);
      wgmma_fence();               // the a[] registers and accumulators written above, before the wgmmas read them
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // k16 steps: +32 bytes inside the swizzled rows = +2 in the address field
        wgmma_k16_rs(acc, a[ks], desc_x + 2 * ks, 1);
      wgmma_commit();
      wgmma_wait<1>();             // the group of kt - 1 has finished (its registers and its slot are free)
      wgmma_fence_operand(acc);"""


def _fold_parts(lay, s_group: int, z_group: int, act: str, full: bool) -> tuple[str, str, str, str]:
    """The fold options of the small-M form. fold=1: the wgmma takes code - zero (exact small integers), tmp = their
    products summed over one scale group, and at the end of the group (waited for) acc += scale * tmp in fp32: saves
    the per-element scale multiply. fold=2 (``full``): the wgmma takes the raw codes (magic + code), sx = the
    activations summed over the same k (a wgmma with an all-ones A, on the otherwise idle tensor pipe), and
    acc += scale * (tmp + zz * sx) with zz = -(magic + zero): saves the zero-point add too. The sx wgmmas follow the
    stage's tmp wgmmas (interleaved, ptxas serializes the pipeline: C7511)."""
    ga = fold_group_atoms(lay)
    one = "0x3C003C00u" if act == "f16" else "0x3F803F80u"
    # group boundaries fall on fixed stages u of the unrolled trip (its length is a multiple of the group, and every
    # split starts on a group): ptxas serializes the wgmmas when the waits depend on a runtime branch (C7511)
    first = f"u % {ga} == 0" if ga else "kt == 0"
    if s_group:
        ss = "act_to_f32((uint16_t)(" + ("sq[s]" if s_group > 0 else "sw") + " >> (16 * h)))"
    else:
        ss = "1.0f"
    if z_group:
        zz = "act_to_f32((uint16_t)(" + ("zq[s]" if z_group > 0 else "zw") + " >> (16 * h)))"
    else:
        zz = _c(lay.zero_const)
    if not full:
        decl = """
  float tmp[WG_ACC_REGS];  // fold: this group's sums of (code - zero) x activation"""
    else:
        decl = f"""
  float tmp[WG_ACC_REGS], sx[WG_ACC_REGS];  // fold: raw sums and activation sums of the current group
  const uint32_t ones[4] = {{{one}, {one}, {one}, {one}}};  // an all-ones A: every row of D is the sum of B over k"""
    fma = "fmaf(ss, fmaf(zz, sx[i], tmp[i]), acc[i])" if full else "fmaf(ss, tmp[i], acc[i])"
    zz_def = f", zz = {zz}" if full else ""
    fence = ("wgmma_fence_operand(tmp);\n{0}wgmma_fence_operand(sx);" if full else "wgmma_fence_operand(tmp);")
    sx_mma = """
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks) wgmma_k16_rs(sx, ones, desc_x + 2 * ks, ks > 0 || !first);""" if full else ""
    fold = f"""        #pragma unroll
        for (int h = 0; h < 2; ++h) {{
          const float ss = {ss}{zz_def};
          #pragma unroll
          for (int j = 0; j < BT / 8; ++j)
            #pragma unroll
            for (int e = 0; e < 2; ++e) {{
              const int i = 4 * j + 2 * h + e;
              acc[i] = {fma};
            }}
        }}"""
    mma = f"""      const bool first = {first};
      {fence.format("      ")}
      wgmma_fence();               // the a[] registers and accumulators written above, before the wgmmas read them
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // the first stage of a group starts the sums afresh (scale-d = 0)
        wgmma_k16_rs(tmp, a[ks], desc_x + 2 * ks, ks > 0 || !first);{sx_mma}
      wgmma_commit();
      if ({"u % " + str(ga) + " == " + str(ga - 1) if ga else "false"}) {{  // the group is complete: fold it into acc
        wgmma_wait<0>();
        {fence.format("        ")}
{fold}
      }} else {{
        wgmma_wait<1>();           // the group of kt - 1 has finished (its registers and its slot are free)
        {fence.format("        ")}
      }}"""
    tail = "" if ga else "\n  // one group over the split: fold it now\n" + fold.replace("\n    ", "\n")
    return decl, mma, fence.format("    "), tail
