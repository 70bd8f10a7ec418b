"""The NVIDIA spellings every generated kernel starts from: shared and global loads and stores, ldmatrix, byte
permutes, split-K fences and atomics (COMMON); the 16-byte global -> shared copy (cp.async, or a synchronous copy where
the profile declares none); 16-bit float pair arithmetic per activation type (ACT2); the 16-byte shared store."""
from __future__ import annotations

COMMON = r"""
typedef unsigned int uint32_t;
typedef unsigned short uint16_t;
typedef unsigned long long uint64_t;

// shared-memory address of a generic pointer (32-bit, as ldmatrix/cp.async want it)
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  uint32_t r;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
  return r;
}
__device__ __forceinline__ void lds_128(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ uint32_t lds_32(uint32_t addr) {
  uint32_t r; asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(r) : "r"(addr)); return r;
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// (a & mask) | bits in one instruction
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(mask), "r"(bits));
  return r;
}
// {lo, lo} and {hi, hi} from the two 16-bit halves of a word
__device__ __forceinline__ uint32_t dup_lo(uint32_t a) {
  uint32_t r; asm("prmt.b32 %0, %1, %1, 0x1010;\n" : "=r"(r) : "r"(a)); return r;
}
__device__ __forceinline__ uint32_t dup_hi(uint32_t a) {
  uint32_t r; asm("prmt.b32 %0, %1, %1, 0x3232;\n" : "=r"(r) : "r"(a)); return r;
}
// byte permute: output byte i = byte sel.nibble(i) of the 8-byte value {b, a}
__device__ __forceinline__ uint32_t prmt_b32(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r; asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(sel)); return r;
}
__device__ __forceinline__ void fence_device() { asm volatile("membar.gl;\n" ::: "memory"); }
__device__ __forceinline__ int atomic_add_i32(int* p, int v) {
  int r; asm volatile("atom.global.add.s32 %0, [%1], %2;\n" : "=r"(r) : "l"(p), "r"(v) : "memory"); return r;
}
__device__ __forceinline__ void store_i32(int* p, int v) { asm volatile("st.global.s32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory"); }
// L2-coherent loads/stores of split-K partials (other blocks wrote them)
__device__ __forceinline__ void load_f32x2_l2(float& a, float& b, const float* p) {
  asm volatile("ld.global.cg.v2.f32 {%0,%1}, [%2];\n" : "=f"(a), "=f"(b) : "l"(p));
}
__device__ __forceinline__ float load_f32_l2(const float* p) {
  float r; asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(r) : "l"(p)); return r;
}
__device__ __forceinline__ void store_f32x2(float* p, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1,%2};\n" :: "l"(p), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void load_f32x4_l2(float (&r)[4], const float* p) {
  asm volatile("ld.global.cg.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3]) : "l"(p));
}
__device__ __forceinline__ void store_f32x4(float* p, float a, float b, float c, float d) {
  asm volatile("st.global.v4.f32 [%0], {%1,%2,%3,%4};\n" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void store_u32(void* p, uint32_t v) { asm volatile("st.global.b32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory"); }
// volatile like every load here: a plain asm is a pure function to the compiler, which may then issue it ahead of
// the test that guards it (`CS ? load_f32(CS + n) : 1`, hoisted out of a loop: a read of a null pointer)
__device__ __forceinline__ uint16_t load_u16(const void* p) {
  uint16_t r; asm volatile("ld.global.nc.u16 %0, [%1];\n" : "=h"(r) : "l"(p)); return r;
}
__device__ __forceinline__ float load_f32(const float* p) {
  float r; asm volatile("ld.global.nc.f32 %0, [%1];\n" : "=f"(r) : "l"(p)); return r;
}
// read-only global loads (weights streamed once; activations and scales shared through L1)
__device__ __forceinline__ void load_g128(uint32_t (&r)[4], const void* p) {
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}
__device__ __forceinline__ void load_g128_cached(uint32_t (&r)[4], const void* p) {
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "l"(p));
}
__device__ __forceinline__ uint32_t load_g32(const void* p) {
  uint32_t r; asm volatile("ld.global.nc.u32 %0, [%1];\n" : "=r"(r) : "l"(p)); return r;
}
__device__ __forceinline__ float u32_as_f32(uint32_t a) { float r; asm("mov.b32 %0, %1;\n" : "=f"(r) : "r"(a)); return r; }
"""


ASYNC_COPY = r"""
// global -> shared, 16 bytes, asynchronous; zero-filled when !valid
__device__ __forceinline__ void copy_16_async(uint32_t dst, const void* src, bool valid) {
  int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void copy_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }
"""


SYNC_COPY = r"""
// no cp.async on this profile: the copy is synchronous (loads land before the barrier that follows)
__device__ __forceinline__ void copy_16_async(uint32_t dst, const void* src, bool valid) {
  uint32_t a = 0, b = 0, c = 0, d = 0;
  if (valid) asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "l"(src));
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" :: "r"(dst), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void copy_commit() {}
template <int N> __device__ __forceinline__ void copy_wait() {}
"""


# 16-bit float pair arithmetic, per activation type
ACT2 = {
    "f16": r"""
__device__ __forceinline__ uint32_t act2_add(uint32_t a, uint32_t b) { uint32_t r; asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ uint32_t act2_mul(uint32_t a, uint32_t b) { uint32_t r; asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b)); return r; }
__device__ __forceinline__ uint32_t act2_fma(uint32_t a, uint32_t b, uint32_t c) { uint32_t r; asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ float act_to_f32(uint16_t a) { float r; asm("cvt.f32.f16 %0, %1;\n" : "=f"(r) : "h"(a)); return r; }
__device__ __forceinline__ void store_act(uint16_t* p, float v) {
  uint16_t h; asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
  asm volatile("st.global.b16 [%0], %1;\n" :: "l"(p), "h"(h) : "memory");
}
__device__ __forceinline__ uint32_t f32x2_to_act2(float lo, float hi) {
  uint16_t l, h; uint32_t r;
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(l) : "f"(lo));
  asm("cvt.rn.f16.f32 %0, %1;\n" : "=h"(h) : "f"(hi));
  asm("mov.b32 %0, {%1,%2};\n" : "=r"(r) : "h"(l), "h"(h));
  return r;
}
""",
    "bf16": r"""
// bf16x2 add/mul are spelled as fma (fma.rn.bf16x2 exists wherever bf16 MMA does); -0 keeps a*b exact
__device__ __forceinline__ uint32_t act2_add(uint32_t a, uint32_t b) { uint32_t r; asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(0x3F803F80u), "r"(b)); return r; }
__device__ __forceinline__ uint32_t act2_mul(uint32_t a, uint32_t b) { uint32_t r; asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u)); return r; }
__device__ __forceinline__ uint32_t act2_fma(uint32_t a, uint32_t b, uint32_t c) { uint32_t r; asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
__device__ __forceinline__ float act_to_f32(uint16_t a) { return u32_as_f32(((uint32_t)a) << 16); }
__device__ __forceinline__ void store_act(uint16_t* p, float v) {
  uint16_t h; asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(v));
  asm volatile("st.global.b16 [%0], %1;\n" :: "l"(p), "h"(h) : "memory");
}
__device__ __forceinline__ uint32_t f32x2_to_act2(float lo, float hi) {
  uint32_t r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
""",
}


STS_128 = r"""
// 16-byte shared-memory store (four 32-bit registers)
__device__ __forceinline__ void sts_128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
"""
