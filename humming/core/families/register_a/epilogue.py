"""The register-A kernel's epilogue: accumulator x out_scale (x *GS) x per-channel scale CS[n] + bias[n], written
transposed into the staging tile ([token][channel], pitch OUT_LD) by 16-bit stores or stmatrix .trans, then copied
out to C one 16-byte chunk per thread and step (rows past M skipped). acc[4j + 2h + e] is channel 64 wg + 16 w + 8 h
+ g, token 8 j + 2 q + e (q = lane % 4)."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.wgmma import STAGED_COPY_OUT, stmatrix_staging

# the end of the tile body: the barrier after the main loop (and what follows it: the early ring's loads), the
# split-K fix-up, the staging stores and the copy-out
EPILOGUE = Template("""  ${block_sync}();                 ${sync_words}${early_fetch}
${splitk}
  // acc[4j + 2h + e] = channel 64 wg + 16 w + 8 h + g, token 8 j + 2 q + e -> staging [token][channel]
  ${scale_line}
${staging_stores}
${copy_out}""", early_fetch="", splitk="")

# the value pair v of acc[4j + 2h], acc[4j + 2h + 1] (channel scale cs, bias bs); with per-token scales (GS [M]) of
# tokens m0 + 8j + 2q and the next
_ROW_PAIR = """
      const uint32_t v = f32x2_to_act2(acc[4 * j + 2 * h] * cs + bs, acc[4 * j + 2 * h + 1] * cs + bs);"""
_ROW_PAIR_SCALED = """
      const int t0 = m0 + 8 * j + 2 * q;
      const float r0 = t0 < M ? load_f32(GS + t0) : 0.0f, r1 = t0 + 1 < M ? load_f32(GS + t0 + 1) : 0.0f;
      const uint32_t v = f32x2_to_act2(acc[4 * j + 2 * h] * cs * r0 + bs, acc[4 * j + 2 * h + 1] * cs * r1 + bs);"""

# the staging stores: two 16-bit stores a pair (``staging``: the staging tile's address)
_STS_STAGING = Template("""  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = wg * 64 + w * 16 + 8 * h + g;
    const float cs = CS${live} ? scale * load_f32(CS + n0 + ch) : scale;
    const float bs = BIAS${live} ? act_to_f32(load_u16(BIAS + n0 + ch)) : 0.0f;
    #pragma unroll
    for (int j = 0; j < BT / 8; ++j) {${row_pair}
      const uint32_t o = ${staging} + ((8 * j + 2 * q) * OUT_LD + ch) * 2;   // tokens 8j + 2q and 8j + 2q + 1
      sts_u16(o, (uint16_t)(v & 0xFFFFu));
      sts_u16(o + OUT_LD * 2, (uint16_t)(v >> 16));
    }
  }""", live="")
# (RegisterATiles.stsm) one stmatrix .trans per two 8-token blocks x both channel halves (matrix i = token block j + i / 2,
# channels 8 (i % 2) + g), the channels' scales and biases loaded first
_STSM_SCALES = Template("""  float cs_h[2], bs_h[2];  // channels 8h + g's scale and bias
  #pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int ch = wg * 64 + w * 16 + 8 * h + g;
    cs_h[h] = CS${live} ? scale * load_f32(CS + n0 + ch) : scale;
    bs_h[h] = BIAS${live} ? act_to_f32(load_u16(BIAS + n0 + ch)) : 0.0f;
  }
""", live="")
RAGGED_LIVE = " && n0 + ch < N"  # a ragged N: the tables are read only for channels below N

# the small form's tile: 64 channels (8 chunks a token row) and 128 threads (STAGED_COPY_OUT's shape slots)
_SMALL_TILE = {"threads": "128", "row_chunks": "8", "row_shift": "3", "chunk_mask": "7"}


def staging_stores(stsm: bool, staging: str, row_scale: bool, row_pair: str = "", ragged: bool = False) -> str:
    """The scaled accumulators into the staging tile at ``staging`` (``row_scale``: per-token scales GS [M];
    ``row_pair``: another value pair's code, register_a.token_rows; ``ragged``: channels past N in the tile, their
    table values not read)."""
    row_pair = row_pair or (_ROW_PAIR_SCALED if row_scale else _ROW_PAIR)
    live = RAGGED_LIVE if ragged else ""
    if stsm:
        return _STSM_SCALES.fill(live=live) + stmatrix_staging(staging, "      const float cs = cs_h[h], bs = bs_h[h];"
                                                               + row_pair)
    return _STS_STAGING.fill(row_pair=row_pair, staging=staging, live=live)


def copy_out(small: bool, sync: str, staging: str, closes: bool) -> str:
    """The staging tile copied to C after the barrier ``sync``; ``closes``: the kernel ends here (not inside a
    stream-K segment loop)."""
    return STAGED_COPY_OUT.fill(sync=sync, staging=staging, **(_SMALL_TILE if small else {}),
                                **({} if closes else {"close": ""}))
