"""NVIDIA spellings of the helpers the activation-quantization kernels call (``humming.core.actquant.generator``).

``actquant_prelude(act_format, scale_format, caps)`` returns self-contained CUDA C++ that defines every
helper of the contract below. Which spelling an element encoder gets comes from the profile's
declarations, never from an architecture number:

* a profile that declares an MMA with ``e4m3`` / ``e5m2`` operands has ``cvt.rn.satfinite.e4m3x2.f32`` /
  ``e5m2x2`` (they arrived together with the FP8 MMA, PTX 7.8);
* a profile that declares an MMA with ``e2m1`` (``e2m3``, ``e3m2``) operands has the FP4 (FP6) packed
  conversions ``cvt.rn.satfinite.e2m1x2.f32`` (``e2m3x2`` / ``e3m2x2``), which exist exactly on the targets
  whose tensor cores take those operands (the ``a``/``f`` Blackwell targets, PTX 8.6+);
* anything else gets a bit-exact software conversion (round to nearest even, satfinite), written once for
  every float format from its (mantissa bits, smallest normal exponent, largest finite value) and checked
  against the same reference on every device.

A capability key that declared conversions directly (``conversions: [e4m3x2, e2m1x2, ue8m0x2]`` in the
profile) would be cleaner than the implication from MMA operand types; until the schema has one, the
implication is the rule, and it is in one function (``hardware_cvt``).

Scale conversions (one per token or group) are always spelled in software: they cost nothing measurable,
and the same code then runs, and is verified, on every target (``cvt.rp.satfinite.ue8m0x2.f32`` exists on
the FP4 targets, but it cannot be checked on a Hopper GPU).

Helper contract (what the generated kernel calls; all ``__device__ __forceinline__``):

  bit casts and arithmetic   f32_bits(float) -> u32, bits_f32(u32) -> float, div_rn(a, b), mul_rn(a, b),
                             rcp_rn(a) (IEEE 1/a), fma_rn(a, b, c) (a b + c, one rounding),
                             f32_to_int_rn(float) -> int (RNE, NaN -> 0, saturating)
  input decode               f16_to_f32(u32 h), bf16_to_f32(u32 h)
  global memory              ld_b128(u32 (&)[4], p), ld_b64(u32 (&)[2], p), ld_b32(p), ld_b16(p)  (read-only)
                             st_b64(p, lo, hi), st_b32(p, v), st_b16(p, v), st_b8(p, v)
                             red_max_u32(p, v)   (atomic max, no return)
  warp                       shfl_xor_u32(v, lane_mask)
  element encode             aq_encode2(lo, hi) -> u32: code(lo) in bits 0..7, code(hi) in bits 8..15;
                             saturating, round to nearest even, one code per byte
                             aq_encode2_finite(lo, hi): the same for inputs known not to be NaN (the NaN
                             check of the hardware path skipped)
  scale conversions          f32_to_f16_rn(x) -> bits, f32_to_bf16_rn(x) -> bits (finite x),
                             f32_to_ue4m3_rn_sat(x) -> code (x > 0), ue4m3_to_f32(code),
                             f32_to_ue8m0_rp_sat(x) -> code (x > 0), ue8m0_to_f32(code)
  launch                     aq_launch_dependents(): griddepcontrol.launch_dependents where the profile declares
                             griddepcontrol (a PDL-launched GEMM prefetches its weights meanwhile), else empty
"""
from __future__ import annotations

import struct

__all__ = ["actquant_prelude", "software_source", "hardware_cvt", "encode_spelling", "HW_CVT", "actquant_helpers",
           "encoder_description"]

# activation format -> the packed PTX conversion type that encodes two f32 into it
HW_CVT = {"e4m3": "e4m3x2", "e5m2": "e5m2x2", "e2m1": "e2m1x2", "e2m3": "e2m3x2", "e3m2": "e3m2x2"}


