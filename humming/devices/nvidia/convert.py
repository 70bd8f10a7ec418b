"""Widenings of 4-bit weight codes into 8-bit operands: int4 -> s8 (x 16) and int4 / e2m1 -> e4m3 by byte permutes
(the wgmma W4A8 kernels, WGMMA_W4A8), the register-A W4A8 kernel's table widening (RS8_WIDEN_T and its lookup words,
RS8_WIDEN_TABLES) and the widening without tables (E4M3_OF_LABELS_T, RS8_WIDEN_LINEAR_T)."""
from __future__ import annotations

WGMMA_W4A8 = r"""
// ---- wgmma W4A8: 4-bit weights widened into the 8-bit B tile in shared memory
// 16-byte shared-memory store (the widened codes of 16 k of one weight row)
__device__ __forceinline__ void st_shared_128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
// int4 -> s8 as 16 * code (exact, one AND each): the word's low nibbles moved up, then its high nibbles in place
__device__ __forceinline__ uint32_t s8x16_lo(uint32_t w) { return (w << 4) & 0xF0F0F0F0u; }
__device__ __forceinline__ uint32_t s8x16_hi(uint32_t w) { return w & 0xF0F0F0F0u; }
// an int32 partial with |v| < 2^22 as fp32, exactly, without the (eighth-rate) conversion unit: the bits of
// 1.5 * 2^23 plus v hold 1.5 * 2^23 + v (v lands in the mantissa), then one subtraction
__device__ __forceinline__ float small_s32_to_f32(int v) { return u32_as_f32(0x4B400000u + (uint32_t)v) - 12582912.0f; }
// four 4-bit codes in the nibbles of the low 16 bits of w (nibble i -> output byte i) -> four e4m3, exactly:
// two 8-entry lookups on the low 3 bits (the tables of the mma.sync W4A8 helpers), then one byte permute that
// takes byte i from the second lookup where code i has bit 3 set (selector nibble i = i + 4 * bit 3)
__device__ __forceinline__ uint32_t int4n4_to_e4m3x4(uint32_t w) {
  const uint32_t sel = w & 0x7777u;
  const uint32_t pos = prmt_b32(0x44403800u, 0x4E4C4A48u, sel);   // 0 1 2 3 | 4 5 6 7
  const uint32_t neg = prmt_b32(0xCACCCED0u, 0xB8C0C4C8u, sel);   // -8 -7 -6 -5 | -4 -3 -2 -1
  return prmt_b32(pos, neg, ((w >> 1) & 0x4444u) | 0x3210u);
}
// e2m1 (sign | 3-bit magnitude) -> e4m3, exactly: magnitudes through one lookup, the sign chosen the same way
__device__ __forceinline__ uint32_t e2m1n4_to_e4m3x4(uint32_t w) {
  const uint32_t mag = prmt_b32(0x3C383000u, 0x4C484440u, w & 0x7777u);   // 0 .5 1 1.5 | 2 3 4 6
  return prmt_b32(mag, mag | 0x80808080u, ((w >> 1) & 0x4444u) | 0x3210u);
}
"""


# int4n8_to_e4m3x8_x's lookup tables (la0 la1 lb0 lb1), bytes in prmt order: a[l] for labels with bit 3 clear (the
# e4m3 byte of the value, complemented where negative), b[l] for those with bit 3 set; the kernels keep them in registers
RS8_WIDEN_TABLES = ((0x44403800, "0 1 2 3"), (0x3533312F, "~(-8 -7 -6 -5)"),
                    (0x4E4C4A48, "4 5 6 7"), (0xB8C0C4C8, "-4 -3 -2 -1"))


RS8_WIDEN_T = r"""// the register-A W4A8 kernel's int4 -> e4m3 widening, both halves of a word (lo: nibbles 0-3, hi: nibbles 4-7) in 9
// instructions. Its codes are relabelled when the weights are prepared: label = the two's-complement code with bits 2
// and 3 swapped, so bit 2 of a label's low 3 bits (l) is the sign and its bit 3 (h) is the code's bit 2. A prmt lookup reads
// l and, where h is set, gives the picked byte's sign replicated instead; the two lookups are read once with the
// labels as they are and once with h flipped, and their xor is the e4m3 byte:
//   h = 0: a[l] ^ sign(b[l]) with a[l] = e4m3(value) ^ (0xFF if negative): the value's byte;
//   h = 1: sign(a[l]) ^ b[l] = 0 ^ e4m3(value) (every a[l] is below 0x80).
// Both labels of one l have the same sign (the sign is in l), which is what lets the flip undo the first lookup's mask.
// prmt reads only its selector's low 16 bits: hi's selectors are the words shifted by 16.
__device__ __forceinline__ void int4n8_to_e4m3x8_x(uint32_t w, uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1,
                                                   uint32_t& lo, uint32_t& hi) {
  const uint32_t wf = w ^ 0x88888888u;   // every label's h flipped
  lo = prmt_b32(a0, a1, w) ^ prmt_b32(b0, b1, wf);
  hi = prmt_b32(a0, a1, w >> 16) ^ prmt_b32(b0, b1, wf >> 16);
}
"""


# the W4A8 kernels' int4 -> e4m3 widening without tables (the layouts' widen "linear", the default): four labels
E4M3_OF_LABELS_T = r"""// int4 -> e4m3 without tables, four codes a call. The e4m3 bytes 0x00-0x08 are 0..8 x 2^-9 (the subnormals and the
// first binade are evenly spaced) and 0x80-0x88 their negatives, so a value v of -8..7 is the byte sign | |v| at a
// scale of 2^-9 (the layouts' scales carry 2^9). The layouts store label x = v + 8 for v >= 0, -v for -7..-1 and 0 for
// -8 (humming.core.common.layout.e4m3_linear_label). With t = x + 0x77 (no carry leaves the byte): bit 7 of t is set iff
// x >= 9 (v > 0) and bit 3 iff 1 <= x <= 8, so the byte is x's bits 0-2 (|v| mod 8), 0x08 where x == 0 (bit 3 set in
// neither t nor x) and 0x80 where x <= 8 (bit 7 clear in t): one lop3 on t and x.
__device__ __forceinline__ uint32_t e4m3x4_of_labels(uint32_t x) {   // four labels, one in each byte's low nibble
  const uint32_t t = x + 0x77777777u;
  uint32_t r;   // (x & ~0x88888888) | (~(t | x) & 0x88888888): lop3 table 0x46 on (t, x, 0x88888888)
  asm("lop3.b32 %0, %1, %2, 0x88888888, 0x46;\n" : "=r"(r) : "r"(t), "r"(x));
  return r;
}
"""


# the register-A W4A8 kernel's widening of a word: both halves (lo: the low nibble of each byte, hi: the high nibble)
# in 7 instructions (WgmmaRs8Layout.widen "linear")
RS8_WIDEN_LINEAR_T = E4M3_OF_LABELS_T + r"""__device__ __forceinline__ void int4_to_e4m3x8(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = e4m3x4_of_labels(w & 0x0F0F0F0Fu);
  hi = e4m3x4_of_labels((w >> 4) & 0x0F0F0F0Fu);
}
"""


def e4m3_of_labels_helpers() -> str:
    """The helper group "e4m3_of_labels": int4 -> e4m3 without tables, four labels a call (the W4A8 kernels' linear
    widening)."""
    return E4M3_OF_LABELS_T


def rs8_widen_tables() -> tuple[tuple[int, str], ...]:
    """The data "rs8_widen_tables": the table widening's four lookup words (la0 la1 lb0 lb1) and their labels."""
    return RS8_WIDEN_TABLES
