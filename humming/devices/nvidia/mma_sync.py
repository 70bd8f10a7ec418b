"""mma.sync spellings: the 16x8x16 step of 16-bit activations (or two m16n8k8), the 16x8x32 step of 8-bit operands,
the weight decode (dq_raw) of the dequantizing kernels, the prelude of the mma.sync kernels, and the block-scaled
m16n8k64 e2m1 form (sm_120a/121a)."""
from __future__ import annotations

from humming.devices.base import Backend, HelperRequest
from humming.devices.nvidia.common import ACT2, ASYNC_COPY, COMMON, SYNC_COPY

MMA_TYPE = {"f16": "f16", "bf16": "bf16"}


def _mma_helper(shape: tuple[int, int, int], act: str) -> str:
    t = MMA_TYPE[act]
    if tuple(shape) == (16, 8, 16):
        return rf"""
// one m16n8k16 step: D += A(16x16, row) * B(16x8, col), fp32 accumulate
__device__ __forceinline__ void mma_k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {{
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}}
"""
    if tuple(shape) == (16, 8, 8):
        return rf"""
// the profile declares only m16n8k8: a k16 step is two of them (A regs 0,1 hold k 0..7; 2,3 hold k 8..15)
__device__ __forceinline__ void mma_k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {{
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5}}, {{%6}}, {{%0,%1,%2,%3}};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5}}, {{%6}}, {{%0,%1,%2,%3}};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[2]), "r"(a[3]), "r"(b1));
}}
"""
    raise ValueError(f"no k16 spelling for mma shape {shape}")


def _mma8_helper(ins) -> str:
    """mma_k32(d, a, b0, b1): one 16x8x32 step on 8-bit operands (A row-major, B column-major).
    s8 accumulates in int32 and e4m3 in fp32; a profile that declares only m8n8k16 s8 (Turing) gets four of
    those, whose register layouts tile the 16x8x32 step exactly (rows g / g+8, k 0..15 / 16..31)."""
    t = ins.a_type
    if t == "s8" and tuple(ins.shape) == (16, 8, 32):
        return r"""
typedef int acc_t;
__device__ __forceinline__ float acc_to_f32(int v) { float r; asm("cvt.rn.f32.s32 %0, %1;\n" : "=f"(r) : "r"(v)); return r; }
__device__ __forceinline__ void mma_k32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
"""
    if t == "s8" and tuple(ins.shape) == (8, 8, 16):
        return r"""
typedef int acc_t;
__device__ __forceinline__ float acc_to_f32(int v) { float r; asm("cvt.rn.f32.s32 %0, %1;\n" : "=f"(r) : "r"(v)); return r; }
__device__ __forceinline__ void mma_m8k16(int& d0, int& d1, uint32_t a, uint32_t b) {
  asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%0,%1};\n" : "+r"(d0), "+r"(d1) : "r"(a), "r"(b));
}
// the profile declares only m8n8k16 s8: a 16x8x32 step is four of them
__device__ __forceinline__ void mma_k32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m8k16(d[0], d[1], a[0], b0); mma_m8k16(d[0], d[1], a[2], b1);
  mma_m8k16(d[2], d[3], a[1], b0); mma_m8k16(d[2], d[3], a[3], b1);
}
"""
    if t in ("e4m3", "e5m2") and tuple(ins.shape) == (16, 8, 32):
        return rf"""
typedef float acc_t;
__device__ __forceinline__ float acc_to_f32(float v) {{ return v; }}
__device__ __forceinline__ void mma_k32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {{
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}}
"""
    raise ValueError(f"no 8-bit k32 spelling for mma {t} {ins.shape}")


def _decode_helper(decode) -> str:
    """dq_raw<J>(word): the J-th code pair of a word as two activation-typed raw values."""
    cb = decode.container
    mask2 = decode.code_mask * 0x10001
    if decode.kind == "int" and decode.int_path == "magic":
        magic2 = decode.magic_bits * 0x10001
        return rf"""
// pair J of a word (J is a constant after unrolling, so the shift folds): codes at bits J*{cb} and 16+J*{cb}; OR-ed into the mantissa of the magic number
// (raw = magic + code, exact); the zero point and magic are removed by one add with -(magic + zero)
__device__ __forceinline__ uint32_t dq_raw(uint32_t w, int J) {{
  return lop3_and_or(w >> (J * {cb}), 0x{mask2:08X}u, 0x{magic2:08X}u);
}}
"""
    if decode.kind == "int":
        return rf"""
// 8-bit codes into bf16: through fp32 (2^23 + code is exact), then one packed conversion
__device__ __forceinline__ uint32_t dq_raw(uint32_t w, int J) {{
  float lo = u32_as_f32(0x4B000000u | ((w >> (J * {cb})) & 0xFFu)) - 8388608.0f;
  float hi = u32_as_f32(0x4B000000u | ((w >> (16 + J * {cb})) & 0xFFu)) - 8388608.0f;
  return f32x2_to_act2(lo, hi);
}}
"""
    target_man = 10 if decode.act == "f16" else 7
    em_bits = decode.exp_bits + decode.man_bits
    em_mask = ((1 << em_bits) - 1) << (target_man - decode.man_bits)
    em_mask2 = em_mask * 0x10001
    return rf"""
// float codes e{decode.exp_bits}m{decode.man_bits}: exponent+mantissa bits placed under the {decode.act} mantissa,
// sign moved to bit 15; raw = value * 2^-{decode.exponent_fix} exactly (the repacker folds 2^{decode.exponent_fix} into the scales)
__device__ __forceinline__ uint32_t dq_raw(uint32_t w, int J) {{
  uint32_t x = w >> (J * {cb});
  uint32_t em = (x << {target_man - decode.man_bits}) & 0x{em_mask2:08X}u;
  uint32_t sg = (x << {15 - em_bits}) & 0x80008000u;
  return em | sg;
}}
"""


