"""The wide register-A W4A8 form's consumer stage loop (its plain and stream-K kernels): a stage's head (wait for the
stage, load and widen the lane's codes, or load the converter warps' fragments), then the stage's token chains: two
128-token halves into one partial, or 64-token quarters into two alternating partials
(humming.core.families.register_a8.chains). After its last read of the slot each warp releases it to the producer.
With stream-K (``segment``) stage kt of a segment is the block's stage it0 + kt."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.families.register_a8.chains import chain_step, wait_promote

# a stage's head: wait for the stage, its codes and scales, widen the fragment (both chain widths)
_STAGE_HEAD = Template("""  #pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {
    const int s = ${stage} % STAGES;${stage_note}
    mbar_wait(xbar0 + 8 * s, (${stage} / STAGES) & 1);  // stage kt's activations, codes and scales have landed
    uint32_t wq[2][4];   // word j = 4 hf + jj = k32 step j / 2, register pair j % 2
    lds_128(wq[0], wlane + s * W_BYTES);
    lds_128(wq[1], wlane + s * W_BYTES + 512);
    ${scale_pick}
    // A of stage kt: a[ks][2 sub] = channel row g, a[ks][2 sub + 1] = row g + 8; k 32 ks + 16 sub + 4 q ..
    uint32_t a[4][4];
    #pragma unroll
    for (int j = 0; j < 8; ++j)${widen}
    const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));   // slot s's activation tile
""", stage="kt", stage_note="")

# the stage's head with the weights widened by the converter warps (RegisterA8Tiles.widened): one wait (the stage's FULL
# mbarrier completes with the producer's copies and the converter warps' arrivals), the lane's 64 bytes of fragments
# from slot kt % A_SLOTS (free again once the consumers release the stage: the converters wait for that)
_WIDENED_STAGE_HEAD = Template("""  #pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {
    const int s = kt % STAGES, u = kt % A_SLOTS;
    mbar_wait(xbar0 + 8 * s, (kt / STAGES) & 1);  // stage kt's activations, scales and widened fragments are in
    // A of stage kt: a[ks][2 sub] = channel row g, a[ks][2 sub + 1] = row g + 8; k 32 ks + 16 sub + 4 q ..
    uint32_t a[4][4];
    #pragma unroll
    for (int ks = 0; ks < 4; ++ks) lds_128(a[ks], alane + u * A_BYTES + ks * (THREADS * 16));
    ${scale_pick}
    const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));   // slot s's activation tile
""")

# the stage's two token halves (128-token chains): chain, wait, release after the last, promote
_HALVES = Template("""    #pragma unroll
    for (int hv = 0; hv < HALVES; ++hv) {  // tokens 128 hv .. 128 hv + 127: rows of the slot, + WT * 128 bytes each
      wgmma_fence_operand(part);
      wgmma_fence();
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // k32 steps: +32 bytes inside the swizzled rows = +2 in the address field
        wgmma_k32_rs(part, a[ks], desc_x + hv * (WT * BK / 16) + 2 * ks, ks > 0);
      wgmma_commit();${stagger_give}
      wgmma_wait<0>();
      wgmma_fence_operand(part);
      if (hv == HALVES - 1) {  // this warp's reads of the slot are done: release it to the producer
        __syncwarp();
        if (lane == 0${release_guard}) {${release_arrive}}
      }
      #pragma unroll
      for (int j = 0; j < WT / 8; ++j) {  // part[4j + 2h + e]: channel row g + 8h, token 128 hv + 8j + 2q + e
${promote}
      }
    }
  }
""")

# lane 0's release of slot s (the EMPTY arrival; the cluster option's in humming.core.families.register_a8.cluster)
RELEASE = {"release_guard": "", "release_arrive": " fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + s)); "}


def stage_head(scale_pick: str, widen: str, segment: bool = False) -> str:
    """The head of stage kt: the consumers' own widening of the lane's codes (``widen``: the body of the loop over
    its words); with ``segment`` the block's stage it0 + kt."""
    if not segment:
        return _STAGE_HEAD.fill(scale_pick=scale_pick, widen=widen)
    return _STAGE_HEAD.fill(scale_pick=scale_pick, widen=widen, stage="(it0 + kt)",
                            stage_note="   // the block's stage it0 + kt")


def widened_stage_head(scale_pick: str) -> str:
    """The head of stage kt with the converter warps' fragments."""
    return _WIDENED_STAGE_HEAD.fill(scale_pick=scale_pick)


def _give_turn(segment: bool, first_half: bool = False) -> str:
    """Warpgroup 0 gives warpgroup 1 its turn after its first chain of the block's first stage (RegisterA8Tiles.stagger)."""
    first = "it0 + kt == 0" if segment else "kt == 0"
    return f"if (wg == 0 && {first}{' && hv == 0' if first_half else ''}) consumer_turn_give();  // warpgroup 1 may start"


def halves_loop(head: str, to_f32: str, stagger: bool, segment: bool = False, release: dict = RELEASE) -> str:
    """The stage loop with 128-token chains: two token halves (chain, wait, promote) sharing the widened fragment."""
    promote = "\n".join(f"        facc[WG_ACC_REGS * hv + 4 * j + {i}] += {to_f32}(part[4 * j + {i}]) * sc{i // 2};"
                        for i in range(4))  # the scales of the thread's two channels: sc0 row g, sc1 row g + 8
    give = "\n      " + _give_turn(segment, first_half=True) if stagger else ""
    return head + _HALVES.fill(stagger_give=give, promote=promote, **release)


def quarter_loop(head: str, to_f32: str, chains: int = 4, stagger: bool = False, give_after: int = 1,
                 segment: bool = False, release: dict = RELEASE) -> str:
    """The stage loop with ``chains`` m64n64k32 token quarters per stage (4: 256 tokens, 3: a tile of 192 fitted to
    M) and two partials (pa, pb, alternating): chain c + 1 is issued before chain c is waited for and promoted, so
    each warpgroup keeps a chain queued on the tensor pipe while it promotes. (The last chain's promotion stays in its
    stage: deferred under the next stage's first chain, ptxas cannot tell that its partial was waited for across the
    loop edge and injects a full wait, C7517.) With ``stagger`` warpgroup 0 gives the turn after its chain
    ``give_after`` - 1 is issued."""
    if chains < 2:
        raise ValueError(f"the quarter loop overlaps two chains at least, not {chains}")
    ind = "    "
    give = f"{ind}{_give_turn(segment)}\n" if stagger else ""
    release_code = (f"{ind}__syncwarp();   // this warp's reads of the slot are done: release it to the producer\n"
                    f"{ind}if (lane == 0{release['release_guard']}) {{{release['release_arrive']}}}\n")
    last = wait_promote(chains - 1, 0, to_f32, ind).split("\n", 1)
    body = chain_step(0, ind) + (give if give_after == 1 else "")
    for c in range(1, chains):
        body += chain_step(c, ind) + (give if give_after == c + 1 else "") + wait_promote(c - 1, 1, to_f32, ind)
    return head + body + last[0] + "\n" + release_code + last[1] + "  }\n"
