"""The register-A kernel's main loop over k atoms (stages), unrolled by U so that ring slots are constants:

  decode the weights of kt (ring slot kt % R) into a[4][4] -> load the weights of kt + PF (global -> registers) ->
  wait for the activations of kt -> (the block barrier and the refill of the slot of kt - 2, where every thread
  copies) -> wgmma.fence, four m64nBTk16 (A from a[ks]), commit -> wgmma_wait<1> (the group of kt - 1 is done: its A
  registers and slot are free) -> (the release of that slot, where a producer refills it).

A wgmma group left in flight across the loop's back edge while a[] is rewritten makes ptxas serialize every wgmma
(C7513), hence wgmma_wait<0> at the end of each trip of U stages. Here: the loop's text, a stage's wgmmas, and the
waits, refills and releases of each way of loading the activations.
"""
from __future__ import annotations

from humming.core.common.emit import Template

MAIN_LOOP = Template("""${prologue}  #pragma unroll
  for (int s = 0; s < PF; ++s)
    if (${ring_empty}s < ktiles) {
${first_fetch}
    }
${pdl_wait}${stagger_take}
  for (int kb = 0; kb < ktiles; kb += U) {
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kt = kb + u, s = u % R;   // ring slot of stage kt
      if (kt >= ktiles) break;
      // A of stage kt: a[ks][r * 2 + h] = channels 16w + g + 8h, k 16 ks + 8 r + 2q (+1), as the activation type
      uint32_t a[4][4];
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)
        #pragma unroll
        for (int h = 0; h < 2; ++h) {
${decode}
        }
      if (kt + PF < ktiles) {  // the ring slot of kt - 1 (decoded last iteration) takes atom kt + PF
${fetch}
      }
${stage_wait}
${refill}      const uint64_t desc_x = desc0 + (uint64_t)(${kt_slot} * (X_BYTES >> 4));   // slot 0's descriptor + the slot's offset
${stage}${release}
    }
    // drain before the loop's back edge: ptxas serializes every wgmma when a group whose A registers it cannot
    // track (a wgmma in flight across the back edge) is pending while a[] is written (C7513); once per U stages
    wgmma_wait<0>();
    ${fence}
  }
  wgmma_wait<0>();
  ${fence_after_loop}${fold_tail}
${final_wait}
""", ring_empty="", pdl_wait="", stagger_take="", refill="", release="", fold_tail="")

# one stage's wgmmas into the accumulators (the forms without fold); ``after_commit``: lines between the commit and
# the wait (the stagger's hand-over, or the small form's late refill)
PLAIN_STAGE = Template("""      wgmma_fence_operand(acc);
      wgmma_fence();               // the a[] registers and accumulators written above, before the wgmmas read them
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // k16 steps: +32 bytes inside the swizzled rows = +2 in the address field
        wgmma_k16_rs(acc, a[ks], desc_x + 2 * ks, 1);
      wgmma_commit();
${after_commit}      ${group_wait}
      wgmma_fence_operand(acc);""", after_commit="")

# the staggered start (RegisterATiles.stagger): warpgroup 1 starts one wgmma group behind warpgroup 0
STAGGER_TAKE = ("\n  if (wg == 1) consumer_turn_take();  // start one wgmma group behind warpgroup 0, so that each decodes "
                "while the other's wgmmas run")
STAGGER_GIVE = "      if (wg == 0 && kt == 0) consumer_turn_give();  // warpgroup 1 may start\n"


def group_wait(occupancy: bool, pad: str) -> str:
    """The wait after a stage's commit: for the group of kt - 1, leaving the stage's own in flight; under the
    occupancy option for the stage's own group (the decoded a[] registers need not outlive the stage). ``pad``:
    the spaces before its comment."""
    if occupancy:
        return f"wgmma_wait<0>();{pad}// this stage's group has finished (occupancy: one set of decoded registers)"
    return f"wgmma_wait<1>();{pad}// the group of kt - 1 has finished (its registers and its slot are free)"


