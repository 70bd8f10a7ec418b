"""Ablations (GPU): what limits a planned kernel? Each variant is the generated source with one part changed (the
weight loads re-reading one atom so they hit L2, a cheaper decode, a step left out): many results are WRONG by
design (the error is printed next to the time); only the time says something: if removing X barely changes the time,
X is not what limits the kernel. Some variants are correct alternatives (marked so below): an A/B of a code change
before it goes into the generator. CUDA-graph replay over weight copies past the L2: one graph per variant (captured
with its kernels), then all timed in balanced rounds (``--rounds``, default 8, rounded up to a whole design, of
``--reps`` 5 replays; humming.tuner.balanced_orders: every variant every position and predecessor equally often), the
median. Writes OUT/ablate_<scheme>_m<M>.json (with the GPU's name).

    python scripts/ablate.py --scheme w4a16 --m 1 --shapes 28672x8192,8192x8192 [--variants l2only,dq5] [--out DIR]
        [--knob NAME=VALUE ...] (tuning knobs in force while planning, JSON values)

A variant "a+b" applies both; "pfN", "lbN", "sleepN", "pingpongN", "xeveryN", "l2pfN" take a number (see
_PARAMETERISED); "w0" and "late_refill" are register-A variants too. A variant whose patterns do not all match the planned kernel's source is reported, not timed
(tests/kernels/test_ablate_variants.py checks that each still matches the kernels it was written for).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import torch  # noqa: E402

import humming  # noqa: E402
from humming.core.families.register_a import streamk as streamk  # noqa: E402
from humming.core.runtime import compiled, launch  # noqa: E402  (where the runtime gets its sources and workspaces)
from humming.core.tuning import knobs  # noqa: E402
from humming.devices.nvidia.tma import BULK_G2S, MBAR_WAIT_POLITE  # noqa: E402  (the backend's helpers)
from humming.tuner import copies_for, graph_timer, rotated_samples  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from ab_knobs import forget_plans, parse_value  # noqa: E402

# mma_sync_rs: helpers and the stage's MMAs (replacement text: backslashes doubled for re.sub)
MMA_SYNC_HELPERS = r"""__device__ __forceinline__ void sm_mma16816(float* c, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
"""
MMA_SYNC_STAGE = r"""if (first) {
        #pragma unroll
        for (int i = 0; i < WG_ACC_REGS; ++i) tmp[i] = 0.0f;
      }
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        #pragma unroll
        for (int tt = 0; tt < BT / 16; ++tt) {  // tokens 16 tt .. +15: matrices (8 tokens, 8 k) x 4 from ldmatrix
          uint32_t b[4];
          const int tok = 16 * tt + ((lane >> 4) << 3) + (lane & 7), chunk = 2 * ks + ((lane >> 3) & 1);
          ldmatrix_x4(b, x0 + (u % STAGES) * X_BYTES + tok * 128 + ((chunk ^ (tok & 7)) << 4));
          sm_mma16816(tmp + 8 * tt, a[ks], b[0], b[1]);
          sm_mma16816(tmp + 8 * tt + 4, a[ks], b[2], b[3]);
        }
      }"""


# small register-A form: the weight atoms staged through a ring of WRING shared-memory slots by bulk copies (thread 0,
# an mbarrier per slot, WRING atoms ahead) instead of a register ring: a correct prototype
WSMEM_SETUP = r"""constexpr int WRING = 8;  // weight ring: atoms in flight in shared memory
  __shared__ __align__(128) uint32_t wsm[WRING][ATOM_WORDS];
  __shared__ __align__(8) uint64_t wbar[WRING];
  const uint32_t wbar0 = smem_u32(wbar), wsm0 = smem_u32(wsm);
  if (tid == 0) {
    #pragma unroll
    for (int s = 0; s < WRING; ++s) mbar_init(wbar0 + 8 * s, 1);
    mbar_init_fence();
  }
  __syncthreads();
  auto load_weights = [&](int kt) {  // thread 0: atom kt of this block's slab into slot kt % WRING
    if (tid == 0 && kt < ktiles) {
      const uint32_t bar = wbar0 + 8 * (kt % WRING);
      mbar_expect_tx(bar, ATOM_WORDS * 4);
      bulk_copy_g2s(wsm0 + (kt % WRING) * ATOM_WORDS * 4, B + ((size_t)slab * katoms + kt0 + kt) * ATOM_WORDS,
                    ATOM_WORDS * 4, bar);
    }
  };
  auto load_stage = [&](int slot, int kt) {"""
WSMEM_WAIT = r"""uint32_t a[4][4];
      uint32_t wcur[4];
      mbar_wait(wbar0 + 8 * (kt % WRING), (kt / WRING) & 1);
      lds_128(wcur, wsm0 + ((kt % WRING) * ATOM_WORDS + w * 128 + lane * 4) * 4);"""


def _indented(text: str) -> str:
    """Code as it stands in the stream-K kernel's segment loop (two more spaces on every line that has any)."""
    return "\n".join(("  " + ln) if ln else ln for ln in text.split("\n"))


# name -> [(regex, replacement)]; a variant whose patterns do not all match the kernel's source is skipped
VARIANTS: dict[str, list[tuple[str, str]]] = {
    # stream kernel: every refill re-reads one of the slab's first 16 atoms (a 14-32 MB working set that stays in
    # L2): the time without DRAM
    "l2only": [(r"load_g128\(buf\[\(s \+ PF\) % R\]\[c\], p \+ c \* 128\)",
                "load_g128(buf[(s + PF) % R][c], wbase + (size_t)((atom + PF * WARPS_K) % 16) * ATOM_U4 * 4 + c * 128)")],
    # stream kernel: no weight loads at all (the ring gets the address bits): the time of the arithmetic alone
    "nomem": [(r"load_g128\(buf\[\(s \+ PF\) % R\]\[c\], p \+ c \* 128\)",
               "{ uint32_t* d_ = buf[(s + PF) % R][c]; d_[0] = d_[1] = d_[2] = d_[3] = (uint32_t)(size_t)(p + c * 128); }")],
    # two-warpgroup stream-K form without its split tiles' partials and fix-up (wrong results)
    "nofix_sk": [(r"if \(ktiles != katoms\) \{", "if (false) {")],
    # two-warpgroup stream-K form: whole-tile segments skip their epilogue (scales, staging tile, copy-out; wrong
    # results): what the epilogues between a block's segments cost
    "noepi_sk": [(r"(\n    // acc\[4j \+ 2h \+ e\] = channel)",
                  "\n    if (ktiles == katoms) {  // (ablation) no epilogue for whole tiles\n      it0 += ktiles;\n"
                  "      continue;\n    }\\1")],
    # 34 KiB more shared memory (a static array the kernel never uses): the stream-K form's staging tile's footprint
    "smempad": [(r"(extern __shared__ __align__\(1024\) unsigned char smem\[\];)",
                 r"\1\n  __shared__ __align__(16) unsigned char smem_pad[34816];\n"
                 r"  if (M < 0) C[0] = smem_pad[(blockIdx.x * 97) % 34816];")],
    # two-warpgroup forms: the producer thread polls its slots' releases without sleeping (the earlier code; correct):
    # what the polite wait saves
    "busypoll": [(r"mbar_wait_polite\(xbar0 \+ 8 \* \(STAGES \+ s\)", "mbar_wait(xbar0 + 8 * (STAGES + s)")],
    # the wide W4A8 form's stream-K (persistent) kernel with its token-scale warp's wait for a free buffer polite
    # (nanosleep between polls; politets_sk8), and its producer's wait for a free slot too (politeall_sk8): Nsight
    # found that warp's busy poll the kernel's top stall line (1.26 M polls a GEMM at 8192x8192 M=4096 with 128
    # persistent blocks), an issue slot stolen from the consumers of its SM sub-partition (correct)
    "politets_sk8": [(r'(\nextern "C" __global__)', lambda m: MBAR_WAIT_POLITE + m.group(1)),
                     (r"if \(n >= 2\) mbar_wait\(tbar0", "if (n >= 2) mbar_wait_polite(tbar0")],
    "politeall_sk8": [(r'(\nextern "C" __global__)', lambda m: MBAR_WAIT_POLITE + m.group(1)),
                      (r"if \(n >= 2\) mbar_wait\(tbar0", "if (n >= 2) mbar_wait_polite(tbar0"),
                      (r"if \(it >= STAGES\) mbar_wait\(xbar0 \+ 8 \* \(STAGES \+ s\)",
                       "if (it >= STAGES) mbar_wait_polite(xbar0 + 8 * (STAGES + s)")],
    # the wide W4A8 form's producer polls its slots' releases politely, as the two-warpgroup W4A16 form's does
    # (mbar_wait_polite added before the kernel; correct)
    "polite8": [(r'(\nextern "C" __global__)', lambda m: MBAR_WAIT_POLITE + m.group(1)),
                (r"mbar_wait\(xbar0 \+ 8 \* \(STAGES \+ s\)", "mbar_wait_polite(xbar0 + 8 * (STAGES + s)")],
    # the W4A16 stream-K form with the claim-by-the-last split-tile protocol (every part stored, the last to finish
    # adds them; the earlier protocol) instead of the hand-over to the tile's first block (correct; main() makes the
    # workspace big enough for its two slots per block)
    "claimlast": [(re.escape(_indented(streamk.HANDOVER)), lambda m: _indented(streamk.splitk()))],
    # split-K fix-ups reading the finishing block's own partial back from the workspace, as the earlier code did,
    # instead of from its registers (correct: the same values)
    "ownread": [(r"if \((bj == \(int\)blockIdx\.y|z == \(int\)blockIdx\.z|z == zsplit)\) \{  // this block's own",
                 "if (false) {  // this block's own")],
    # the small register-A form without its split-K fix-up (wrong with splits > 1)
    "nofix_rs": [(r"if \(gridDim\.z > 1\) \{", "if (false) {")],
    # fold=2 stream kernel without its activation sums (two chains; wrong results): what sums computed once per block
    # instead of per warp and atom could save
    "nosx2": [(r"mma_k16\(\(ks & 1\) \? sx2\[j\] : sx\[j\], ones,", "if (false) mma_k16((ks & 1) ? sx2[j] : sx[j], ones,")],
    # no split-K fix-up: each block writes its partial straight to the output (wrong with splits > 1): what the
    # workspace round trip (write, fence, counter, read back) costs
    "nofix": [(r"if \(splits > 1\) \{", "if (false) {")],
    # no main loop: launch, prologue, split-K reduction and epilogue only
    "empty": [(r"const int natoms = k_per_split / 64 / WARPS_K;", "const int natoms = 0;")],
    # x_smem stream kernel without staging its activations / its table rows (wrong results): what the staging costs
    "noxstage": [(r"stage_rows<XS_TOKENS, XS_K / 8>\(x_s, [^;]*;", "")],
    "notables": [(r"stage_rows<64, 8>\(ss_s, [^;]*;", "")],
    # stream kernel without the activation ring: no activation or scale loads (constants from the addresses)
    "noxs": [(r"load_g128_cached\(ss8, S \+ \(size_t\)\(atom \* 64 / 128\) \* N \+ n0 \+ \(lane >> 2\) \* 8\);",
              "ss8[0] = ss8[1] = ss8[2] = ss8[3] = 0x3c003c00u + atom;"),
             (r"load_g32\(xp\)", "(uint32_t)(size_t)xp"), (r"load_g32\(xp \+ 8\)", "(uint32_t)(size_t)(xp + 8)")],
    # register-A forms: the same for their weight chunks
    "l2only_rs": [(r"load_g128\(wq\[\(s \+ PF\) % R\], p\);",
                   "load_g128(wq[(s + PF) % R], wsrc + (size_t)((kt + PF) % 16) * ATOM_WORDS);")],
    "nomem_rs": [(r"load_g128\(wq\[\(s \+ PF\) % R\], p\);",
                  "{ uint32_t* d_ = wq[(s + PF) % R]; d_[0] = d_[1] = d_[2] = d_[3] = (uint32_t)(size_t)p; }")],
    # stream kernel: each channel tile's k16 steps into two partial sums (even / odd ks), added at the fold: halves
    # the chain of dependent HMMAs per atom (a correct variant)
    "tmp2": [(r"float tmp\[TOKEN_TILES\]\[4\];", "float tmp[TOKEN_TILES][4], tmp2[TOKEN_TILES][4];"),
             (r"for \(int e = 0; e < 4; \+\+e\) tmp\[j\]\[e\] = 0.0f;",
              "for (int e = 0; e < 4; ++e) tmp[j][e] = tmp2[j][e] = 0.0f;"),
             (r"mma_k16\(tmp\[j\], a, xa\[ks\]", "mma_k16((ks & 1) ? tmp2[j] : tmp[j], a, xa[ks]"),
             (r"fmaf\(zf, sx\[j\]\[e\], tmp\[j\]\[e\]\)", "fmaf(zf, sx[j][e], tmp[j][e] + tmp2[j][e])")],
    # the same for the activation sums (an all-ones A): two chains of two HMMAs (a correct variant)
    "sx2": [(r"float sx\[TOKEN_TILES\]\[4\];", "float sx[TOKEN_TILES][4], sx2[TOKEN_TILES][4];"),
            (r"for \(int e = 0; e < 4; \+\+e\) sx\[j\]\[e\] = 0.0f;",
             "for (int e = 0; e < 4; ++e) sx[j][e] = sx2[j][e] = 0.0f;"),
            (r"mma_k16\(sx\[j\], ones,", "mma_k16((ks & 1) ? sx2[j] : sx[j], ones,"),
            (r"(\n\s*)#pragma unroll\n(\s*)for \(int tt = 0; tt < 4; \+\+tt\) \{",
             r"\1for (int j = 0; j < TOKEN_TILES; ++j) for (int e = 0; e < 4; ++e) sx[j][e] += sx2[j][e];\1#pragma unroll\n\2for (int tt = 0; tt < 4; ++tt) {")],
    # the reverse of sx2 where the generator now emits two chains: one chain of four again (A/B of that change)
    "sx1": [(r"\(ks & 1\) \? sx2\[j\] : sx\[j\]", "sx[j]")],
    # small register-A form at 128 tokens (shared memory allows 2 blocks per SM): a deeper weight ring, registers for
    # 2 blocks per SM instead of 3 (correct variants)
    "pf6_rs": [(r"constexpr int PF = 4, R = PF \+ 1;", "constexpr int PF = 6, R = PF + 1;"),
               (r"__launch_bounds__\(cfg::THREADS, 3\)", "__launch_bounds__(cfg::THREADS, 2)")],
    "pf8_rs": [(r"constexpr int PF = 4, R = PF \+ 1;", "constexpr int PF = 8, R = PF + 1;"),
               (r"__launch_bounds__\(cfg::THREADS, 3\)", "__launch_bounds__(cfg::THREADS, 2)")],
    # the small form's deep ring (128 tokens x 6 stages) deeper still (correct variants)
    "pf10_deep": [(r"constexpr int PF = 8, R = PF \+ 1;", "constexpr int PF = 10, R = PF + 1;")],
    "pf8_deep": [(r"constexpr int PF = 10, R = PF \+ 1;", "constexpr int PF = 8, R = PF + 1;")],
    "pf12_deep": [(r"constexpr int PF = 8, R = PF \+ 1;", "constexpr int PF = 12, R = PF + 1;")],
    # the two-warpgroup register-A form: another weight ring than the plan's (its consumers have 232 registers;
    # correct variants; the knob register_a.prefetch does the same through the planner)
    "pf6_2wg": [(r"constexpr int PF = \d+, R = PF \+ 1;", "constexpr int PF = 6, R = PF + 1;")],
    "pf8_2wg": [(r"constexpr int PF = \d+, R = PF \+ 1;", "constexpr int PF = 8, R = PF + 1;")],
    # register-A forms: the weight chunk through the L2 only (ld.global.cg; a correct variant)
    "cg_rs": [(r"load_g128\(wq\[([^\]]+)\], p\);",
               r'{ uint32_t* d_ = wq[\1]; asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(d_[0]), "=r"(d_[1]), "=r"(d_[2]), "=r"(d_[3]) : "l"(p)); }')],
    # small register-A form, fold=1: the group's fold waits for all but the newest wgmma group instead of draining the
    # queue (wrong results; ptxas then serializes every wgmma, C7514: 51.4 -> 61.5 us at 28672x8192 M=16)
    "defer_rs": [(r"(if \(u % 2 == 1\) \{  // the group is complete: fold it into acc\n\s*)wgmma_wait<0>\(\);",
                  r"\1wgmma_wait<1>();")],
    # small register-A form, fold=1: the four k16 wgmmas of a stage into two accumulator sets (even / odd ks), two
    # chains of two instead of one of four (a correct variant)
    "chain2_rs": [(r"float tmp\[WG_ACC_REGS\];", "float tmp[WG_ACC_REGS], tmp2[WG_ACC_REGS];"),
                  (r"wgmma_fence_operand\(tmp\);", "wgmma_fence_operand(tmp); wgmma_fence_operand(tmp2);"),
                  (r"wgmma_k16_rs\(tmp, a\[ks\], desc_x \+ 2 \* ks, ks > 0 \|\| !first\);",
                   "wgmma_k16_rs((ks & 1) ? tmp2 : tmp, a[ks], desc_x + 2 * ks, ks > 1 || !first);"),
                  (r"fmaf\(ss, tmp\[i\], acc\[i\]\)", "fmaf(ss, tmp[i] + tmp2[i], acc[i])")],
    # small register-A form at 16-32 tokens (8 stages, PF 7): a deeper weight ring (R stays a multiple of STAGES / 2 so
    # that the constant slots hold; correct variants)
    "pf11_16": [(r"constexpr int PF = 7, R = PF \+ 1;", "constexpr int PF = 11, R = PF + 1;")],
    "pf15_16": [(r"constexpr int PF = 7, R = PF \+ 1;", "constexpr int PF = 15, R = PF + 1;")],
    # small register-A form: no wait for the stage's activation tile (its tensor copy may still be in flight: wrong
    # results): what waiting for the activations costs
    "noxwait_rs": [(r"mbar_wait\(xbar0 \+ 8 \* \(u % STAGES\), \(\(unsigned\)kt / STAGES\) & 1\);", "")],
    # small register-A form: only the prologue's activation stages are copied, the slots never refilled (wrong
    # results): the time without the activations' L2 -> shared traffic (as much as the weights' at 16 tokens)
    "xonce_rs": [(r"if \(next < ktiles\) load_stage\(\(\(u \+ LOOKAHEAD\) % STAGES\), next\);", ""),
                 (r"mbar_wait\(xbar0 \+ 8 \* \(u % STAGES\), \(\(unsigned\)kt / STAGES\) & 1\);",
                  "if (kt < LOOKAHEAD) mbar_wait(xbar0 + 8 * (u % STAGES), ((unsigned)kt / STAGES) & 1);")],
    # small register-A form without its wgmmas (the decoded registers folded into the sums so that the decode stays;
    # wrong results): what the tensor-core work and its waits cost
    "nowgmma_rs": [(r"wgmma_k16_rs\(tmp, a\[ks\], desc_x \+ 2 \* ks, ks > 0 \|\| !first\);",
                    "tmp[ks] += __uint_as_float((a[ks][0] ^ a[ks][1] ^ a[ks][2] ^ a[ks][3]) & 0x3fffffffu);")],
    # small register-A form with no main loop / half of it (wrong results): the fixed part (launch, prologue, split-K
    # fix-up, epilogue) and the time per stage
    "noloop_rs": [(r"ktiles = k_per_split / BK;", "ktiles = 0;")],
    "half_rs": [(r"ktiles = k_per_split / BK;", "ktiles = k_per_split / BK / 2;")],
    # small register-A form without its group-scale loads (constants; wrong results)
    "noscale_rs": [(r"sq\[s\] = load_g32\([^;]*;", "sq[s] = 0x3c003c00u;"),
                   (r"sq\[\(s \+ PF\) % R\] = load_g32\([^;]*;", "sq[(s + PF) % R] = 0x3c003c00u;")],
    # small register-A form: the codes go to the wgmmas with one add instead of the decode (wrong results): what
    # the decode's masks and multiply cost
    "nodecode_rs": [(r"a\[ks\]\[h\] = act2_add\(dq_raw\(wh, 0\), zz\);", "a[ks][h] = act2_add(wh, zz);"),
                    (r"a\[ks\]\[2 \+ h\] = act2_fma\(dq_raw_x16\(wh\), x16_scale, zz16\);",
                     "a[ks][2 + h] = act2_add(wh, zz16);")],
    # two-warpgroup register-A form (plain and stream-K) without the group scale's multiply (16 HMUL2 a stage; the
    # unused scale loads go too) / with each fragment word made by one mask of the codes instead of the decode (a LOP3
    # or a shift and a LOP3 instead of LOP3, HADD2 or HFMA2, HMUL2; the scales feed the masks so their loads stay;
    # wrong results, finite values below 1): what the decode's ALU work costs, e.g. under the power cap
    "noscale_2wg": [(r"a\[ks\]\[h\] = act2_mul\(act2_add\(dq_raw\(wh, 0\), zz\), ss\);",
                     "a[ks][h] = act2_add(dq_raw(wh, 0), zz);"),
                    (r"a\[ks\]\[2 \+ h\] = act2_mul\(act2_fma\(dq_raw_x16\(wh\), x16_scale, zz16\), ss\);",
                     "a[ks][2 + h] = act2_fma(dq_raw_x16(wh), x16_scale, zz16);")],
    "nodecode_2wg": [(r"a\[ks\]\[h\] = act2_mul\(act2_add\(dq_raw\(wh, 0\), zz\), ss\);",
                      "a[ks][h] = (wh ^ ss) & 0x3BFF3BFFu;"),
                     (r"a\[ks\]\[2 \+ h\] = act2_mul\(act2_fma\(dq_raw_x16\(wh\), x16_scale, zz16\), ss\);",
                      "a[ks][2 + h] = ((wh >> 4) ^ ss) & 0x3BFF3BFFu;")],
    # two-warpgroup register-A plain form: half of K (the fixed part is 2 x half - whole; wrong results), the weight
    # loads re-reading two atoms that stay in L2 (their memory latency), two stage trips per drain instead of one (U =
    # 4 R: the wgmma_wait<0> at the loop's back edge every 20 stages instead of 10; correct)
    "half_2wg": [(r"const int ktiles = K / BK;", "const int ktiles = K / BK / 2;")],
    "l2w_2wg": [(r"const uint32_t\* p = wsrc \+ \(size_t\)kb \* ATOM_WORDS \+ \(u \+ PF\) \* ATOM_WORDS;",
                 "const uint32_t* p = wsrc + (size_t)((u + PF) % 2) * ATOM_WORDS;")],
    "u20_2wg": [(r"constexpr int U = 2 \* R;", "constexpr int U = 4 * R;")],
    # two-warpgroup plain form without its epilogue (scales, staging tile, copy-out; one store kept so that the
    # accumulators stay live; wrong results): what the tile's epilogue costs
    "noepi_2wg": [(r"(\n  // acc\[4j \+ 2h \+ e\] = channel)",
                   "\n  if (M > 0) {  // (ablation) no epilogue\n    if (acc[0] == 1234.5f && acc[WG_ACC_REGS - 1] == 0.5f) "
                   "C[tid] = 1;\n    return;\n  }\\1")],
    # register-A W4A16 forms (g128) with each atom's scale row addressed from its index (the earlier code) instead of
    # the walking row pointer (correct): what the walk saves
    "nowalk_2wg": [(r"sq\[s\] = load_g32\(sp\);  if \(\(\(unsigned\)\(((?:kt0 \+ )?)s\) \+ 1\) % 2 == 0\) sp \+= N;[^\n]*",
                    r"sq[s] = load_g32(S + (size_t)((unsigned)(\1s) * BK / 128) * N + tab);"),
                   (r"sq\[\(s \+ PF\) % R\] = load_g32\(sp\);  if \(\(\(unsigned\)\(((?:kt0 \+ )?)kt \+ PF\) \+ 1\) % 2 == 0\) "
                    r"sp \+= N;[^\n]*",
                    r"sq[(s + PF) % R] = load_g32(S + (size_t)((unsigned)(\1kt + PF) * BK / 128) * N + tab);")],
    # small register-A form: the stage's k16 wgmmas replaced by mma.sync m16n8k16 per warp (B by ldmatrix from the
    # 128-byte-swizzled slot; the accumulator layouts agree): a correct variant
    "mmasync_rs": [(r'(extern "C" __global__)', MMA_SYNC_HELPERS.replace("\\", "\\\\") + r"\1"),
                   (r"wgmma_fence_operand\(tmp\);\n\s*wgmma_fence\(\);[^\n]*\n\s*#pragma unroll\n[^\n]*\n\s*"
                    r"wgmma_k16_rs\(tmp, a\[ks\], desc_x \+ 2 \* ks, ks > 0 \|\| !first\);\n\s*wgmma_commit\(\);",
                    MMA_SYNC_STAGE.replace("\\", "\\\\"))],
    "wsmem_rs": [(r'(extern "C" __global__)', BULK_G2S.replace("\\", "\\\\") + r"\1"),
                 (r"auto load_stage = \[&\]\(int slot, int kt\) \{", WSMEM_SETUP.replace("\\", "\\\\")),
                 (r"load_g128\(wq\[s\], p\);[^\n]*", "(void)p;"),
                 (r"load_g128\(wq\[\(s \+ PF\) % R\], p\);[^\n]*", "(void)p;"),
                 (r"(\n  pdl_wait\(\);)", r"\n  for (int s = 0; s < WRING; ++s) load_weights(s);\1"),
                 (r"uint32_t a\[4\]\[4\];", WSMEM_WAIT.replace("\\", "\\\\")),
                 (r"wq\[s\]\[ks\] >> \(8 \* h\)", "wcur[ks] >> (8 * h)"),
                 (r"(if \(next < ktiles\) load_stage\(\(\(u \+ LOOKAHEAD\) % STAGES\), next\);)",
                  r"\1\n        load_weights(kt + WRING);")],
    # small register-A form, occupancy option: the even stage's wgmma group is waited for with the odd stage's (one
    # wait per two atoms; its decoded registers stay live across the odd stage's decode: 16 more registers; a correct
    # prototype)
    "pair_rs": [(r"\} else \{\n\s*wgmma_wait<0>\(\);\s*// this stage's group has finished[^\n]*\n\s*wgmma_fence_operand\(tmp\);\n\s*\}",
                 "}")],
    # register-A W4A8 kernel (wide form): the int4 codes go to the wgmmas unwidened / only one of the four promotions
    # of each partial row pair is kept (wrong results): what the widening and the per-group promotion cost at M = 4096.
    # (Dropping every promotion leaves the partials unread and ptxas then deletes the wgmmas themselves: such a
    # variant times a kernel without tensor math.)
    "nowiden_rs8": [(r"int4_to_e4m3x8\((wq\[j >> 2\]\[j & 3\]), (a\[[^;]*\]), (a\[[^;]*\])\);",
                     r"{ \2 = \1; \3 = \1 >> 4; }")],
    # the wide / stream-K W4A8 forms with the lane's slot addresses computed (ptxas then recomputes them at every
    # stage) instead of carrying a zero loaded from shared memory (correct)
    "unheld_rs8": [(r"const uint32_t held0 = smem_u32\(held\), zero = lds_32\(held0 \+ 16\);",
                    "const uint32_t zero = 0u;")],
    # the wide / stream-K W4A8 forms building each stage's activation descriptor (9 more uniform instructions a stage)
    # instead of adding the slot's offset to slot 0's (correct)
    "undesc0_rs8": [(r"desc0 \+ \(uint64_t\)\(s \* \(X_BYTES >> 4\)\)", "make_smem_desc(x0 + s * X_BYTES)")],
    # the W4A16 register-A kernels as the earlier code had them: signed slot / phase / scale-row arithmetic and each stage's
    # descriptor built from its slot's address (correct; e.g. 1096 -> 1210 SASS instructions per 10 stream-K stages)
    "signed_rs": [(r"\(unsigned\)(\((?:it0 \+ )?kt(?: \+ STAGES - 1)?\)|kt|next)( [%/] STAGES)", r"\1\2"),
                  (r"\(size_t\)\(\(unsigned\)\(", "(size_t)(("),
                  (r"desc0 \+ \(uint64_t\)\((.*?) \* \(X_BYTES >> 4\)\)", r"make_smem_desc(x0 + \1 * X_BYTES)")],
    # the wide W4A8 form releasing a slot with the mbarrier arrive alone (no proxy fence before it: a MEMBAR.ALL.CTA
    # and a FENCE.VIEW.ASYNC.S a stage and warp in the SASS): the slot's shared loads have returned before the arrive
    # (their values fed the waited wgmmas), so the producer's copies cannot overtake them (correct in practice)
    "nofence_rs8": [(r"if \(lane == 0\) \{ fence_proxy_async_smem\(\); mbar_arrive\(xbar0 \+ 8 \* \(STAGES \+ s\)\); \}",
                     "if (lane == 0) { mbar_arrive(xbar0 + 8 * (STAGES + s)); }")],
    # what the release's MEMBAR does (nofence_rs8 measured 4-5% SLOWER): the fence in every lane (no divergent branch), a CTA memory barrier without the proxy fence, and the release moved after the
    # last quarter's promotion (all correct)
    "fenceall_rs8": [(r"__syncwarp\(\);   // this warp's reads of the slot are done: release it to the producer\n(\s*)"
                      r"if \(lane == 0\) \{ fence_proxy_async_smem\(\); ",
                      r"fence_proxy_async_smem();\n\1__syncwarp();\n\1if (lane == 0) { ")],
    "membar_rs8": [(r"if \(lane == 0\) \{ fence_proxy_async_smem\(\); mbar_arrive\(xbar0 \+ 8 \* \(STAGES \+ s\)\); \}",
                    "if (lane == 0) { __threadfence_block(); mbar_arrive(xbar0 + 8 * (STAGES + s)); }")],
    "latearrive_rs8": [(r"(\n\s*__syncwarp\(\);   // this warp's reads of the slot are done: release it to the producer\n"
                        r"\s*if \(lane == 0\) \{ fence_proxy_async_smem\(\); mbar_arrive\(xbar0 \+ 8 \* \(STAGES \+ s\)\); \})"
                        r"((?:\n\s*wgmma_fence_operand\(pb\);\n\s*#pragma unroll\n\s*for \(int j = 0; j < WT / 8; \+\+j\) \{[^}]*\}))",
                        r"\2\1")],
    # the wide W4A8 form without what a synthetic wgmma loop of its shape (no memory traffic) leaves out (wrong
    # results, timing only): the activation copies after the first ring of slots (nox_rs8: later stages re-read stale
    # slots; the weights and scales still come), the epilogue's global stores (noepi_rs8). (Dropping the consumers'
    # waits for the stages is no variant: a block could exit with copies into its shared memory in flight, a launch
    # failure.)
    "nox_rs8": [(r"mbar_expect_tx\(full, STAGE_TX\);\n(\s*)tma_load_2d\(x0 \+ s \* X_BYTES, &XMAP, kt \* BK, m0, full\);",
                 r"mbar_expect_tx(full, kt < STAGES ? STAGE_TX : STAGE_TX - X_BYTES);\n\1"
                 r"if (kt < STAGES) tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);")],
    "noepi_rs8": [(r"if \(m0 \+ row < M\) \{\n(\s*)uint32_t r\[4\];", r"if (m0 + row < 0) {\n\1uint32_t r[4];")],
    # the wide W4A8 form's per-stage synchronisation moved off the stage's critical path (correct variants; a synthetic
    # loop of its shape pays ~80 cycles a stage for a wait on a completed phase at the
    # stage's head and ~130 for the release after its last wait): the wait for stage kt + 1's copies issued while
    # chain 3 of stage kt runs (earlywait_rs8), the release of stage kt - 1's slot after chain 0 of stage kt is issued
    # (laterelease_rs8)
    "earlywait_rs8": [(r"\n    mbar_wait\(xbar0 \+ 8 \* s, \(kt / STAGES\) & 1\);  // stage kt's activations[^\n]*", ""),
                      (r"\n  #pragma unroll 1\n  for \(int kt = 0; kt < ktiles; \+\+kt\) \{",
                       r"\n  mbar_wait(xbar0, 0);  // stage 0's copies\g<0>"),
                      (r"\n    wgmma_wait<1>\(\);   // chain 2 done",
                       r"\n    if (kt + 1 < ktiles) mbar_wait(xbar0 + 8 * ((kt + 1) % STAGES), ((kt + 1) / STAGES) & 1);"
                       r"  // stage kt + 1's copies\g<0>")],
    "laterelease_rs8": [(r"\n    __syncwarp\(\);   // this warp's reads of the slot are done: release it to the producer\n"
                         r"    if \(lane == 0\) \{ fence_proxy_async_smem\(\); mbar_arrive\(xbar0 \+ 8 \* \(STAGES \+ s\)\); \}", ""),
                        (r"(\n      wgmma_k32_rs\(pa, a\[ks\], desc_x \+ 0 \* \(WT \* BK / 16\) \+ 2 \* ks, ks > 0\);\n"
                         r"    wgmma_commit\(\);)",
                         r"\1\n    if (kt > 0) {  // stage kt - 1's slot: its reads are done\n      __syncwarp();\n"
                         r"      if (lane == 0) { fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + (kt - 1) % STAGES)); }\n    }")],
    # ... and each mbarrier operation done for two stages at once (correct variants): the waits for stages kt and kt + 1
    # at even kt (pairwait_rs8), the releases of both slots at odd kt (pairrelease_rs8; the producer's lookahead one
    # stage shorter)
    "pairwait_rs8": [(r"\n    mbar_wait\(xbar0 \+ 8 \* s, \(kt / STAGES\) & 1\);  // stage kt's activations[^\n]*",
                      "\n    if ((kt & 1) == 0) {  // stages kt and kt + 1 have landed\n"
                      "      mbar_wait(xbar0 + 8 * s, (kt / STAGES) & 1);\n"
                      "      if (kt + 1 < ktiles) mbar_wait(xbar0 + 8 * ((kt + 1) % STAGES), ((kt + 1) / STAGES) & 1);\n    }")],
    "pairrelease_rs8": [(r"\n    __syncwarp\(\);   // this warp's reads of the slot are done: release it to the producer\n"
                         r"    if \(lane == 0\) \{ fence_proxy_async_smem\(\); mbar_arrive\(xbar0 \+ 8 \* \(STAGES \+ s\)\); \}",
                         "\n    if (kt & 1) {  // this warp's reads of stages kt - 1 and kt are done: release both slots\n"
                         "      __syncwarp();\n      if (lane == 0) {\n        fence_proxy_async_smem();\n"
                         "        mbar_arrive(xbar0 + 8 * (STAGES + (kt - 1) % STAGES));\n"
                         "        mbar_arrive(xbar0 + 8 * (STAGES + s));\n      }\n    }")],
    # the wide W4A8 form over half of K (wrong results): 2 t(half) - t(full) is each tile's fixed part (launch,
    # pipeline fill, epilogue) over the grid
    "half_rs8": [(r"const int ktiles = K / BK;", "const int ktiles = K / BK / 2;")],
    "quarter_rs8": [(r"const int ktiles = K / BK;", "const int ktiles = K / BK / 4;")],
    "promote1_rs8": [(r"\n\s*facc\[WG_ACC_REGS \* \d \+ 4 \* j \+ [123]\] \+= wg_acc_to_f32\(p[ab]\[4 \* j \+ [123]\]\) \* sc\d;",
                      "")],
    # stream kernel: the block returns right after the grid dependency wait (launch, prefetch and PDL chain only) / runs
    # everything but its main loop (the staging of tables and activations, the cross-warp reduction, the epilogue).
    # Unlike "empty" (natoms = 0, 5.3 us at 28672x8192 M=1) both keep the weight prefetch: 9.0 / 9.2 us on the H200
    "empty_stream": [(r"(pdl_wait\(\);  // the previous kernel's outputs[^\n]*\n)", r"\1  if (K > 0) return;\n")],
    # ... and returning at once (the launch and the grid dependency chain alone), or before the wait (after the
    # weight prefetch and the table staging: their latency without the wait)
    "ret_start_stream": [(r"(pdl_launch_dependents\(\);  // the next kernel may start[^\n]*\n)",
                          r"\1  if (K > 0) return;\n")],
    "ret_prewait_stream": [(r"(\n(\s*)pdl_wait\(\);  // the previous kernel's outputs)", r"\n\2if (K > 0) return;\1")],
    "noloop_stream": [(r"for \(int i = 0; i < natoms; i \+= R\) \{", "for (int i = 0; i < natoms * 0; i += R) {")],
    # small register-A form without its activation pipeline in the loop (no wait for the stage's tensor copy, no block
    # barrier, no refill: every stage reads the prologue's slots; wrong results): what the per-stage copy handling costs
    "noxstage_rs": [(r"\n\s*mbar_wait\(xbar0 \+ 8 \* \(u % STAGES\), [^\n]*", ""),
                    (r"\n\s*__syncthreads\(\);             // everyone's; both warpgroups are done with the wgmmas of kt - 2"
                     r"\n\s*\{\n[^\n]*\n[^\n]*\n\s*\}", "")],
    # small register-A form with its weight atoms re-read from the first 16 of the slab (from L2; wrong results)
    "l2w_rs": [(r"const uint32_t\* p = wsrc \+ \(size_t\)\(kt \+ PF\) \* ATOM_WORDS;",
                "const uint32_t* p = wsrc + (size_t)((kt + PF) % 16) * ATOM_WORDS;")],
    # small register-A form without its block barrier per stage (results may be wrong): what that barrier costs
    "nosync_rs": [(r"__syncthreads\(\);             // everyone's; both warpgroups are done with the wgmmas of kt - 2", "")],
    # a decode of 5 instead of 7 instructions per word (odd pairs masked in place, x16): what a re-packed layout
    # would save
    "dq5": [(r"return lop3_and_or\(w >> \(J \* 4\), 0x000F000Fu, 0x64006400u\);",
             "return lop3_and_or(J >= 2 ? w >> 8 : w, (J & 1) ? 0x00F000F0u : 0x000F000Fu, 0x64006400u);")],
    # no activation sums (the zero-point term)
    "nosx": [(r"mma_k16\(sx\[j\], ones,", "if (false) mma_k16(sx[j], ones,")],
    # no per-atom fold (scale, zero point): raw sums added
    "nofold": [(r"acc\[tt\]\[j\]\[e\] = fmaf\(sf, fmaf\(zf, sx\[j\]\[e\], (tmp[^)]*)\), acc\[tt\]\[j\]\[e\]\);",
                r"acc[tt][j][e] += \1;")],
}


# the wide W4A8 form's prefetch of the next wave's weights into L2 (RegisterA8Tiles.l2next, on by default):
# without it (nol2next_rs8), and with the activations' tiles prefetched too (l2nextx_rs8, by tensor prefetch)
VARIANTS["nol2next_rs8"] = [(r"\n      \{  // the block launched one wave later(?:.|\n)*?\n      \}(\n    \} else if)", r"\1")]
VARIANTS["l2nextx_rs8"] = [(r"(\n(\s*)l2_prefetch\(S \+ \(size_t\)kt \* N \+ nn0, S_BYTES\);)",
                            r'\1\n\2asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];" '
                            r':: "l"(&XMAP), "r"(kt * BK), "r"(nm0) : "memory");')]
# ... and the activation tensor map's descriptor fetched ahead of the first copy (prefetch.tensormap; correct)
VARIANTS["tmpf_rs8"] = [(r"(\n    if \(tid == THREADS\) \{\n)",
                         r'\1      asm volatile("prefetch.tensormap [%0];" :: "l"(&XMAP) : "memory");\n')]


# register-A kernels, parameterised (correct variants where the ring still fits the unrolled trip: 2 (PF + 1) a
# multiple of STAGES): "pfN" weight atoms in flight per lane, "lbN" N blocks per SM in __launch_bounds__ (registers
# capped at 64K / (N x threads)), "w0" wait for the stage's own wgmma group (wgmma_wait<0>) instead of the previous
# one: the decoded a[] registers need not outlive a stage (one set instead of two)
_PARAMETERISED = {
    # the polite producer wait sleeping N ns between polls instead of 64 (correct)
    "sleep": lambda n: [(r"__nanosleep\(64\)", f"__nanosleep({n})")],
    "pf": lambda n: [(r"constexpr int PF = \d+, R = PF \+ 1;", f"constexpr int PF = {n}, R = PF + 1;")],
    "lb": lambda n: [(r"(__launch_bounds__\(cfg::[A-Z_]+, )\d+\)", rf"\g<1>{n})")],
    # the wide W4A8 form with the two consumer warpgroups taking turns on the tensor pipe (named barriers 5 and 6): a
    # warpgroup issues its stage's first chain once the other has issued chain n of its stage (correct)
    "pingpong": lambda n: [
        (r"(\n(\s*)wgmma_fence_operand\(pa\);\n\s*wgmma_fence\(\);\n\s*#pragma unroll\n\s*for \(int ks = 0; ks < 4; \+\+ks\)"
         r"  // tokens 0\.\.63)",
         r'\n\2if (kt > 0 || wg == 1) asm volatile("bar.sync %0, 256;" :: "r"(5 + wg) : "memory");\1'),
        (rf"(// tokens {64 * n}\.\.{64 * n + 63}: slot rows \+ {64 * n}\n[^\n]*\n(\s*)wgmma_commit\(\);\n)",
         r'\1\2if (wg == 0 || kt + 1 < ktiles) asm volatile("bar.arrive %0, 256;" :: "r"(6 - wg) : "memory");\n')],
    # two-warpgroup W4A16 form (plain and stream-K): the producer copies a stage's activations only when the stage
    # count is a multiple of N (or in the first ring of slots) and otherwise completes the slot's phase with a plain
    # arrival (stale data, wrong results): the L2 -> shared traffic of a cluster of N blocks multicasting each stage
    "xevery": lambda n: [
        (r"(if \((kt|it) >= STAGES\) mbar_wait\(xbar0 \+ 8 \* \(STAGES \+ s\)[^\n]*\n(\s*))"
         r"(mbar_expect_tx\(xbar0 \+ 8 \* s, X_BYTES\);\n\s*tma_load_2d\([^;]*;)",
         rf"\1if (\2 < STAGES || \2 % {n} == 0) {{ \4 }} else mbar_arrive(xbar0 + 8 * s);")],
    # small register-A form: thread 0 also asks the L2 for the atom N stages past the ring (one bulk prefetch of its
    # 2 KB, no registers)
    "l2pf": lambda n: [(r"(load_g128\(wq\[\(s \+ PF\) % R\], p\);)",
                        rf'\1 if (tid == 0 && kt + PF + {n} < ktiles) asm volatile("cp.async.bulk.prefetch.L2.global '
                        rf'[%0], 2048;" :: "l"(p + {n} * ATOM_WORDS) : "memory");')],
}
_WAIT0 = [(r"wgmma_wait<1>\(\);( +// the group of kt - 1)", r"wgmma_wait<0>();\1")]
# register-A kernels: the block barrier and the refill of the slot of kt - 2 after the stage's wgmmas are issued (they
# run during the barrier) instead of before them (a correct variant)
_LATE_REFILL = [(r"(      __syncthreads\(\);             // everyone's; both warpgroups are done with the wgmmas of kt - 2\n"
                 r"      \{\n        const int next = kt \+ LOOKAHEAD;  // refills the slot of kt - 2\n"
                 r"        if \(next < ktiles\) load_stage\([^\n]*\n      \}\n)((?:.|\n)*?wgmma_commit\(\);\n)",
                 r"\2\1")]


def _part(part: str) -> list[tuple[str, str]]:
    if part in VARIANTS or part == "base":
        return VARIANTS.get(part, [])
    if part == "w0":
        return _WAIT0
    if part == "late_refill":
        return _LATE_REFILL
    head, digits = part.rstrip("0123456789"), part[len(part.rstrip("0123456789")):]
    if head in _PARAMETERISED and digits:
        return _PARAMETERISED[head](int(digits))
    raise KeyError(f"unknown variant {part!r}")


def _substitutions(variant: str) -> list[tuple[str, str]]:
    """A variant's substitutions; "a+b" applies both."""
    return [sub for part in variant.split("+") for sub in _part(part)]


def apply(variant: str, text: str) -> str:
    """``text`` (a kernel's source) with ``variant``'s substitutions; KeyError naming a pattern that does not match."""
    for pattern, repl in _substitutions(variant):
        text, count = re.subn(pattern, repl, text)
        if not count:
            raise KeyError(pattern)
    return text


_ORIGINAL_SOURCE = compiled.kernel_source  # humming.core.registry.kernel_source, as the runtime calls it


def patched(variant: str):
    """A stand-in for the runtime's kernel_source (humming.core.runtime.compiled.kernel_source) that applies
    ``variant``: installed there, every kernel the runtime (and humming.api.source) generates is the variant's."""

    def source(plan, backend, caps=None):
        return apply(variant, _ORIGINAL_SOURCE(plan, backend, caps))
    return source


def _install(variant: str) -> None:
    """The runtime compiles ``variant``'s kernels from now on (the compiled kernels of the process forgotten)."""
    compiled.kernel_source = patched(variant)
    compiled._compiled.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--shapes", default="28672x8192,8192x8192,4096x14336")
    ap.add_argument("--variants", default="l2only,dq5,nosx,nofold")
    ap.add_argument("--knob", nargs="+", action="extend", default=[], help="NAME=VALUE tuning knobs in force while planning (JSON values)")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--rounds", type=int, default=8, help="balanced rounds over every variant's graph")
    ap.add_argument("--reps", type=int, default=5, help="timed graph replays per visit (their median is one sample)")
    args = ap.parse_args()
    variants = ["base", *args.variants.split(",")]
    for v in variants:  # an unknown variant name fails here, before any GPU work
        try:
            _substitutions(v)
        except KeyError as exc:
            raise SystemExit(f"--variants: {exc.args[0]}") from None
    overrides = {}
    for kv in args.knob:
        name, _, value = kv.partition("=")
        overrides[name] = parse_value(value)
    # no background compiles: one started under one variant's source would hand its kernel to the next variant
    os.environ["HUMMING_PRECOMPILE"] = "0"
    if any("claimlast" in v for v in variants):  # its parts take two workspace slots per block (the plan asks one):
        grown = launch.workspace  # every stream's workspace (the graphs' capture stream's too) made big enough

        def workspace_for_claimlast(device, floats, counters, stream=None):
            return grown(device, max(floats, 1 << 24), counters, stream)

        launch.workspace = workspace_for_claimlast
    torch.manual_seed(0)
    rows = []
    with knobs.override(overrides):
        for shape in args.shapes.split(","):
            n, k = map(int, shape.split("x"))
            qws = [humming.quantize(torch.randn(n, k, device="cuda") * 0.05, args.scheme)
                   for _ in range(copies_for(n * k // 2))]
            x = torch.randn(args.m, k, device="cuda", dtype=torch.float16)
            ref = humming.reference_gemm(x, qws[0], out_dtype=torch.float32).double()
            row = {"n": n, "k": k, "m": args.m, "plan": humming.plan(args.scheme, args.m, n, k).summary()}
            timers, kernels = {}, []  # (the compiled variants stay referenced while their graphs are replayed)
            for v in variants:
                _install(v)
                forget_plans(qws)
                try:
                    row[f"{v}_err"] = float((humming.gemm(x, qws[0]).double() - ref).norm() / ref.norm())
                except KeyError as e:
                    row[f"{v}_us"] = None
                    row[f"{v}_note"] = f"pattern not in this kernel: {e}"
                    continue
                timers[v] = graph_timer([lambda qw=qw, x=x: humming.gemm(x, qw) for qw in qws], args.reps)
                kernels.append(dict(compiled._compiled))
            for v, samples in zip(timers, rotated_samples(list(timers.values()), args.rounds)):
                row[f"{v}_us"] = statistics.median(samples)
                row[f"{v}_rounds_us"] = samples
            _install("base")
            forget_plans(qws)
            rows.append(row)
            cells = ", ".join(f"{v} {row[f'{v}_us']:.1f} (err {row[f'{v}_err']:.1e})" if row.get(f"{v}_us")
                              else f"{v} n/a" for v in variants)
            print(f"{args.scheme} {n}x{k} M={args.m}: {cells} us  [{row['plan']}]", flush=True)
            del qws, timers, kernels
            torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"ablate_{args.scheme}_m{args.m}.json")
    with open(path, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "knobs": overrides, "rows": rows}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