def hardware_cvt(fmt, caps) -> bool:
    """True when the profile implies ``cvt.rn.satfinite.<fmt>x2.f32``: it declares an MMA taking ``fmt``."""
    name = fmt.name
    if caps is None or name not in HW_CVT:
        return False
    return any(name in (ins.a_type, ins.b_type) for ins in caps.mma)


def encode_spelling(fmt, caps) -> tuple[str, str]:
    """("hardware" | "software", reason) of the element encoder for the format ``fmt`` on this profile."""
    f = fmt
    if f.kind == "int":
        if f.name == "int8":
            return "hardware", "int8: cvt.rni.sat.s8.f32 (every target)"
        return "software", f"{f.name}: round half even (cvt.rni.s32.f32) and clamp to [{f.min}, {f.max}]"
    if hardware_cvt(f, caps):
        return "hardware", (f"{f.name}: cvt.rn.satfinite.{HW_CVT[f.name]}.f32 (the profile declares {f.name} "
                            f"MMA operands)")
    why = "no PTX type" if f.name not in HW_CVT else f"the profile declares no {f.name} MMA operands"
    return "software", f"{f.name}: bit-exact software round-to-nearest-even, satfinite ({why})"


# ------------------------------------------------------------------------------------------ spellings
_COMMON = r"""
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned long long uint64_t;

// ---- bit casts and correctly rounded arithmetic (the reference divides with IEEE division)
__device__ __forceinline__ uint32_t f32_bits(float x) { uint32_t r; asm("mov.b32 %0, %1;" : "=r"(r) : "f"(x)); return r; }
__device__ __forceinline__ float bits_f32(uint32_t a) { float r; asm("mov.b32 %0, %1;" : "=f"(r) : "r"(a)); return r; }
__device__ __forceinline__ float div_rn(float a, float b) { float r; asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float mul_rn(float a, float b) { float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r; }
__device__ __forceinline__ float rcp_rn(float a) { float r; asm("rcp.rn.f32 %0, %1;" : "=f"(r) : "f"(a)); return r; }
__device__ __forceinline__ float fma_rn(float a, float b, float c) { float r; asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(r) : "f"(a), "f"(b), "f"(c)); return r; }
// round half to even; NaN -> 0; out-of-range values saturate to the int32 range
__device__ __forceinline__ int f32_to_int_rn(float a) { int r; asm("cvt.rni.s32.f32 %0, %1;" : "=r"(r) : "f"(a)); return r; }

// ---- 16-bit inputs
__device__ __forceinline__ float f16_to_f32(uint32_t h) {
  float r; asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"((uint16_t)h)); return r;
}
__device__ __forceinline__ float bf16_to_f32(uint32_t h) { return bits_f32((h & 0xFFFFu) << 16); }
__device__ __forceinline__ uint32_t f32_to_f16_rn(float x) { uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h; }

// ---- global memory: read-only activations in, codes and scales out
__device__ __forceinline__ void ld_b128(uint32_t (&r)[4], const void* p) {
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}
__device__ __forceinline__ void ld_b64(uint32_t (&r)[2], const void* p) {
  asm volatile("ld.global.nc.v2.u32 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "l"(p));
}
__device__ __forceinline__ uint32_t ld_b32(const void* p) {
  uint32_t r; asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(r) : "l"(p)); return r;
}
__device__ __forceinline__ uint32_t ld_b16(const void* p) {
  uint16_t r; asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(r) : "l"(p)); return r;
}
__device__ __forceinline__ void st_b64(void* p, uint32_t lo, uint32_t hi) {
  asm volatile("st.global.v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(lo), "r"(hi) : "memory");
}
__device__ __forceinline__ void st_b32(void* p, uint32_t v) { asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void st_b16(void* p, uint32_t v) {
  asm volatile("st.global.u16 [%0], %1;" :: "l"(p), "h"((uint16_t)v) : "memory");
}
__device__ __forceinline__ void st_b8(void* p, uint32_t v) {
  asm volatile("{ .reg .b16 t; cvt.u16.u32 t, %1; st.global.u8 [%0], t; }" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void red_max_u32(uint32_t* p, uint32_t v) {
  asm volatile("red.global.max.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t shfl_xor_u32(uint32_t v, int lane_mask) {
  uint32_t r; asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(lane_mask)); return r;
}
"""