def stage_slots(small: bool, const_slots: bool, split: bool, streamk: bool, unroll_n: int, stages: int):
    """(the slot of stage kt, the slot the refill loads, the phase of stage kt's slot) as expressions: constants of
    the unrolled stage u where the trip is whole rounds of the slots (kb is a multiple of the trip, hence of
    STAGES), unsigned arithmetic otherwise (a mask and a shift, not a signed division's fix-ups)."""
    phase = "((unsigned)kt / STAGES) & 1"
    if const_slots and unroll_n % stages == 0:  # the small form up to 64 tokens
        slot, next_slot = "(u % STAGES)", "((u + LOOKAHEAD) % STAGES)"
    elif not small and not split and unroll_n % stages == 0:
        # the two-warpgroup plain form whose trip is whole rounds of the slots (the default ring of 5 at 6 stages,
        # register_a.planner.RING_2WG): slot and phase from the unrolled stage and the trip (1022 -> 954 SASS
        # instructions per 10 stages at M 1024)
        slot, next_slot = "(u % STAGES)", "((u + LOOKAHEAD) % STAGES)"
        phase = "((u / STAGES) & 1)" if unroll_n % (2 * stages) == 0 else "(((unsigned)kb / STAGES + u / STAGES) & 1)"
    else:
        slot, next_slot = "((unsigned)kt % STAGES)", "(unsigned)next % STAGES"
    if streamk:  # stage kt of a segment is the block's stage it0 + kt (the producer copies segment after segment)
        slot, phase = "((unsigned)(it0 + kt) % STAGES)", "((unsigned)(it0 + kt) / STAGES) & 1"
    return slot, next_slot, phase


def previous_slot(slot: str) -> str:
    """The slot of stage kt - 1 (whose release follows stage kt's wait)."""
    return "((u + STAGES - 1) % STAGES)" if slot == "(u % STAGES)" else "((unsigned)(kt + STAGES - 1) % STAGES)"


# ---- waiting for a stage's activations: TMA (the slot's mbarrier) or this thread's cp.async groups
def tma_stage_wait(slot: str, phase: str) -> str:
    return (f"      mbar_wait(xbar0 + 8 * {slot}, {phase});  // the tensor copy of stage kt has landed (phase: the "
            "slot's use count)")


CP_ASYNC_STAGE_WAIT = ("      copy_wait<LOOKAHEAD - 1>();  // this thread's copies of stage kt have landed\n"
                       "      fence_proxy_async();         // ... and are visible to wgmma (async proxy)")
TMA_FINAL_WAIT = "  fence_proxy_async();"
CP_ASYNC_FINAL_WAIT = "  copy_wait<0>();\n  fence_proxy_async();"


def prologue(commit: str) -> str:
    """Every thread's first LOOKAHEAD activation stages (``commit``: its cp.async group's commit, if any)."""
    return f"""  #pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {{
    if (s < ktiles) load_stage(s, s);{commit}
  }}
"""


def refill(next_slot: str, commit: str) -> str:
    """The block barrier after stage kt's wait, then the refill of the slot of kt - 2."""
    return f"""      __syncthreads();             // everyone's; both warpgroups are done with the wgmmas of kt - 2
      {{
        const int next = kt + LOOKAHEAD;  // refills the slot of kt - 2
        if (next < ktiles) load_stage({next_slot}, next);{commit}
      }}
"""


# ---- releasing a slot where a producer refills it
def cluster_release(prev: str) -> str:
    """The small form's clusters: each warp's arrival on the empty mbarrier of the slot of kt - 1 (``prev``) in the
    block that copies it (none for the last STAGES stages, which are not refilled)."""
    return ("\n      if (lane == 0 && kt > 0 && kt - 1 + STAGES < ktiles)  // this warp is done with stage kt - 1: "
            "release its slot to the block that refills it\n"
            f"        mbar_arrive_peer(xbar0 + 8 * (STAGES + {prev}), (kt - 1) % CLUSTER);")


# the producer warpgroup's forms: the EMPTY mbarrier's address outside the lane-0 branch (computed once per warp in
# uniform registers), then ``arrive``
_RELEASE = Template("""
      {  // this warp is done with stage kt - 1: its slot may be refilled
        const uint32_t empty = xbar0 + 8 * (STAGES + ${prev});
        ${arrive}
      }""")


def producer_release(prev: str, arrive: str) -> str:
    return _RELEASE.fill(prev=prev, arrive=arrive)