def mma_sync_prelude(request: HelperRequest) -> str:
    """Helpers of the mma.sync kernels (NvidiaBackend.prelude): copies, epilogue arithmetic, and one k16 step with the
    weight decode, or one k32 step for 8-bit operands as stored, of the plan's declared form (request.mma)."""
    parts = [COMMON, ASYNC_COPY if request.async_copy else SYNC_COPY, ACT2[request.act]]
    if request.mma.a_type in ("s8", "e4m3", "e5m2"):  # 8-bit operands as stored: no weight decode
        parts.append(_mma8_helper(request.mma))
    else:
        parts.append(_mma_helper(tuple(request.mma.shape), request.act))
        parts.append(_decode_helper(request.weight))
    return "\n".join(parts)


# ---- block-scaled mma.sync (sm_120a/121a: kind::mxf4nvf4 / kind::mxf4, m16n8k64 e2m1 x e2m1 -> f32)
BLOCKSCALED_COPY = r"""
// global -> shared, 8 bytes, asynchronous; zero-filled when !valid (per-row activation scales of MXFP4)
__device__ __forceinline__ void copy_8_async(uint32_t dst, const void* src, bool valid) {
  int n = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" :: "r"(dst), "l"(src), "r"(n) : "memory");
}
"""


def blockscaled_mma_spelling(ins, scale_vec: int) -> str:
    """The PTX mnemonic of a declared block-scaled mma.sync form (PTX ISA, "Block Scaling for mma.sync"):
    mma.sync.aligned.m16n8k64.row.col.kind::{mxf4|mxf4nvf4}.block_scale.scale_vec::{2X|4X}.f32.e2m1.e2m1.f32.{ue8m0|ue4m3}."""
    if ins.family != "mma_sync" or not ins.scale_format or tuple(ins.shape) != (16, 8, 64):
        raise ValueError(f"not a block-scaled mma.sync m16n8k64 form: {ins.describe()}")
    if scale_vec not in ins.scale_vec:
        raise ValueError(f"scale_vec::{scale_vec}X is not declared for {ins.describe()}")
    m, n, k = ins.shape
    return (f"mma.sync.aligned.m{m}n{n}k{k}.row.col.kind::{ins.kind}.block_scale.scale_vec::{scale_vec}X"
            f".f32.{ins.a_type}.{ins.b_type}.f32.{ins.scale_format}")


def _blockscaled_mma_helper(ins, scale_vec: int) -> str:
    """mma_bs<BYTE_ID>(d, a, b0, b1, sfa, sfb): one m16n8k64 e2m1 step with block scales. The selectors are
    immediates: byte-id (0 for 4X; 0 or 2 for 2X: which byte pair of the scale registers) for A and B alike,
    thread-id-a = 0 (lanes with %laneid % 4 in {0, 1} supply SF_A: row lane/4, then row lane/4 + 8),
    thread-id-b = 0 (lane%4 == 0 supplies SF_B of column lane/4). The kernel fills every lane of a quad the
    same way, so the choice of the thread selector does not matter to the data."""
    mnemonic = blockscaled_mma_spelling(ins, scale_vec)
    return rf"""
template <int BYTE_ID>
__device__ __forceinline__ void mma_bs(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                       uint32_t sfa, uint32_t sfb) {{
  asm volatile("{mnemonic} "
               "{{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}}, %10, {{%12, 0}}, %11, {{%12, 0}};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(sfa), "r"(sfb), "n"(BYTE_ID));
}}
"""


def blockscaled_prelude(backend: Backend, request: HelperRequest, scale_vec: int) -> str:
    """Helpers of the block-scaled mma.sync kernel: copies (16- and 8-byte cp.async), shared loads, epilogue
    arithmetic, and one m16n8k64 block-scaled step for the plan's declared form (request.mma)."""
    if not request.async_copy:
        raise ValueError("the block-scaled kernel needs cp.async (declared on every profile with the form)")
    return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], BLOCKSCALED_COPY,
                      _blockscaled_mma_helper(request.mma, scale_vec)])
