"""The wide register-A W4A8 form's main loop with e4m3 fast accumulation (``TileConfig.direct``; asked for with
HUMMING_WGMMA_FAST_ACCUM=1, planned by ``planner_wgmma_rs8``): the wgmmas accumulate straight into the block's fp32
accumulators, in two m64n128k32 chains of 128 tokens a stage, instead of into 64-token partials that are promoted
(FFMA) into them every stage.

  * Group scales stay exact in the arithmetic: the accumulators hold the running sum in units of the current
    group's scale, F_g = F_{g-1} * (s_{g-1} / s_g) + P_g, and the epilogue multiplies by the last scale. So a stage
    costs one FMUL an accumulator (as many as the promotion's FFMAs) and no partial registers; what it saves is 8 of
    the 16 wgmmas and descriptor adds a stage, and the freed registers hold the next stage's A fragment, widened while
    this stage's wgmmas run. Per-channel scales: no rescaling at all; the scale joins the epilogue's.
  * The cost is precision: the tensor core adds each product into the running sum at its own, shorter precision
    (the "fast accumulation" of FP8 GEMMs), ~10x the promoted form's error (relative 2e-3 against 2e-4 at K=8192 on
    the H200, 2026-12-02); hence opt-in.
  * int8 activations with per-channel scales (the default there, not an option): the int32 sums accumulate across
    every stage in the tensor core, exactly (|sum| <= 16 x 8 x 128 x K < 2^31 for K <= 131072; the planner stops at
    65536), converted to fp32 once after the loop; more precise than promoting each stage's partial.
  * A group whose scale is 0 adds nothing: its channel's fragment rows are zeroed (a branch taken only then) and the
    running sum keeps its units. Scales are assumed finite, and within 2^64 of each other along a channel (the
    running sum grows by their ratios).

Iteration kt (fragment fa[kt % 2], the loop unrolled by two): rescale half 0's sums, issue its four wgmmas; the same
for half 1; then wait for stage kt + 1's copies, load and widen its codes into the other fragment, take its scales'
ratio; wait for this stage's wgmmas; release the slot."""
from __future__ import annotations


def _widen(a_type: str, buf: str) -> str:
    """Word j of the lane's codes into fragment registers buf[j / 2][2 (j % 2)] (row g) and [.. + 1] (row g + 8)."""
    out = f"{buf}[j >> 1][2 * (j & 1)]", f"{buf}[j >> 1][2 * (j & 1) + 1]"
    if a_type == "e4m3":
        return f"int4n8_to_e4m3x8_x(wq[j >> 2][j & 3], la0, la1, lb0, lb1, {out[0]}, {out[1]});"
    return f"{{ {out[0]} = s8x16_lo(wq[j >> 2][j & 3]); {out[1]} = s8x16_hi(wq[j >> 2][j & 3]); }}"


def _stage_in(kt: str, buf: str, per_channel: bool, ind: str, a_type: str = "e4m3") -> list[str]:
    """Wait for stage ``kt``'s copies, widen its codes into fragment ``buf``; with group scales also its ratio to the
    previous stage's (rn0 / rn1) and the scale the sums will be in (en0 / en1; a zero scale keeps the previous one
    and zeroes the channel's fragment rows: row g is a[ks][0] / a[ks][2], row g + 8 a[ks][1] / a[ks][3])."""
    lines = [
        f"{ind}{{",
        f"{ind}  const int sl = ({kt}) % STAGES;",
        f"{ind}  mbar_wait(xbar0 + 8 * sl, (({kt}) / STAGES) & 1);  // stage {kt}'s activations, codes (and scales) landed",
        f"{ind}  uint32_t wq[2][4];   // word j = 4 hf + jj = k32 step j / 2, register pair j % 2",
        f"{ind}  lds_128(wq[0], wlane + sl * W_BYTES);",
        f"{ind}  lds_128(wq[1], wlane + sl * W_BYTES + 512);",
        f"{ind}  #pragma unroll",
        f"{ind}  for (int j = 0; j < 8; ++j)",
        f"{ind}    {_widen(a_type, buf)}",
    ]
    if not per_channel:
        lines += [
            f"{ind}  const float c0 = lds_f32(slane + sl * S_BYTES), c1 = lds_f32(slane + sl * S_BYTES + 32);",
            f"{ind}  const float p0 = en0, p1 = en1;",
            f"{ind}  rn0 = p0 * rcp_approx(c0); rn1 = p1 * rcp_approx(c1); en0 = c0; en1 = c1;   // F *= s_prev / s",
            f"{ind}  if (__any_sync(0xFFFFFFFFu, c0 == 0.0f || c1 == 0.0f)) {{   // a group scaled by 0 adds nothing "
            "(rare: one vote a stage otherwise)",
            f"{ind}    if (c0 == 0.0f) {{ rn0 = 1.0f; en0 = p0; }}",
            f"{ind}    if (c1 == 0.0f) {{ rn1 = 1.0f; en1 = p1; }}",
            f"{ind}    #pragma unroll",
            f"{ind}    for (int ks = 0; ks < 4; ++ks) {{",
            f"{ind}      if (c0 == 0.0f) {{ {buf}[ks][0] = 0u; {buf}[ks][2] = 0u; }}",
            f"{ind}      if (c1 == 0.0f) {{ {buf}[ks][1] = 0u; {buf}[ks][3] = 0u; }}",
            f"{ind}    }}",
            f"{ind}  }}",
        ]
    return lines + [f"{ind}}}"]


