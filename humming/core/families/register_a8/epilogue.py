"""The register-A W4A8 kernels' epilogue (both forms, not stream-K's): facc[4j + 2h + e] (channel 64 wg + 16 w + 8 h
+ g, token 8 j + 2 q + e; the wide form's chains one after another) times the token's activation scale, the channel's
weight scale and plus its bias, written transposed into a staging tile [token][channel] in the activation slots
(16-bit stores, or stmatrix: RegisterA8Tiles.stsm), then copied out in 16-byte chunks of token rows."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.wgmma import STAGED_COPY_OUT, stmatrix_staging

# the token scales of the narrow form's epilogue: loaded from global memory, every load issued before any use
_TS_GLOBAL = """  float ts[BT / 4];     // the scales of the thread's tokens 8 (i / 2) + 2 q + i % 2: every load issued before any use
  #pragma unroll
  for (int i = 0; i < BT / 4; ++i) {
    const int tok = m0 + 8 * (i >> 1) + 2 * q + (i & 1);
    ts[i] = (TS && tok < M) ? scale * load_f32(TS + tok) : scale;
  }
"""
# ... and the wide form's: a producer warp wrote the block's (times the device scalar and out_scale) into shared memory
_TS_SHARED = """  mbar_wait(xbar0 + 8 * (2 * STAGES), 0);   // the producer warp's token scales are in shared memory
  float ts[BT / 4];     // the scales of the thread's tokens 8 (i / 2) + 2 q + i % 2
  #pragma unroll
  for (int i = 0; i < BT / 4; ++i) ts[i] = lds_f32(t0 + (8 * (i >> 1) + 2 * q + (i & 1)) * 4);
"""

# the thread's scales and biases; ``weight_scale``: a channel's factor (the direct loop's channel scale joins it)
_HEAD = Template("""  // facc[4j + 2h + e] = channel 64 wg + 16 w + 8 h + g, token 8 j + 2 q + e -> staging [token][channel]
${scale_line}  float cs[2], bs[2];   // the thread's two channels' weight scale and bias
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = wg * 64 + w * 16 + 8 * h + g;
    cs[h] = ${weight_scale};${weight_scale_note}
    bs[h] = BIAS ? act_to_f32(load_u16(BIAS + n0 + ch)) : 0.0f;
  }
${ts_block}""", weight_scale="CS ? load_f32(CS + n0 + ch) : 1.0f", weight_scale_note="")

_STORES = """  #pragma unroll
  for (int j = 0; j < BT / 8; ++j) {
    #pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int ch = wg * 64 + w * 16 + 8 * h + g;
      const uint32_t v = f32x2_to_act2(facc[4 * j + 2 * h] * ts[2 * j] * cs[h] + bs[h],
                                       facc[4 * j + 2 * h + 1] * ts[2 * j + 1] * cs[h] + bs[h]);
      const uint32_t o = x0 + ((8 * j + 2 * q) * OUT_LD + ch) * 2;   // tokens 8j + 2q and 8j + 2q + 1
      sts_u16(o, (uint16_t)(v & 0xFFFFu));
      sts_u16(o + OUT_LD * 2, (uint16_t)(v >> 16));
    }
  }
"""

# the same pair of values as _STORES', for the stmatrix staging (RegisterA8Tiles.stsm)
_STSM_VALUE = """      const uint32_t v = f32x2_to_act2(facc[4 * j + 2 * h] * ts[2 * j] * cs[h] + bs[h],
                                       facc[4 * j + 2 * h + 1] * ts[2 * j + 1] * cs[h] + bs[h]);"""


def epilogue(wide: bool, stsm: bool = False, direct: dict | None = None) -> str:
    """The epilogue's scales and staging stores (16-bit stores, or stmatrix with ``stsm``); ``direct``: the direct
    loop's slots of the channel factor (humming.core.families.register_a8.direct.EPILOGUE_SCALES)."""
    scale_line = "" if wide else "  const float scale = GS ? out_scale * load_f32(GS) : out_scale;\n"
    head = _HEAD.fill(scale_line=scale_line, ts_block=_TS_SHARED if wide else _TS_GLOBAL, **(direct or {}))
    return head + (stmatrix_staging("x0", _STSM_VALUE) + "\n" if stsm else _STORES)


def copy_out(sync: str) -> str:
    """The staged tile copied to C after the barrier ``sync`` (__syncthreads, or the consumers' consumer_sync)."""
    return STAGED_COPY_OUT.fill(sync=sync)


def stsm_prelude(plan, caps, backend) -> str:
    """The stmatrix helper where the plan stages by stmatrix (RegisterA8Tiles.stsm)."""
    if not plan.tiles.stsm:
        return ""
    return backend.helpers("stmatrix", caps=caps)