# Software round-to-nearest-even, satfinite, for any float format with an exponent field.
_SOFT_FLOAT = r"""
// f32 -> a small float format in software: round to nearest, ties to even, satfinite (overflow and
// infinities clamp to +-max). MAN: mantissa bits; EMIN: exponent of the smallest normal; MAXBITS: the f32
// bits of the largest finite value, MAXCODE its code; NAN_CODE: the code of NaN (HAS_NAN false: NaN -> +0);
// SIGN: the sign bit of the code.
template <int MAN, int EMIN, uint32_t MAXBITS, uint32_t MAXCODE, bool HAS_NAN, uint32_t NAN_CODE, uint32_t SIGN>
__device__ __forceinline__ uint32_t soft_f32_to_small(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t s = (u >> 31) ? SIGN : 0u;
  if (a > 0x7F800000u) return HAS_NAN ? (NAN_CODE | s) : 0u;
  uint32_t c;
  if (a >= MAXBITS) {
    c = MAXCODE;
  } else if (a < (uint32_t)(127 + EMIN) << 23) {
    // below the smallest normal: a count of the smallest subnormal 2^(EMIN-MAN); the scaling is exact,
    // the integer rounding is RNE, and a carry into 2^MAN is the first normal code
    c = (uint32_t)f32_to_int_rn(bits_f32(a) * bits_f32((uint32_t)(127 + MAN - EMIN) << 23));
  } else {
    // normal: keep MAN mantissa bits with RNE on the dropped ones (a carry moves into the exponent), rebias
    const int SH = 23 - MAN;
    c = ((a + ((1u << (SH - 1)) - 1u) + ((a >> SH) & 1u)) >> SH) - ((uint32_t)(127 + EMIN - 1) << MAN);
  }
  return c | s;
}
"""

_BF16_ROUND = r"""// round to nearest even; x finite (the caller clamps to the bf16 maximum first)
__device__ __forceinline__ uint32_t f32_to_bf16_rn(float x) {
  const uint32_t u = f32_bits(x);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
"""

_SCALES = r"""
// ---- scale conversions (software on every target; one per token or group)
""" + _BF16_ROUND + r"""// ue4m3 (e4m3 without its sign): RNE, saturating at 448 (code 0x7E); x > 0
__device__ __forceinline__ uint32_t f32_to_ue4m3_rn_sat(float x) {
  return soft_f32_to_small<3, -6, 0x43E00000u, 0x7Eu, true, 0x7Fu, 0u>(x);
}
__device__ __forceinline__ float ue4m3_to_f32(uint32_t c) {
  const uint32_t e = (c >> 3) & 0xFu, m = c & 7u;
  return e ? bits_f32(((e + 120u) << 23) | (m << 20)) : (float)m * 0.001953125f;  // subnormal: m * 2^-9
}
// ue8m0: the smallest power of two >= x (cvt.rp), saturating at 2^127 (code 254), 2^-127 (code 0) at least; x > 0
__device__ __forceinline__ uint32_t f32_to_ue8m0_rp_sat(float x) {
  const uint32_t u = f32_bits(x);
  uint32_t c;
  if (u < 0x00800000u) c = u > 0x00400000u ? 1u : 0u;       // f32 subnormal: 2^-127 or 2^-126
  else c = (u >> 23) + ((u & 0x007FFFFFu) != 0u);              // exponent, +1 unless a power of two
  return c > 254u ? 254u : c;
}
__device__ __forceinline__ float ue8m0_to_f32(uint32_t c) { return bits_f32(c ? c << 23 : 0x00400000u); }
"""


