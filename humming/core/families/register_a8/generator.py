"""Generates the register-A wgmma W4A8 kernel (sm_90a; from M 128 by default, the tuning knob register_a8.min_m):
C^T = W x^T for 128 output channels per block, int4 weights widened in registers as wgmma's A operand, 8-bit
activations (s8 or e4m3) as its B operand from 128-byte-swizzled shared memory. The parameter list is that of the
8-bit kernels. Blocks take their tiles in launch order or rasterized in groups of RegisterA8Tiles.raster token tiles.

The kernel's forms, each in its module:
  * narrow: 128 tokens per block, the lane's codes PF stages ahead in a register ring, activations by cp.async or
    a producer warpgroup's TMA copies;
  * wide: 256 tokens (or 192 / 128 fitted to M), each stage's codes, scales and activations brought by a producer
    warpgroup, each fragment widened once for every token chain; its options in converters and cluster;
  * streamk: the wide form's persistent blocks, one stream-K segment after another;
  * direct: the per-channel loop accumulating straight into the sums, in the narrow and wide forms.
Their shared pieces: pieces (widening, frame), chains (the 64-token chains), epilogue, wide_loop and wide_parts."""
from __future__ import annotations

from humming.core.families.register_a8.narrow import narrow_kernel_source
from humming.core.families.register_a8.planner import BC, BK, BT, PATH, QUARTER_WT, WIDE_BT, WIDE_FITTED_BT
from humming.core.families.register_a8.streamk import wgmma_rs8_streamk_source
from humming.core.families.register_a8.wide import wide_kernel_source


def wgmma_rs8_kernel_source(plan, backend, caps=None) -> str:
    """The CUDA source of the register-A W4A8 kernel the plan describes (ValueError for tiles it is not written for)."""
    t = plan.tiles
    producer = t.bulk == 2  # a producer warpgroup brings the activations in by TMA; consumers release slots
    # 256 tokens (or 192 / 128 fitted to M, RegisterA8Tiles.wide at 128): weights and scales by bulk copy, each fragment
    # widened once for every chain
    wide = t.bm > BT or bool(t.wide)
    if (plan.path != PATH or t.bm not in (BT, WIDE_FITTED_BT, WIDE_BT)
            or (t.bn, t.bk, t.threads) != (BC, BK, 384 if producer else 256)
            or t.stages < (3 if wide else 4) or (wide and not producer)
            or (wide and t.bm < WIDE_BT and plan.instruction.shape[1] != QUARTER_WT)):
        raise ValueError(f"the register-A wgmma W4A8 kernel is written for 128 tokens (256, or 192 / 128 in 64-token "
                         f"chains, with the producer warpgroup) x 128 channels x 128 k, 256 threads (384 with the "
                         f"producer warpgroup), >= 4 stages (3 wide); got {t}")
    if not wide:
        return narrow_kernel_source(plan, backend, caps)
    if t.streamk:  # persistent blocks, one segment after another
        return wgmma_rs8_streamk_source(plan, backend, caps)
    return wide_kernel_source(plan, backend, caps)
