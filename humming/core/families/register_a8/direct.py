"""The register-A W4A8 kernel's main loop for per-channel scales with direct accumulation (``RegisterA8Tiles.direct``,
planned by humming.core.families.register_a8.planner): the wgmmas accumulate across every stage straight into the
block's accumulators (the wide form: two m64n128k32 chains a stage, or 64-token chains in tiles fitted to M; the
narrow form: its one m64n128k32 chain) instead of into partials promoted (FFMA) into fp32 registers every stage. The
channel scale joins the epilogue's (EPILOGUE_SCALES). Two cases:

  * int8 activations (the default there; the knob register_a8.direct_int8 off promotes): the int32 sums are exact
    (|sum| <= 16 x 8 x 128 x K < 2^31 for K <= 131072; the planner stops at 65536) and are converted to fp32 once
    after the loop: more precise than the promoted form, which rounds each stage's partial into fp32.
  * e4m3 activations, opt-in (GemmOptions.fast_accum, "fast accumulation"): the tensor core adds each product
    into the running fp32 sum at its own, shorter precision: ~2x the promoted form's error at K=4096 (relative 4.8e-4
    against 2.1e-4 on the H200).

Groups of 128 keep the promoted loop: their scales need an fp32 step a stage either way (rescaling the running sums
by the ratio of consecutive group scales, tried on measured 0-3% faster at ~5x the error).

Wide form, iteration kt (fragment fa[kt % 2], the loop unrolled by two): issue chain 0's four wgmmas, then the other
chains'; wait for stage kt + 1's copies, load and widen its codes into the other fragment (under this stage's
wgmmas); wait for this stage's wgmmas; release the slot. The narrow form keeps its own loop (its register ring of
codes), with the chain into the sums and no promotion."""
from __future__ import annotations

from humming.core.families.register_a8.pieces import e4m3_widen_call


def _widen(a_type: str, buf: str, widen: str) -> str:
    """Word j of the lane's codes into fragment registers buf[j / 2][2 (j % 2)] (row g) and [.. + 1] (row g + 8)."""
    out = f"{buf}[j >> 1][2 * (j & 1)]", f"{buf}[j >> 1][2 * (j & 1) + 1]"
    if a_type == "e4m3":
        return e4m3_widen_call(widen, "wq[j >> 2][j & 3]", *out)
    return f"{{ {out[0]} = s8x16_lo(wq[j >> 2][j & 3]); {out[1]} = s8x16_hi(wq[j >> 2][j & 3]); }}"


def _stage_in(kt: str, buf: str, a_type: str, ind: str, widen: str = "linear") -> list[str]:
    """Wait for stage ``kt``'s copies and widen its codes into fragment ``buf``."""
    return [
        f"{ind}{{",
        f"{ind}  const int sl = ({kt}) % STAGES;",
        f"{ind}  mbar_wait(xbar0 + 8 * sl, (({kt}) / STAGES) & 1);  // stage {kt}'s activations and codes have landed",
        f"{ind}  uint32_t wq[2][4];   // word j = 4 hf + jj = k32 step j / 2, register pair j % 2",
        f"{ind}  lds_128(wq[0], wlane + sl * W_BYTES);",
        f"{ind}  lds_128(wq[1], wlane + sl * W_BYTES + 512);",
        f"{ind}  #pragma unroll",
        f"{ind}  for (int j = 0; j < 8; ++j)",
        f"{ind}    {_widen(a_type, buf, widen)}",
        f"{ind}}}",
    ]


def _sums(a_type: str) -> tuple[str, list[str], list[str]]:
    """(the accumulator array the wgmmas write, its declaration, its conversion into facc after the loop): facc
    itself for e4m3, int32 sums for s8."""
    if a_type not in ("e4m3", "s8"):
        raise ValueError(f"the direct W4A8 loop takes e4m3 or s8 fragments, not {a_type}")
    if a_type == "e4m3":
        return "facc", [], []
    return ("iacc",
            ["  int iacc[BT / 2];   // the int32 sums over every stage (exact)", "  #pragma unroll",
             "  for (int i = 0; i < BT / 2; ++i) iacc[i] = 0;"],
            ["  #pragma unroll",
             "  for (int i = 0; i < BT / 2; ++i) facc[i] = (float)iacc[i];   // once: exact up to 2^24, then rounded"])


_SCALES = "  const float fs0 = s_lo, fs1 = s_hi;   // the channel scales: applied in the epilogue"