def _f32_hex(v: float) -> str:
    return f"0x{struct.unpack('<I', struct.pack('<f', v))[0]:08X}u"


def _soft_params(f) -> str:
    """Template arguments of soft_f32_to_small for a float format."""
    pos = f._positive_table
    max_code = len(pos) - 1
    emin = 1 - f.bias
    nan = f._nan_code() if f.has_nan else 0
    sign = 1 << (f.exp_bits + f.man_bits)
    return (f"{f.man_bits}, {emin}, {_f32_hex(pos[-1])}, 0x{max_code:02X}u, {'true' if f.has_nan else 'false'}, "
            f"0x{nan:02X}u, 0x{sign:02X}u")


def _soft_encoder(f) -> str:
    """Portable C++ (no asm): f32_to_<fmt>_soft(x), the bit-exact software encoder of one element."""
    name = f.name
    if f.kind == "int":
        mask = (1 << f.bits) - 1
        return rf"""
// {name}: round half even, clamp to [{f.min}, {f.max}], NaN -> 0; two's complement in the low {f.bits} bits
__device__ __forceinline__ uint32_t f32_to_{name}_soft(float x) {{
  int q = f32_to_int_rn(x);
  q = q < {f.min} ? {f.min} : (q > {f.max} ? {f.max} : q);
  return (uint32_t)q & 0x{mask:X}u;
}}
"""
    if f.exp_bits == 0:  # e0m3: sign-magnitude integer 0..7
        sign = 1 << f.man_bits
        top = (1 << f.man_bits) - 1
        return rf"""
// {name}: sign-magnitude integer: round half even, saturate at {top}, NaN -> +0
__device__ __forceinline__ uint32_t f32_to_{name}_soft(float x) {{
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0u;
  const int q = f32_to_int_rn(bits_f32(u & 0x7FFFFFFFu));
  return (uint32_t)(q > {top} ? {top} : q) | ((u >> 31) ? 0x{sign:X}u : 0u);
}}
"""
    return rf"""
// {name}: software round to nearest even, satfinite (bit-exact with the reference encoder)
__device__ __forceinline__ uint32_t f32_to_{name}_soft(float x) {{ return soft_f32_to_small<{_soft_params(f)}>(x); }}
"""


def _soft_encode2(f) -> str:
    return rf"""
__device__ __forceinline__ uint32_t aq_encode2(float lo, float hi) {{ return f32_to_{f.name}_soft(lo) | (f32_to_{f.name}_soft(hi) << 8); }}
__device__ __forceinline__ uint32_t aq_encode2_finite(float lo, float hi) {{ return aq_encode2(lo, hi); }}
"""