def direct_loop(per_channel: bool, stagger: bool, a_type: str = "e4m3") -> str:
    """The consumers' main loop (after facc is zeroed and, with ``stagger``, after warpgroup 1's turn barrier; ends
    with every wgmma waited for; s8: per channel only, into int32 sums converted into facc after the loop). Leaves
    the epilogue's channel scales in fs0 / fs1 (``epilogue_scales``)."""
    if a_type not in ("e4m3", "s8") or (a_type == "s8" and not per_channel):
        raise ValueError(f"the direct W4A8 loop takes e4m3, or s8 with per-channel scales, not {a_type}")
    ind = "      "
    acc = "facc" if a_type == "e4m3" else "iacc"
    out = [
        f"  // {'fast accumulation' if a_type == 'e4m3' else 'exact int32 accumulation'}: two 128-token chains a "
        f"stage straight into {acc} (halves {acc}[0..63], {acc}[64..127])",
        "  uint32_t fa[2][4][4];   // A fragments: stage kt's in fa[kt % 2], the next one widened under its wgmmas",
    ]
    if a_type == "s8":
        out += ["  int iacc[BT / 2];   // the int32 sums over every stage (exact)",
                "  #pragma unroll",
                "  for (int i = 0; i < BT / 2; ++i) iacc[i] = 0;"]
    if per_channel:
        out.append("  const float fs0 = s_lo, fs1 = s_hi;   // per-channel scales: applied in the epilogue")
    else:
        out += ["  float en0 = 0.0f, en1 = 0.0f;   // the scale the running sums are in units of (0: nothing added yet)",
                "  float rn0, rn1, r0, r1;         // ratios s_prev / s of the next stage and of this one"]
    out += _stage_in("0", "fa[0]", per_channel, "  ", a_type)
    if not per_channel:
        out.append("  r0 = rn0; r1 = rn1;")
    out += [
        "  #pragma unroll 1",
        "  for (int k2 = 0; k2 < ktiles; k2 += 2) {",
        "    #pragma unroll",
        "    for (int u = 0; u < 2; ++u) {",
        "      const int kt = k2 + u, s = kt % STAGES;",
        "      if (kt >= ktiles) break;",
        "      const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));   // slot s's activation tile",
    ]
    for hv in range(2):
        half = f"*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>({acc} + WG_ACC_REGS * {hv})"
        if not per_channel:
            out += [f"{ind}#pragma unroll",
                    f"{ind}for (int i = 0; i < WG_ACC_REGS; ++i)  // facc[4j + 2h + e]: channel row g + 8h",
                    f"{ind}  facc[WG_ACC_REGS * {hv} + i] *= (i & 2) ? r1 : r0;"]
        out += [f"{ind}wgmma_fence_operand({half});",
                f"{ind}wgmma_fence();   // the fragment and the rescaled sums written, before the wgmmas read them",
                f"{ind}#pragma unroll",
                f"{ind}for (int ks = 0; ks < 4; ++ks)  // tokens {128 * hv}..{128 * hv + 127}: slot rows + {128 * hv}",
                f"{ind}  wgmma_k32_rs({half}, fa[u][ks], desc_x + {hv} * (WT * BK / 16) + 2 * ks, 1);",
                f"{ind}wgmma_commit();"]
        if hv == 0 and stagger:
            out.append(f"{ind}if (wg == 0 && kt == 0) consumer_turn_give();  // warpgroup 1 may start")
    out += [f"{ind}if (kt + 1 < ktiles)"]
    out += _stage_in("kt + 1", "fa[u ^ 1]", per_channel, ind, a_type)
    out += [
        f"{ind}wgmma_wait<0>();   // both halves done",
        f"{ind}#pragma unroll",
        f"{ind}for (int hv = 0; hv < 2; ++hv) wgmma_fence_operand(*reinterpret_cast<wg_acc_t(*)[WG_ACC_REGS]>({acc} + WG_ACC_REGS * hv));",
        f"{ind}__syncwarp();   // this warp's reads of the slot are done: release it to the producer",
        f"{ind}if (lane == 0) {{ fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + s)); }}",
    ]
    if not per_channel:
        out.append(f"{ind}r0 = rn0; r1 = rn1;")
    out += ["    }", "  }"]
    if a_type == "s8":
        out += ["  #pragma unroll",
                "  for (int i = 0; i < BT / 2; ++i) facc[i] = (float)iacc[i];   // once: exact up to 2^24, then rounded"]
    if not per_channel:
        out.append("  const float fs0 = en0, fs1 = en1;   // the sums' units: the last nonzero group scale")
    return "\n".join(out) + "\n"


_CS_LINE = "    cs[h] = CS ? load_f32(CS + n0 + ch) : 1.0f;"


def epilogue_scales(epilogue: str) -> str:
    """The wide form's epilogue with the direct loop's channel scales (fs0 / fs1) in its per-channel factor."""
    if epilogue.count(_CS_LINE) != 1:
        raise ValueError("internal: the wide form's epilogue no longer has its one channel-scale line")
    return epilogue.replace(_CS_LINE, "    cs[h] = (CS ? load_f32(CS + n0 + ch) : 1.0f) * (h ? fs1 : fs0);   // the "
                            "direct loop's units")