def direct_loop(stagger: bool, a_type: str = "e4m3", chains: int = 2, give_after: int = 1,
                widen: str = "linear") -> str:
    """The wide form's consumer loop: ``chains`` chains of WT tokens a stage (2 x 128 for 256-token tiles, 3 / 2 x 64
    for tiles fitted to M), after facc is zeroed and, with ``stagger``, after warpgroup 1's turn barrier (warpgroup 0
    gives the turn once its chain ``give_after`` - 1 is issued); ends with every wgmma waited for and, for s8, the
    int32 sums converted into facc."""
    ind = "      "
    acc, decl, convert = _sums(a_type)
    out = [
        f"  // {'fast accumulation' if a_type == 'e4m3' else 'exact int32 accumulation'}: {chains} chains of WT tokens "
        f"a stage straight into {acc} (chain c: {acc}[WG_ACC_REGS c ..])",
        "  uint32_t fa[2][4][4];   // A fragments: stage kt's in fa[kt % 2], the next one widened under its wgmmas",
    ]
    out += decl + _stage_in("0", "fa[0]", a_type, "  ", widen)
    out += [
        "  #pragma unroll 1",
        "  for (int k2 = 0; k2 < ktiles; k2 += 2) {",
        "    #pragma unroll",
        "    for (int u = 0; u < 2; ++u) {",
        "      const int kt = k2 + u, s = kt % STAGES;",
        "      if (kt >= ktiles) break;",
        "      const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));   // slot s's activation tile",
    ]
    for hv in range(chains):
        half = f"*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>({acc} + WG_ACC_REGS * {hv})"
        out += [f"{ind}wgmma_fence_operand({half});",
                f"{ind}wgmma_fence();   // the fragment written, before the wgmmas read it",
                f"{ind}#pragma unroll",
                f"{ind}for (int ks = 0; ks < 4; ++ks)  // tokens WT * {hv} ..: slot rows + WT * {hv}",
                f"{ind}  wgmma_k32_rs({half}, fa[u][ks], desc_x + {hv} * (WT * BK / 16) + 2 * ks, 1);",
                f"{ind}wgmma_commit();"]
        if hv == give_after - 1 and stagger:
            out.append(f"{ind}if (wg == 0 && kt == 0) consumer_turn_give();  // warpgroup 1 may start")
    out += [f"{ind}if (kt + 1 < ktiles)"]
    out += _stage_in("kt + 1", "fa[u ^ 1]", a_type, ind, widen)
    out += [
        f"{ind}wgmma_wait<0>();   // both halves done",
        f"{ind}#pragma unroll",
        f"{ind}for (int hv = 0; hv < {chains}; ++hv) wgmma_fence_operand(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>({acc} + WG_ACC_REGS * hv));",
        f"{ind}__syncwarp();   // this warp's reads of the slot are done: release it to the producer",
        f"{ind}if (lane == 0) {{ fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + s)); }}",
        "    }",
        "  }",
    ]
    return "\n".join(out + convert + [_SCALES]) + "\n"


def narrow_direct(release: str, a_type: str) -> tuple[str, str, str]:
    """The narrow form's pieces (128 tokens a block, one m64n128k32 chain a stage): (the accumulator declaration, the
    stage's chain straight into the sums, the conversion and channel scales after the loop)."""
    acc, decl, convert = _sums(a_type)
    ind = "      "
    stage = (f"{ind}wgmma_fence_operand({acc});\n{ind}wgmma_fence();               // the a[] registers written above, "
             f"before the wgmmas read them\n{ind}#pragma unroll\n{ind}for (int ks = 0; ks < 4; ++ks)  // k32 steps: +32 "
             f"bytes inside the swizzled rows = +2 in the address field\n"
             f"{ind}  wgmma_k32_rs({acc}, a[ks], desc_x + 2 * ks, 1);\n{ind}wgmma_commit();\n{ind}wgmma_wait<0>();\n"
             f"{ind}wgmma_fence_operand({acc});{release}\n")
    return "\n".join(decl) + ("\n" if decl else ""), stage, "\n".join(convert + [_SCALES]) + "\n"


# the epilogue's channel factor (humming.core.families.register_a8.epilogue) with the direct loop's channel scales,
# which the loop leaves out of its sums
EPILOGUE_SCALES = {"weight_scale": "(CS ? load_f32(CS + n0 + ch) : 1.0f) * (h ? fs1 : fs0)",
                   "weight_scale_note": "   // the direct loop's channel scales"}