def _hardware_encode2(f) -> str:
    """aq_encode2 through the profile's packed conversion (NaN inputs take the software path)."""
    name = f.name
    if name == "int8":
        return r"""
// int8: round half even, saturate to [-128, 127], NaN -> 0, in one instruction
__device__ __forceinline__ uint32_t f32_to_s8_sat(float x) { uint32_t r; asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(x)); return r & 0xFFu; }
__device__ __forceinline__ uint32_t aq_encode2(float lo, float hi) { return f32_to_s8_sat(lo) | (f32_to_s8_sat(hi) << 8); }
__device__ __forceinline__ uint32_t aq_encode2_finite(float lo, float hi) { return aq_encode2(lo, hi); }
"""
    cvt = HW_CVT[name]
    # NaN: the reference gives the format's NaN code with the sign of the input (formats without NaN: +0); the
    # PTX ISA does not pin the NaN encoding of every packed type, so NaN takes the software path
    nan = (f"if ((f32_bits(lo) & 0x7FFFFFFFu) > 0x7F800000u || (f32_bits(hi) & 0x7FFFFFFFu) > 0x7F800000u)\n"
           f"    return f32_to_{name}_soft(lo) | (f32_to_{name}_soft(hi) << 8);")
    if name == "e2m1":
        return rf"""
// e2m1 pair: one cvt into a byte (the first operand lands in the upper nibble); spread to one code per byte
__device__ __forceinline__ uint32_t f32x2_to_e2m1x2(float lo, float hi) {{
  uint32_t r; asm("{{ .reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, %1, %2; cvt.u32.u8 %0, t; }}" : "=r"(r) : "f"(hi), "f"(lo));
  return r & 0xFFu;
}}
__device__ __forceinline__ uint32_t aq_encode2_finite(float lo, float hi) {{
  const uint32_t p = f32x2_to_e2m1x2(lo, hi);
  return (p & 0xFu) | ((p & 0xF0u) << 4);
}}
__device__ __forceinline__ uint32_t aq_encode2(float lo, float hi) {{
  {nan}
  return aq_encode2_finite(lo, hi);
}}
"""
    mask = "0x3F3Fu" if name in ("e2m3", "e3m2") else "0xFFFFu"  # FP6: a 6-bit code in each byte
    return rf"""
// {name} pair: one cvt (the first operand lands in the upper byte)
__device__ __forceinline__ uint32_t f32x2_to_{cvt}(float lo, float hi) {{
  uint16_t r; asm("cvt.rn.satfinite.{cvt}.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo)); return r & {mask};
}}
__device__ __forceinline__ uint32_t aq_encode2_finite(float lo, float hi) {{ return f32x2_to_{cvt}(lo, hi); }}
__device__ __forceinline__ uint32_t aq_encode2(float lo, float hi) {{
  {nan}
  return f32x2_to_{cvt}(lo, hi);
}}
"""


def software_source(fmt) -> str:
    """The portable part of the prelude (plain C++, no asm): the software element encoder ``aq_encode2`` and
    the scale conversions. It expects f32_bits, bits_f32, f32_to_int_rn and uint32_t from its host (the asm
    helpers of ``actquant_prelude``); tests compile it for the CPU against the reference."""
    f = fmt
    return "\n".join([_SOFT_FLOAT, _SCALES, _soft_encoder(f), _soft_encode2(f)])


def actquant_prelude(fmt, caps) -> str:
    """CUDA C++ defining the activation-quantization helpers (see the module docstring) for one activation format,
    spelled with what ``caps`` declares (None: the portable software spelling); every scale format's helper is defined
    (they are small)."""
    f = fmt
    kind, reason = encode_spelling(f, caps)
    encode2 = _hardware_encode2(f) if kind == "hardware" else _soft_encode2(f)
    trigger = ("asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");"
               if caps is not None and caps.memory.griddepcontrol else "")
    dependents = ("// a next kernel launched with programmatic dependent launch (the GEMM) may start its weight prefetch now"
                  f"\n__device__ __forceinline__ void aq_launch_dependents() {{ {trigger} }}")
    return "\n".join([f"// activation encoder: {reason}", _COMMON, _SOFT_FLOAT, _SCALES, _soft_encoder(f), encode2,
                      dependents])


def actquant_helpers(fmt, caps) -> str:
    """The helper group "actquant" (NvidiaBackend.helpers): ``actquant_prelude``."""
    return actquant_prelude(fmt, caps)


def elementwise_helpers(caps=None) -> str:
    """The helper group "elementwise" (kernels between the GEMMs, e.g. the MoE gated activation): the bit casts,
    correctly rounded arithmetic, 16-bit decode and rounding (f16_to_f32, bf16_to_f32, f32_to_f16_rn,
    f32_to_bf16_rn: finite values; larger than the bf16 maximum rounds to infinity) and the global loads and stores of
    the contract above; the same on every target."""
    return "\n".join([_COMMON, _BF16_ROUND])


def encoder_description(fmt, caps) -> str:
    """The helper group "actquant_encoder": the one-line description of how the element encoder is spelled."""
    return encode_spelling(fmt, caps)[1]
