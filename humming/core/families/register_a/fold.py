"""The small-M form's fold options (RegisterATiles.fold): the scale, and with fold=2 the zero point, applied once per
group in fp32 instead of per weight element.

fold=1: the wgmma takes code - zero (exact small integers), tmp = their products summed over one scale group, and at
the end of the group (waited for) acc += scale * tmp in fp32: saves the per-element scale multiply. fold=2: the wgmma
takes the raw codes (magic + code), sx = the activations summed over the same k (a wgmma with an all-ones A, on the
otherwise idle tensor pipe), and acc += scale * (tmp + zz * sx) with zz = -(magic + zero): saves the zero-point add
too. The sx wgmmas follow the stage's tmp wgmmas (interleaved, ptxas serializes the pipeline: C7511).
"""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.common.emit import Template
from humming.core.common.mma_pieces import _c
from humming.core.families.register_a.planner import fold_group_atoms

# the group's sums folded into acc (channels 8h + g: their scale ss, with fold=2 their zero point zz)
_FOLD = Template("""#pragma unroll
for (int h = 0; h < 2; ++h) {
  const float ss = ${ss};
  #pragma unroll
  for (int j = 0; j < BT / 8; ++j)
    #pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int i = 4 * j + 2 * h + e;
      acc[i] = ${fma};
    }
}""")

# one stage's wgmmas into the group's sums; a group's last stage (``last``) waits for them and folds them into acc.
# Group boundaries fall on fixed stages u of the unrolled trip (its length is a multiple of the group, and every split
# starts on a group): ptxas serializes the wgmmas when the waits depend on a runtime branch (C7511)
_STAGE = Template("""      const bool first = ${first};
      ${fence}
      wgmma_fence();               // the a[] registers and accumulators written above, before the wgmmas read them
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks)  // the first stage of a group starts the sums afresh (scale-d = 0)
        wgmma_k16_rs(tmp, a[ks], desc_x + 2 * ks, ks > 0 || !first);${sx_mma}
      wgmma_commit();
${after_commit}      if (${last}) {  // the group is complete: fold it into acc
        wgmma_wait<0>();
        ${fence}
        ${fold}
      } else {
        ${group_wait}
        ${fence}
      }""", sx_mma="", after_commit="")

_SX_MMA = """
      #pragma unroll
      for (int ks = 0; ks < 4; ++ks) wgmma_k16_rs(sx, ones, desc_x + 2 * ks, ks > 0 || !first);"""


@dataclass(frozen=True)
class FoldParts:
    decl: str       # the sums' declarations, after the accumulators'
    stage: str      # a stage's wgmmas and waits
    fence: str      # the fence of the accumulators after a drain (lines after the first relative to it)
    tail: str       # with one group over the split: the fold after the main loop


def fold_parts(lay, act: str, full: bool, after_commit: str, group_wait: str) -> FoldParts:
    """The fold option's pieces (``full``: fold=2); ``after_commit``: lines after the stage's commit,
    ``group_wait``: the wait for the group of kt - 1 (humming.core.families.register_a.stage_loop)."""
    s_group, z_group = lay.scale_group, lay.zero_group
    ga = fold_group_atoms(lay)
    one = "0x3C003C00u" if act == "f16" else "0x3F803F80u"
    ss = ("act_to_f32((uint16_t)(" + ("sq[s]" if s_group > 0 else "sw") + " >> (16 * h)))") if s_group else "1.0f"
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
    fold = _FOLD.fill(ss=f"{ss}, zz = {zz}" if full else ss,
                      fma="fmaf(ss, fmaf(zz, sx[i], tmp[i]), acc[i])" if full else "fmaf(ss, tmp[i], acc[i])")
    fence = "wgmma_fence_operand(tmp);\nwgmma_fence_operand(sx);" if full else "wgmma_fence_operand(tmp);"
    stage = _STAGE.fill(first=f"u % {ga} == 0" if ga else "kt == 0", fence=fence, sx_mma=_SX_MMA if full else "",
                        after_commit=after_commit, last=f"u % {ga} == {ga - 1}" if ga else "false", fold=fold,
                        group_wait=group_wait)
    # one group over the split: the fold after the loop (its first line as indented in the stage, the rest at 4)
    first, rest = fold.split("\n", 1)
    tail = "" if ga else f"\n  // one group over the split: fold it now\n        {first}\n" + Template("    ${rest}").fill(rest=rest)
    return FoldParts(decl, stage, fence, tail)
