"""The NVIDIA backend: spells every device helper the generated kernels call in PTX.

Which spelling is used comes from the profile's declarations (an MMA shape that is declared, a
memory feature that is declared), never from an architecture number.
"""
from __future__ import annotations

from humming.devices.base import Backend, CompileRoute, HelperRequest

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


WGMMA_COMMON = r"""
// ---- wgmma (sm_90a): a warpgroup (4 warps, 128 threads) multiplies operands read from shared memory
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// wait until at most N committed wgmma groups of this warpgroup are still pending
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// this thread's generic-proxy shared-memory writes (cp.async included) become visible to the async proxy (wgmma)
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// byte offset of 16-byte chunk ch (0..7) of row r in a K-major tile of 128-byte rows, 128-byte swizzle:
// the chunk index is XOR-ed with (r mod 8); the pattern repeats every 8 rows = 1024 bytes (tiles 1024-aligned)
__device__ __forceinline__ uint32_t swz128(int r, int ch) { return (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4)); }
// shared-memory matrix descriptor of a K-major operand with 128-byte swizzle (PTX ISA, matrix descriptor):
// bits 0-13 start address >> 4; 16-29 leading byte offset >> 4 (unused for swizzled K-major, 1 by convention);
// 32-45 stride byte offset >> 4 = 1024 B between groups of 8 rows; 49-51 base offset 0 (1024-aligned tiles);
// 62-63 swizzle mode 1 = 128 B. A k step of 32 bytes inside the swizzled row adds 32 to the start address.
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
"""


def _wgmma_k32_helper(a_type: str, n: int) -> str:
    """wgmma_k32(d, desc_a, desc_b): D(64 x n) += A(64 x 32) * B(32 x n), both operands K-major in shared memory.
    e4m3 accumulates in fp32, s8 in int32; d holds n/2 registers per thread: for n8 chunk j, d[4j..4j+1] are row
    16*warp + lane/4, columns 8j + 2*(lane%4) + {0, 1}, and d[4j+2..4j+3] the same columns 8 rows below."""
    regs = n // 2
    dlist = ",".join(f"%{i}" for i in range(regs))
    da, db, sd = regs, regs + 1, regs + 2
    if a_type == "s8":
        acc, con, cast = "int", "+r", "int"
        ins = f"wgmma.mma_async.sync.aligned.m64n{n}k32.s32.s8.s8 {{{dlist}}}, %{da}, %{db}, p;"
        conv = 'float r; asm("cvt.rn.f32.s32 %0, %1;\\n" : "=f"(r) : "r"(v)); return r;'
    elif a_type in ("e4m3", "e5m2"):
        acc, con, cast = "float", "+f", "float"
        ins = f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{a_type}.{a_type} {{{dlist}}}, %{da}, %{db}, p, 1, 1;"
        conv = "return v;"
    else:
        raise ValueError(f"no wgmma k32 spelling for {a_type}")
    outs = ", ".join(f'"{con}"(d[{i}])' for i in range(regs))
    return rf"""
typedef {acc} wg_acc_t;
constexpr int WG_ACC_REGS = {regs};   // accumulator registers per thread of an m64n{n} tile
__device__ __forceinline__ float wg_acc_to_f32({cast} v) {{ {conv} }}
// the accumulators are written asynchronously: keep the compiler from moving their uses across the waits
__device__ __forceinline__ void wgmma_fence_operand(wg_acc_t (&d)[{regs}]) {{
  #pragma unroll
  for (int i = 0; i < {regs}; ++i) asm volatile("" : "{con}"(d[i]) :: "memory");
}}
// one m64n{n}k32 {a_type} step: d = A * B + (accumulate ? d : 0)
__device__ __forceinline__ void wgmma_k32(wg_acc_t (&d)[{regs}], uint64_t desc_a, uint64_t desc_b, int accumulate) {{
  asm volatile("{{\n .reg .pred p;\n setp.ne.b32 p, %{sd}, 0;\n {ins}\n}}\n"
               : {outs}
               : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}}
"""


class NvidiaBackend(Backend):
    name = "nvidia"

    def supports(self, caps) -> bool:
        return caps.backend == "nvidia"

    def compile_route(self, caps) -> CompileRoute:
        return CompileRoute(
            compiler="nvrtc",
            arch=caps.target.arch,
            min_nvrtc=tuple(caps.target.min_nvrtc) if caps.target.min_nvrtc else None,
            reason=f"NVRTC to CUBIN for {caps.target.arch} (the profile's target)",
        )

    def prelude(self, request: HelperRequest) -> str:
        parts = [COMMON, ASYNC_COPY if request.async_copy else SYNC_COPY, ACT2[request.act]]
        if request.mma.a_type in ("s8", "e4m3", "e5m2"):  # 8-bit operands as stored: no weight decode
            parts.append(_mma8_helper(request.mma))
        else:
            parts.append(_mma_helper(tuple(request.mma.shape), request.act))
            parts.append(_decode_helper(request.weight))
        return "\n".join(parts)

    def helpers(self, name: str, request: HelperRequest | None = None, **params) -> str:
        if name == "actquant":
            from humming.devices.nvidia.actquant_spelling import actquant_prelude

            return actquant_prelude(params["act"], params["scale_format"], params["caps"])
        if name == "actquant_encoder":
            from humming.devices.nvidia.actquant_spelling import encode_spelling

            return encode_spelling(params["act"], params["caps"])[1]
        return super().helpers(name, request, **params)

    def wgmma_prelude(self, request: HelperRequest, n: int) -> str:
        """Helpers of the wgmma 8-bit kernel: copies, epilogue arithmetic, fences/commit/wait, the shared-memory
        descriptor and one m64n{n}k32 step for the plan's operand type (request.mma, a wgmma form)."""
        if request.mma.family != "wgmma":
            raise ValueError(f"wgmma_prelude needs a wgmma form, got {request.mma.family}")
        if n not in request.mma.n_values:
            raise ValueError(f"wgmma n={n} is not a declared N of {request.mma.describe()}")
        return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], WGMMA_COMMON,
                          _wgmma_k32_helper(request.mma.a_type, n)])

    def wgmma_wna16_prelude(self, request: HelperRequest, n: int) -> str:
        """Helpers of the wgmma WnA16 kernel (16-bit activations, integer weights dequantized into shared
        memory): copies, 16-bit pair arithmetic, the weight decode (dq_raw), 16-byte shared stores, fences and
        descriptors, and one m64n{n}k16 step for the plan's activation type (request.mma, a wgmma f16/bf16 form)."""
        if request.mma.family != "wgmma" or request.mma.a_type not in ("f16", "bf16"):
            raise ValueError(f"wgmma_wna16_prelude needs a wgmma f16/bf16 form, got {request.mma.describe()}")
        if n not in request.mma.n_values:
            raise ValueError(f"wgmma n={n} is not a declared N of {request.mma.describe()}")
        return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], WGMMA_COMMON, STS_128,
                          _decode_helper(request.weight), _wgmma_k16_helper(request.mma.a_type, n)])


STS_128 = r"""
// 16-byte shared-memory store (four 32-bit registers)
__device__ __forceinline__ void sts_128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
"""


def _wgmma_k16_helper(a_type: str, n: int) -> str:
    """wgmma_k16(d, desc_a, desc_b, accumulate): D(64 x n) += A(64 x 16) * B(16 x n) on f16/bf16 operands, both
    K-major in shared memory (no transpose: imm-trans-a = imm-trans-b = 0), fp32 accumulators; the register layout
    of d is that of the k32 forms (see _wgmma_k32_helper). A k16 step spans 32 bytes of a 128-byte row."""
    if a_type not in ("f16", "bf16"):
        raise ValueError(f"no wgmma k16 spelling for {a_type}")
    regs = n // 2
    dlist = ",".join(f"%{i}" for i in range(regs))
    da, db, sd = regs, regs + 1, regs + 2
    ins = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{a_type}.{a_type} {{{dlist}}}, %{da}, %{db}, p, 1, 1, 0, 0;"
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return rf"""
typedef float wg_acc_t;
constexpr int WG_ACC_REGS = {regs};   // accumulator registers per thread of an m64n{n} tile
// the accumulators are written asynchronously: keep the compiler from moving their uses across the waits
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[{regs}]) {{
  #pragma unroll
  for (int i = 0; i < {regs}; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}}
// one m64n{n}k16 {a_type} step: d = A * B + (accumulate ? d : 0)
__device__ __forceinline__ void wgmma_k16(float (&d)[{regs}], uint64_t desc_a, uint64_t desc_b, int accumulate) {{
  asm volatile("{{\n .reg .pred p;\n setp.ne.b32 p, %{sd}, 0;\n {ins}\n}}\n"
               : {outs}
               : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}}
"""


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


def wgmma_w4a8_prelude(backend: NvidiaBackend, request: HelperRequest, n: int) -> str:
    """Helpers of the wgmma W4A8 kernel: those of the wgmma 8-bit kernel, a 16-byte shared store and the
    widenings (int4 -> 16 x s8 with masks; int4 / e2m1 -> e4m3 with byte permutes)."""
    return backend.wgmma_prelude(request, n) + "\n" + WGMMA_W4A8


# one poll of an mbarrier phase (done = 1 once the phase of `parity` has completed), shared by the waits below
_TRY_WAIT = r"""    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");"""

MBARRIER = r"""
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// one arrival (release: this thread's earlier shared-memory writes are visible to whoever waits on the phase)
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" :: "r"(bar) : "memory");
}
// wait (acquire) until the phase of the given parity has completed
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
""" + _TRY_WAIT + """
}
"""

EXPECT_TX = r"""// this thread's arrival on the barrier's current phase, announcing `bytes` of copies that will complete on it
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n .reg .b64 st;\n mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" :: "r"(bar), "r"(bytes) : "memory");
}
"""

# the bulk-copy engine's L2 prefetch (cp.async.bulk family, sm_90 with the tma capability) and the SM count
L2_PREFETCH = r"""// asks the L2 for `bytes` (a multiple of 16, 16-byte aligned) at p, without waiting or any shared memory
__device__ __forceinline__ void l2_prefetch(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" :: "l"(p), "r"(bytes) : "memory");
}
__device__ __forceinline__ uint32_t sm_count() { uint32_t n; asm("mov.u32 %0, %%nsmid;" : "=r"(n)); return n; }
"""

BULK_G2S = r"""// `bytes` (a multiple of 16; both addresses 16-byte aligned) from global to this block's shared memory
__device__ __forceinline__ void bulk_copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               :: "r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
// orders this thread's (and, after a warp sync, its warp's) generic-proxy shared-memory accesses before its later
// bulk copies (async proxy): a slot is read into registers before the copy that refills it
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
"""
# the W4A16 stream-K form's hand-over of split tiles: a later part's block adds its atoms to the tile's counter (no
# value back); the block of the tile's first part polls the counter (acquire at GPU scope, ~128 ns apart) until the
# other parts' atoms are in
STREAMK_HANDOVER = r"""
__device__ __forceinline__ void red_add_i32(int* p, int v) {
  asm volatile("red.relaxed.gpu.global.add.s32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int load_acquire_i32(const int* p) {
  int r; asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(r) : "l"(p) : "memory"); return r;
}
__device__ __forceinline__ void wait_count_i32(const int* p, int expected) {
  while (load_acquire_i32(p) != expected) __nanosleep(128);
}
"""
BULK_COPY = r"""
// ---- bulk copies (sm_90: the TMA engine, no tensor map): global -> shared, completion counted in bytes on an mbarrier
""" + EXPECT_TX + BULK_G2S


TENSOR_COPY = r"""
// ---- tensor copies (sm_90: the TMA engine with a tensor map): a 2-D box of a global tensor into shared memory,
// laid out (and swizzled) as the map says, elements past the tensor's edges as zeros; completion counted in bytes on
// an mbarrier. The map (cuTensorMapEncodeTiled, 128 opaque bytes) is a __grid_constant__ kernel parameter.
struct __align__(64) TmaMap { unsigned long long bits[16]; };
// the box whose first element is (inner coordinate c0, outer coordinate c1) into shared memory at dst
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
"""


# a producer thread's wait for a released slot: as mbar_wait, sleeping ~64 ns between polls. The producer warp shares
# an SM sub-partition with consumer warps, and its tight polling took their issue slots (H200, 2026-12-01, the
# two-warpgroup W4A16 form at 128 tokens: 28672x8192 M=128 102.1 -> 98.5 us with stream-K, 102.4 -> 98.8 without;
# no change at 256 tokens)
MBAR_WAIT_POLITE = r"""
__device__ __forceinline__ void mbar_wait_polite(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (true) {
""" + _TRY_WAIT + r"""
    if (done) return;
    __nanosleep(64);
  }
}
"""


def tensor_copy_helpers(caps, mbarriers: bool = True) -> str:
    """The expect-tx arrival and the 2-D tensor copy, with the mbarrier helpers unless a prelude already has them
    (the profile must declare tma and mbarrier)."""
    if caps is not None and not (caps.memory.tma and caps.memory.mbarrier):
        raise ValueError(f"{caps.name} does not declare tma and mbarrier, which the tensor copies use")
    return (MBARRIER if mbarriers else "") + EXPECT_TX + TENSOR_COPY


CLUSTER_BASICS = r"""
// ---- thread-block clusters (sm_90 and later): blocks of one cluster run together and reach each other's shared memory.
// This block's rank in its cluster
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r; asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r)); return r;
}
// every thread of every block of the cluster (release / acquire: shared-memory writes before are seen after)
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
"""

CLUSTER_DSMEM = r"""// distributed shared memory: the address of this block's shared-memory address `addr` in block `rank` of the
// cluster, and a 16-byte store there (seen by that block after a cluster_sync)
__device__ __forceinline__ uint32_t cluster_peer_addr(uint32_t addr, uint32_t rank) {
  uint32_t r; asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank)); return r;
}
__device__ __forceinline__ void st_cluster_f32x4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
"""

CLUSTER_MULTICAST = r"""// one arrival on the mbarrier at the same shared-memory offset in block `rank` of the cluster. It releases a slot
// whose readers were wgmmas already waited for (wgmma.wait_group), and the refill is a tensor copy: the default
// (release, CTA scope) arrival suffices; .release.cluster would add a GPU-wide memory barrier (MEMBAR.GPU, which
// waits for this warp's weight loads in flight) to every stage.
__device__ __forceinline__ void mbar_arrive_peer(uint32_t bar, uint32_t rank) {
  asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
               " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" :: "r"(bar), "r"(rank) : "memory");
}
// tma_load_2d into the same shared-memory offset of every block in `mask` (bit i: rank i), each completing on its
// own mbarrier at offset `bar`: one read of the box from L2 for all of them
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar,
                                                      uint16_t mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
               " [%0], [%1, {%2, %3}], [%4], %5;\n"
               :: "r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask) : "memory");
}
"""


def cluster_dsmem_helpers(caps) -> str:
    """Cluster rank and barrier, and stores into a peer block's shared memory, for a profile that declares
    cluster_dsmem (ValueError otherwise)."""
    if caps is not None and not caps.memory.cluster_dsmem:
        raise ValueError(f"{caps.name} does not declare cluster_dsmem (thread-block clusters, distributed shared memory)")
    return CLUSTER_BASICS + CLUSTER_DSMEM


def cluster_multicast_helpers(caps) -> str:
    """Cluster rank and barrier, peer mbarrier arrivals and the multicast tensor copy (after tensor_copy_helpers),
    for a profile that declares cluster_multicast (ValueError otherwise)."""
    if caps is not None and not caps.memory.cluster_multicast:
        raise ValueError(f"{caps.name} does not declare cluster_multicast (thread-block clusters, multicast tensor copies)")
    return CLUSTER_BASICS + CLUSTER_MULTICAST


def stream_bulk_prelude(backend: NvidiaBackend, request: HelperRequest) -> str:
    """Helpers of the stream kernel whose weights, tables and activations arrive by bulk copy: those of the stream
    kernel, mbarriers and the bulk copy (the profile must declare tma and mbarrier)."""
    caps = request.caps
    if caps is not None and not (caps.memory.tma and caps.memory.mbarrier):
        raise ValueError(f"{caps.name} does not declare tma and mbarrier, which the bulk-copy stream kernel uses")
    return backend.prelude(request) + "\n" + MBARRIER + BULK_COPY


GRID_DEPENDENCY = r"""
// ---- programmatic dependent launch (griddepcontrol, sm_90 and later; no-ops without a PDL launch)
// let the next kernel of the stream start its prologue on SMs this grid frees
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// wait until the previous kernel has finished and its writes are visible (before reading its outputs or writing)
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
"""


def grid_dependency_helpers(caps) -> str:
    """The PDL helpers, for a profile that declares griddepcontrol (ValueError otherwise)."""
    if caps is not None and not caps.memory.griddepcontrol:
        raise ValueError(f"{caps.name} does not declare griddepcontrol (programmatic dependent launch)")
    return GRID_DEPENDENCY


SETMAXNREG = r"""// per-warpgroup register budgets (every thread of the warpgroup executes these)
template <int R> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R)); }
template <int R> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R)); }
"""

WGMMA_WARP_SPECIALISED = (
    "\n// ---- warp specialisation (sm_90a): producer and consumer warpgroups linked by mbarriers" + MBARRIER + SETMAXNREG)


def wgmma_ws_prelude(backend: NvidiaBackend, request: HelperRequest, n: int) -> str:
    """Helpers of the warp-specialised wgmma W4A8 kernel: those of the lock-step W4A8 kernel, mbarriers and
    setmaxnreg (the profile must declare mbarrier and setmaxnreg)."""
    caps = request.caps
    if caps is not None and not (caps.memory.mbarrier and caps.memory.setmaxnreg):
        raise ValueError(f"{caps.name} does not declare mbarrier and setmaxnreg, which warp specialisation uses")
    return wgmma_w4a8_prelude(backend, request, n) + "\n" + WGMMA_WARP_SPECIALISED


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


def blockscaled_prelude(backend: NvidiaBackend, request: HelperRequest, scale_vec: int) -> str:
    """Helpers of the block-scaled mma.sync kernel: copies (16- and 8-byte cp.async), shared loads, epilogue
    arithmetic, and one m16n8k64 block-scaled step for the plan's declared form (request.mma)."""
    if not request.async_copy:
        raise ValueError("the block-scaled kernel needs cp.async (declared on every profile with the form)")
    return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], BLOCKSCALED_COPY,
                      _blockscaled_mma_helper(request.mma, scale_vec)])


# ---- tcgen05 (Blackwell datacenter: sm_100a/103a/107a/110a and family targets) -------------------------------
# PTX ISA "Tensor Core 5th Generation": instruction descriptor (32 bits) for .kind::tf32/f16/f8f6f4/i8:
# bits 0-1 sparsity selector, 2 sparsity, 3 saturate, 4-5 dtype (f16 0, f32 1, s32 2), 7-9 atype, 10-12 btype,
# 13/14 negate A/B, 15/16 transpose A/B (0 = K-major), 17-22 N >> 3, 24-28 M >> 4, 30-31 max shift (.ws only).
TCGEN05_DTYPE = {"f16": 0, "f32": 1, "s32": 2}
TCGEN05_OPERAND = {
    "f16": {"f16": 0, "bf16": 1},
    "tf32": {"tf32": 2},
    "f8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
    "i8": {"u8": 0, "s8": 1},
}


def tcgen05_idesc(kind: str, a_type: str, b_type: str, acc: str, m: int, n: int,
                  a_mn_major: bool = False, b_mn_major: bool = False) -> int:
    """The 32-bit instruction descriptor of a dense tcgen05.mma (cta_group::1) for .kind::f16/tf32/f8f6f4/i8."""
    if kind not in TCGEN05_OPERAND:
        raise ValueError(f"no instruction-descriptor encoding for kind::{kind} here (block-scaled kinds differ)")
    codes = TCGEN05_OPERAND[kind]
    if a_type not in codes or b_type not in codes or acc not in TCGEN05_DTYPE:
        raise ValueError(f"kind::{kind}: no encoding for {a_type} x {b_type} -> {acc}")
    if m not in (64, 128) or n % 16 or not 16 <= n <= 256:  # cta_group::1 dense: M 64/128, N 16..256 step 16
        raise ValueError(f"tcgen05 cta_group::1 shape m{m}n{n} is not legal here")
    return ((TCGEN05_DTYPE[acc] << 4) | (codes[a_type] << 7) | (codes[b_type] << 10) | (int(a_mn_major) << 15)
            | (int(b_mn_major) << 16) | ((n >> 3) << 17) | ((m >> 4) << 24))


TCGEN05_COMMON = r"""
// ---- tcgen05: the MMA reads both operands from shared memory (descriptors) and accumulates in Tensor Memory
// this thread's generic-proxy shared-memory writes (cp.async included) become visible to the async proxy (tcgen05.mma)
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// byte offset of 16-byte chunk ch (0..7) of row r in a K-major tile of 128-byte rows, 128-byte swizzle
// (chunk index XOR (r mod 8); period 8 rows = 1024 bytes; tiles 1024-byte aligned)
__device__ __forceinline__ uint32_t swz128(int r, int ch) { return (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4)); }
// tcgen05 shared-memory descriptor (PTX ISA, "Shared memory descriptor"), K-major, 128-byte swizzle:
// bits 0-13 start address >> 4; 16-29 leading byte offset >> 4 (unused for swizzled K-major: 1); 32-45 stride byte
// offset >> 4 = 1024 B between 8-row groups; 46-48 fixed 0b001; 49-51 base offset 0 (1024-aligned); 52 LBO mode 0
// (relative); 61-63 swizzle 2 = 128 B. A k32 step of 32 bytes inside the swizzled row adds 2 to the address field.
__device__ __forceinline__ uint64_t tc_smem_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 46) | ((uint64_t)2 << 61);
}
__device__ __forceinline__ uint32_t tc_lds_32(uint32_t addr) {
  uint32_t r; asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(r) : "r"(addr) : "memory"); return r;
}
// Tensor Memory allocation by one whole warp: ncols (power of two, 32..512) columns x 128 lanes; the address is
// written to shared memory at dst. The permit is given up right after (one allocation per CTA).
__device__ __forceinline__ void tmem_alloc(uint32_t dst, uint32_t ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;\n" :: "r"(dst), "r"(ncols) : "memory");
}
__device__ __forceinline__ void tmem_relinquish() { asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void tmem_dealloc(uint32_t taddr, uint32_t ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;\n" :: "r"(taddr), "r"(ncols) : "memory");
}
// ordering of tcgen05 operations across a thread barrier (before: prior tcgen05 ops; after: later ones)
__device__ __forceinline__ void tc_fence_before() { asm volatile("tcgen05.fence::before_thread_sync;\n" ::: "memory"); }
__device__ __forceinline__ void tc_fence_after() { asm volatile("tcgen05.fence::after_thread_sync;\n" ::: "memory"); }
// mbarriers (shared::cta, 64-bit): init with an arrival count, then wait for the phase of a parity to complete
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
}
// completion of every tcgen05.mma this thread issued before: one arrival on the mbarrier
__device__ __forceinline__ void tc_commit(uint32_t bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];\n" :: "r"(bar) : "memory");
}
// 32 consecutive 32-bit columns of this thread's Tensor Memory lane (32x32b shape: thread t of the warp reads lane
// base + t; the warp may only touch lanes 32 * (warp % 4) ..), then the wait for the loads
__device__ __forceinline__ void tmem_ld32(uint32_t (&r)[32], uint32_t taddr) {
  asm volatile("tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
               "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, [%32];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
                 "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]),
                 "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]),
                 "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
               : "r"(taddr) : "memory");
}
__device__ __forceinline__ void tmem_ld_wait() { asm volatile("tcgen05.wait::ld.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void store_128(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.global.v4.b32 [%0], {%1,%2,%3,%4};\n" :: "l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
"""


def tcgen05_mma_spelling(ins) -> str:
    """The PTX mnemonic of a declared dense tcgen05 form, one CTA: tcgen05.mma.cta_group::1.kind::{kind}."""
    if ins.family != "tcgen05" or ins.scale_format or ins.kind not in TCGEN05_OPERAND:
        raise ValueError(f"not a dense tcgen05 form with a known instruction descriptor: {ins.describe()}")
    return f"tcgen05.mma.cta_group::1.kind::{ins.kind}"


def _tcgen05_mma_helper(ins, acc: str) -> str:
    """tc_mma(d_tmem, desc_a, desc_b, idesc, accumulate): D[tmem] = A * B + (accumulate ? D : 0), issued by ONE
    thread; tc_acc_to_f32 reads one 32-bit accumulator column as fp32."""
    conv = ('float r; asm("cvt.rn.f32.s32 %0, %1;\\n" : "=f"(r) : "r"(v)); return r;' if acc == "s32"
            else "return u32_as_f32(v);")
    return rf"""
__device__ __forceinline__ void tc_mma(uint32_t d_tmem, uint64_t desc_a, uint64_t desc_b, uint32_t idesc, int accumulate) {{
  asm volatile("{{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n {tcgen05_mma_spelling(ins)} [%0], %1, %2, %3, p;\n}}\n"
               :: "r"(d_tmem), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate) : "memory");
}}
__device__ __forceinline__ float tc_acc_to_f32(uint32_t v) {{ {conv} }}
"""


def tcgen05_prelude(backend: NvidiaBackend, request: HelperRequest, acc: str) -> str:
    """Helpers of the tcgen05 8-bit kernel: copies, epilogue arithmetic, TMEM allocation/loads, mbarriers, fences,
    the shared-memory descriptor and one tcgen05.mma of the plan's declared form (request.mma)."""
    if request.mma.family != "tcgen05":
        raise ValueError(f"tcgen05_prelude needs a tcgen05 form, got {request.mma.family}")
    if not request.async_copy:
        raise ValueError("the tcgen05 kernel copies with cp.async")
    return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], TCGEN05_COMMON, _tcgen05_mma_helper(request.mma, acc)])


# ---- tcgen05 block-scaled (W4A4 NVFP4 kind::mxf4nvf4 4X ue4m3, MXFP4 kind::mxf4 2X ue8m0) ---------------------
# PTX ISA, "Instruction descriptor format for .kind::mxf8f6f4" and "... for .kind::mxf4 and .kind::mxf4nvf4":
# bit 2 sparsity; 4-5 scale factor B ID; 7-9 atype; 10-12 btype (10-11 for the mxf4 kinds); 13/14 negate; 15/16
# transpose (must be 0 for the mxf4 kinds); 17-22 N >> 3; 23 scale type (ue4m3 0, ue8m0 1); 24-26 reserved; 27-28
# M >> 7; 29-30 scale factor A ID; 31 K dimension for the mxf4 kinds (dense K=64: 0).
TCGEN05_BS_OPERAND = {"mxf4": {"e2m1": 1}, "mxf4nvf4": {"e2m1": 1}, "mxf8f6f4": TCGEN05_OPERAND["f8f6f4"]}
TCGEN05_BS_SCALE = {"mxf4": {"ue8m0": 1}, "mxf4nvf4": {"ue4m3": 0, "ue8m0": 1}, "mxf8f6f4": {"ue8m0": 1}}


def tcgen05_idesc_block_scaled(kind: str, a_type: str, b_type: str, scale_format: str, m: int, n: int,
                               sfa_id: int = 0, sfb_id: int = 0) -> int:
    """The 32-bit instruction descriptor of a block-scaled tcgen05.mma (cta_group::1, dense, K-major A and B)."""
    if kind not in TCGEN05_BS_OPERAND:
        raise ValueError(f"kind::{kind} is not a block-scaled tcgen05 kind")
    codes, scales = TCGEN05_BS_OPERAND[kind], TCGEN05_BS_SCALE[kind]
    if a_type not in codes or b_type not in codes or scale_format not in scales:
        raise ValueError(f"kind::{kind}: no encoding for {a_type} x {b_type} with {scale_format} scales")
    ids = (0, 2) if kind in ("mxf4", "mxf4nvf4") else (0, 1, 2, 3)
    if sfa_id not in ids or sfb_id not in ids:
        raise ValueError(f"kind::{kind}: scale factor IDs must be in {ids}")
    if m != 128 or n % 16 or not 16 <= n <= 256:  # cta_group::1, M=128 (M >> 7 = 1), N 16..256 step 16
        raise ValueError(f"tcgen05 block-scaled cta_group::1 shape m{m}n{n} is not legal here")
    return ((sfb_id << 4) | (codes[a_type] << 7) | (codes[b_type] << 10) | ((n >> 3) << 17)
            | (scales[scale_format] << 23) | ((m >> 7) << 27) | (sfa_id << 29))


def tcgen05_block_scale_spelling(ins, scale_vec: int, arch: str | None) -> str:
    """The PTX mnemonic of a declared block-scaled tcgen05 form for the compile target ``arch``:
    tcgen05.mma.cta_group::1.kind::{mxf4|mxf4nvf4|mxf8f6f4}.block_scale.{scale_vec::NX | blockNN}. Architecture-
    specific targets (sm_100a/103a/107a/110a) take scale_vec::NX (PTX 8.6 on); family targets (sm_100f, ...) accept
    only the .block16/.block32 aliases (NVRTC 12.9 and 13.5 reject scale_vec::NX there; FACTS.md section 1)."""
    if ins.family != "tcgen05" or not ins.scale_format or ins.kind not in TCGEN05_BS_OPERAND:
        raise ValueError(f"not a block-scaled tcgen05 form: {ins.describe()}")
    if scale_vec not in ins.scale_vec:
        raise ValueError(f"scale_vec::{scale_vec}X is not declared for {ins.describe()}")
    family_target = bool(arch) and arch.startswith("sm_") and arch.endswith("f")
    vec = ".block16" if scale_vec == 4 else ".block32"
    return (f"tcgen05.mma.cta_group::1.kind::{ins.kind}.block_scale"
            + (vec if family_target else f".scale_vec::{scale_vec}X"))


TCGEN05_BLOCK_SCALED = r"""
// ---- tcgen05 block scaling: scale factors travel shared memory -> Tensor Memory (tcgen05.cp), the MMA reads them there
// global -> shared, 4 bytes, asynchronous; zero-filled when !valid (one row's 4 scale bytes of one 32-bit TMEM word)
__device__ __forceinline__ void copy_4_async(uint32_t dst, const void* src, bool valid) {
  int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(dst), "l"(src), "r"(n) : "memory");
}
// shared-memory descriptor of a 32-row x 16-byte scale block (tcgen05.cp .32x128b source): no swizzle (bits 61-63 = 0),
// core matrices of 8 rows x 16 bytes stored contiguously: stride byte offset 128 between them (bits 32-45), leading
// byte offset unused (one core matrix along the row; 128 by convention, bits 16-29), version bits 46-48 = 0b001
__device__ __forceinline__ uint64_t tc_sf_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(128 >> 4) << 32) | ((uint64_t)1 << 46);
}
// 32 lanes x 128 bits from shared memory into Tensor Memory columns taddr .. taddr + 3, multicast to the four 32-lane
// partitions (warpx4): row r of the block lands in lane r of every partition (scale factors must be duplicated there)
__device__ __forceinline__ void tc_cp_sf(uint32_t taddr, uint64_t desc) {
  asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;\n" :: "r"(taddr), "l"(desc) : "memory");
}
"""


def _tcgen05_bs_mma_helper(ins, scale_vec: int, arch: str | None) -> str:
    """tc_mma_bs(d_tmem, desc_a, desc_b, idesc, sfa_tmem, sfb_tmem, accumulate): D[tmem] = (A * SF_A) (B * SF_B) +
    (accumulate ? D : 0), issued by ONE thread; the scale factors are read from Tensor Memory at sfa_tmem / sfb_tmem
    (the sub-word selected by the IDs in idesc)."""
    mnemonic = tcgen05_block_scale_spelling(ins, scale_vec, arch)
    return rf"""
__device__ __forceinline__ void tc_mma_bs(uint32_t d_tmem, uint64_t desc_a, uint64_t desc_b, uint32_t idesc,
                                          uint32_t sfa_tmem, uint32_t sfb_tmem, int accumulate) {{
  asm volatile("{{\n .reg .pred p;\n setp.ne.b32 p, %6, 0;\n {mnemonic} [%0], %1, %2, %3, [%4], [%5], p;\n}}\n"
               :: "r"(d_tmem), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem), "r"(accumulate)
               : "memory");
}}
__device__ __forceinline__ float tc_acc_to_f32(uint32_t v) {{ return u32_as_f32(v); }}
"""


TCGEN05_W4A8 = r"""
// ---- tcgen05 W4A8: e2m1 weights copied into the padded 8-bit operand layout of kind::mxf8f6f4 (16 codes + 8 bytes)
__device__ __forceinline__ void st_shared_64(uint32_t addr, uint32_t a, uint32_t b) {
  asm volatile("st.shared.v2.u32 [%0], {%1,%2};\n" :: "r"(addr), "r"(a), "r"(b) : "memory");
}
__device__ __forceinline__ void st_shared_128(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
"""


def tcgen05_blockscaled_prelude(backend: NvidiaBackend, request: HelperRequest, scale_vec: int) -> str:
    """Helpers of the tcgen05 block-scaled kernel: those of the tcgen05 8-bit kernel (copies, TMEM, mbarriers, fences,
    operand descriptors, epilogue arithmetic), the scale-factor copies (4-byte cp.async, tcgen05.cp 32x128b.warpx4)
    and one block-scaled tcgen05.mma of the plan's declared form, spelled for the profile's compile target; for
    e4m3 x e2m1 (W4A8, kind::mxf8f6f4) also the 8-byte copy and the shared-memory stores of the padded layout."""
    ins = request.mma
    if ins.family != "tcgen05" or not ins.scale_format:
        raise ValueError(f"tcgen05_blockscaled_prelude needs a block-scaled tcgen05 form, got {ins.describe()}")
    if not request.async_copy:
        raise ValueError("the tcgen05 kernel copies with cp.async")
    arch = request.caps.target.arch if request.caps is not None else None
    parts = [COMMON, ASYNC_COPY, ACT2[request.act], TCGEN05_COMMON, TCGEN05_BLOCK_SCALED]
    if ins.a_type != ins.b_type:  # W4A8
        parts += [BLOCKSCALED_COPY, TCGEN05_W4A8]
    return "\n".join(parts + [_tcgen05_bs_mma_helper(ins, scale_vec, arch)])


def tcgen05_wna16_prelude(backend: NvidiaBackend, request: HelperRequest) -> str:
    """Helpers of the tcgen05 WnA16 kernel (16-bit activations x integer weights dequantized into shared memory,
    kind::f16, fp32 accumulator in Tensor Memory): copies, 16-bit pair arithmetic, the weight decode (dq_raw), 16-byte
    shared stores, the tcgen05 helpers of the 8-bit kernel and one tcgen05.mma of the plan's f16/bf16 form."""
    ins = request.mma
    if ins.family != "tcgen05" or ins.kind != "f16" or ins.a_type not in ("f16", "bf16"):
        raise ValueError(f"tcgen05_wna16_prelude needs a tcgen05 kind::f16 form, got {ins.describe()}")
    if not request.async_copy:
        raise ValueError("the tcgen05 kernel copies with cp.async")
    return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], TCGEN05_COMMON, STS_128, _decode_helper(request.weight),
                      _tcgen05_mma_helper(ins, "f32")])


# ---- wgmma with the A operand in registers (sm_90a RS form): the WnA16 kernel that dequantizes weights in registers
RS8_WIDE_EXTRA = r"""__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float r; asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(r) : "r"(addr)); return r;
}
__device__ __forceinline__ void sts_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(addr), "f"(v) : "memory");
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

# the wide W4A8 form's stream-K: the block index re-read where used (a volatile read, so the compiler recomputes what
# depends on it instead of keeping it live), and a barrier of one consumer warpgroup (named barriers 3 and 4)
STREAMK_RS8_EXTRA = r"""__device__ __forceinline__ int block_y() { int r; asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(r)); return r; }
__device__ __forceinline__ void warpgroup_sync(int wg) { asm volatile("bar.sync %0, 128;\n" :: "r"(3 + wg) : "memory"); }
"""

CONSUMER_TURN = r"""// named barrier 2 across the two consumer warpgroups: one arrives (no wait), the other waits for it
__device__ __forceinline__ void consumer_turn_give() { asm volatile("bar.arrive 2, 256;\n" ::: "memory"); }
__device__ __forceinline__ void consumer_turn_take() { asm volatile("bar.sync 2, 256;\n" ::: "memory"); }
"""

WGMMA_RS_EXTRA = r"""
// 16-bit shared-memory store (the epilogue's staging tile) and 16-byte global store (its coalesced copy-out)
__device__ __forceinline__ void sts_u16(uint32_t addr, uint16_t v) {
  asm volatile("st.shared.u16 [%0], %1;\n" :: "r"(addr), "h"(v) : "memory");
}
__device__ __forceinline__ void store_g128(void* p, const uint32_t (&r)[4]) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};\n" :: "l"(p), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
"""


def _wgmma_k16_rs_helper(a_type: str, n: int) -> str:
    """wgmma_k16_rs(d, a, desc_b, accumulate): D(64 x n) += A(64 x 16) * B(16 x n) with A in registers (PTX ISA
    "wgmma.mma_async ... d, a, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b"): warp w of the warpgroup
    holds rows 16w .. 16w+15 of A in the register layout of the mma.sync m16n8k16 A fragment (a[0]: row lane/4,
    k 2*(lane%4) + {0,1}; a[1]: row + 8; a[2]: k + 8; a[3]: row + 8 and k + 8; two 16-bit values per register,
    lower k in the low half). B is K-major in shared memory (imm-trans-b = 0); fp32 accumulators laid out as in
    _wgmma_k32_helper. The registers of a must not change until a wgmma_wait covers this step."""
    if a_type not in ("f16", "bf16"):
        raise ValueError(f"no wgmma k16 register-A spelling for {a_type}")
    return _wgmma_rs_step(n, 16, f"f32.{a_type}.{a_type}", ", 1, 1, 0", "float", "+f", None)


# int4 codes into f16 without a shift for the odd pair of a byte: the codes at bits 4-7 and 20-23 OR-ed into the magic
# number's mantissa land as 16 x code (magic 1024 has unit spacing up to 2048, so 1024 + 16 code is exact)
DQ_RAW_X16 = r"""
__device__ __forceinline__ uint32_t dq_raw_x16(uint32_t w) { return lop3_and_or(w, 0x00F000F0u, 0x64006400u); }
"""


STMATRIX = r"""
// stmatrix (sm_90): four 8x8 matrices of 16-bit values from the mma fragment layout (register i of lane l: row l / 4,
// columns 2 (l % 4), +1 of matrix i), stored transposed: lane l gives the address of row l % 8 of matrix l / 8
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
"""


def stmatrix_helpers(caps) -> str:
    """The stmatrix store, for a profile that declares stmatrix (ValueError otherwise)."""
    if caps is not None and not caps.memory.stmatrix:
        raise ValueError(f"{caps.name} does not declare stmatrix")
    return STMATRIX


def wgmma_rs_prelude(backend: NvidiaBackend, request: HelperRequest, n: int, tensor_copy: bool = False,
                     consumer_threads: int = 0, stagger: bool = False, cluster: bool = False,
                     streamk: bool = False) -> str:
    """Helpers of the register-A wgmma WnA16 kernel: copies, 16-bit pair arithmetic, the weight decode (dq_raw) of
    the mma.sync layout, fences and descriptors, the epilogue's staging stores and one m64n{n}k16 register-A step
    for the plan's activation type (request.mma, a wgmma f16/bf16 form); with ``tensor_copy`` the mbarriers and
    the TMA tensor copy that bring the activations in; with ``cluster`` the cluster helpers and the multicast copy;
    with ``streamk`` the stream-K form's split-tile hand-over."""
    if request.mma.family != "wgmma" or request.mma.a_type not in ("f16", "bf16"):
        raise ValueError(f"wgmma_rs_prelude needs a wgmma f16/bf16 form, got {request.mma.describe()}")
    if n not in request.mma.n_values:
        raise ValueError(f"wgmma n={n} is not a declared N of {request.mma.describe()}")
    parts = [COMMON, ASYNC_COPY, ACT2[request.act], WGMMA_COMMON, WGMMA_RS_EXTRA,
             _decode_helper(request.weight), _wgmma_k16_rs_helper(request.mma.a_type, n)]
    if request.act == "f16" and request.weight.kind == "int" and request.weight.int_path == "magic" \
            and request.weight.container == 4:
        parts.append(DQ_RAW_X16)
    if tensor_copy:
        parts.append(tensor_copy_helpers(request.caps))
    if cluster:
        if not tensor_copy:
            raise ValueError("the cluster multicast copies are tensor copies: tensor_copy=True")
        parts.append(cluster_multicast_helpers(request.caps))
        parts.append(consumer_barrier_helper(128))  # the warpgroup's barrier once the producer warp has left
    if consumer_threads:  # a barrier of the consumer warps alone (the producer warpgroup has left): named barrier 1
        if request.caps is not None and not request.caps.memory.setmaxnreg:
            raise ValueError(f"{request.caps.name} does not declare setmaxnreg, which the producer warpgroup uses")
        parts.append(consumer_sync_helper(consumer_threads))
        parts.append(MBAR_WAIT_POLITE)  # the producer thread's wait for released slots
    if stagger:  # the two consumer warpgroups' staggered start
        parts.append(CONSUMER_TURN)
    if streamk:
        parts.append(STREAMK_HANDOVER)
    return "\n".join(parts)


def _wgmma_k32_rs_helper(a_type: str, n: int) -> str:
    """wgmma_k32_rs(d, a, desc_b, accumulate): D(64 x n) += A(64 x 32) * B(32 x n) on 8-bit operands with A in
    registers (PTX ISA "wgmma.mma_async ... d, a, b-desc, scale-d[, imm-scale-a, imm-scale-b]"; the 8-bit forms
    have no transpose operands): warp w of the warpgroup holds rows 16w .. 16w+15 of A in the layout of the
    mma.sync m16n8k32 A fragment (a[0]: row lane/4, k 4*(lane%4) + {0..3}, lowest k in the lowest byte; a[1]: row
    + 8; a[2]: k + 16; a[3]: row + 8 and k + 16). B is K-major in shared memory; e4m3 accumulates in fp32, s8 in
    int32, laid out as in _wgmma_k32_helper. The registers of a must not change until a wgmma_wait covers this
    step."""
    if a_type == "s8":
        return _wgmma_rs_step(n, 32, "s32.s8.s8", "", "int", "+r",
                              'float r; asm("cvt.rn.f32.s32 %0, %1;\\n" : "=f"(r) : "r"(v)); return r;')
    if a_type in ("e4m3", "e5m2"):
        return _wgmma_rs_step(n, 32, f"f32.{a_type}.{a_type}", ", 1, 1", "float", "+f", "return v;")
    raise ValueError(f"no wgmma k32 register-A spelling for {a_type}")


def _wgmma_rs_step(n: int, k: int, types: str, imm: str, acc: str, con: str, conv: str | None) -> str:
    """The accumulator type, its operand fence and wgmma_k{k}_rs: one m64n{n}k{k} step with A in four registers and
    B in shared memory (``types``: the dtype.atype.btype part; ``imm``: the immediates after scale-d; ``conv``: the
    body of wg_acc_to_f32, or None where the accumulators are fp32 and the kernel needs no conversion)."""
    regs = n // 2
    dlist = ",".join(f"%{i}" for i in range(regs))
    alist = ",".join(f"%{regs + i}" for i in range(4))
    db, sd = regs + 4, regs + 5
    ins = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{types} {{{dlist}}}, {{{alist}}}, %{db}, p{imm};"
    outs = ", ".join(f'"{con}"(d[{i}])' for i in range(regs))
    fence_t = "float" if conv is None else "wg_acc_t"  # (the k16 kernel's text, as it was validated)
    to_f32 = "" if conv is None else f"__device__ __forceinline__ float wg_acc_to_f32({acc} v) {{ {conv} }}\n"
    return rf"""
typedef {acc} wg_acc_t;
constexpr int WG_ACC_REGS = {regs};   // accumulator registers per thread of an m64n{n} tile
{to_f32}// the accumulators are written asynchronously: keep the compiler from moving their uses across the waits
__device__ __forceinline__ void wgmma_fence_operand({fence_t} (&d)[{regs}]) {{
  #pragma unroll
  for (int i = 0; i < {regs}; ++i) asm volatile("" : "{con}"(d[i]) :: "memory");
}}
// one m64n{n}k{k} {types.split(".")[1]} step, A from registers: d = A * B + (accumulate ? d : 0)
__device__ __forceinline__ void wgmma_k{k}_rs({fence_t} (&d)[{regs}], const uint32_t (&a)[4], uint64_t desc_b, int accumulate) {{
  asm volatile("{{\n .reg .pred p;\n setp.ne.b32 p, %{sd}, 0;\n {ins}\n}}\n"
               : {outs}
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}}
"""


def consumer_barrier_helper(consumer_threads: int) -> str:
    """consumer_sync(): a barrier of the consumer warps alone (named barrier 1; a producer warp has left)."""
    return (f"__device__ __forceinline__ void consumer_sync() {{ asm volatile(\"bar.sync 1, "
            f"{consumer_threads};\\n\" ::: \"memory\"); }}\n")


def consumer_sync_helper(consumer_threads: int) -> str:
    """setmaxnreg and a barrier of the consumer warps alone (named barrier 1; the producer warpgroup has left)."""
    return SETMAXNREG + consumer_barrier_helper(consumer_threads)


def wgmma_rs8_prelude(backend: NvidiaBackend, request: HelperRequest, n: int, producer: bool = False,
                      weights_by_bulk: bool = False, stagger: bool = False, streamk: bool = False,
                      cluster: bool = False, widened: bool = False, l2_prefetch: bool = False) -> str:
    """Helpers of the register-A wgmma W4A8 kernel: copies, epilogue arithmetic, fences and descriptors, the
    epilogue's staging stores, the int4 widenings of the W4A8 kernels and one m64n{n}k32 register-A step for the
    plan's 8-bit operand type (request.mma, a wgmma e4m3/s8 form); with ``weights_by_bulk`` (the wide form) the
    bulk copy and a 32-bit shared load of a float; with ``stagger`` the consumers' turn barrier; with ``streamk``
    the block-index read and the warpgroup barrier of the stream-K form; with ``cluster`` the cluster rank and barrier,
    peer mbarrier arrivals and the multicast tensor copy (the profile must declare cluster_multicast); with
    ``widened`` the 16-byte shared store of the converter warps; with ``l2_prefetch`` the bulk L2 prefetch and the SM
    count (the profile must declare tma)."""
    if request.mma.family != "wgmma" or request.mma.a_type not in ("s8", "e4m3"):
        raise ValueError(f"wgmma_rs8_prelude needs a wgmma s8/e4m3 form, got {request.mma.describe()}")
    if n not in request.mma.n_values:
        raise ValueError(f"wgmma n={n} is not a declared N of {request.mma.describe()}")
    parts = [COMMON, ASYNC_COPY, ACT2[request.act], WGMMA_COMMON, WGMMA_RS_EXTRA, WGMMA_W4A8, RS8_WIDEN_T,
             RS8_WIDEN_LINEAR_T,
             _wgmma_k32_rs_helper(request.mma.a_type, n)]
    if producer:  # a producer warpgroup brings the activations in by TMA (tma, mbarrier, setmaxnreg declared)
        if request.caps is not None and not request.caps.memory.setmaxnreg:
            raise ValueError(f"{request.caps.name} does not declare setmaxnreg, which the producer warpgroup uses")
        parts += [tensor_copy_helpers(request.caps), consumer_sync_helper(256)]
    if weights_by_bulk:  # the wide form: weight codes and scales by bulk copy into each stage's slot
        if not producer:
            raise ValueError("the weights arrive by bulk copy only with the producer warpgroup")
        parts += [BULK_G2S, RS8_WIDE_EXTRA]
    if stagger:  # the consumers' staggered start
        parts.append(CONSUMER_TURN)
    if widened:  # converter warps store the widened fragments
        parts.append(STS_128)
    if l2_prefetch:  # the producer's prefetch of the next wave's weights
        if request.caps is not None and not request.caps.memory.tma:
            raise ValueError(f"{request.caps.name} does not declare tma, whose bulk-copy engine prefetches into L2")
        parts.append(L2_PREFETCH)
    if streamk:
        parts.append(STREAMK_RS8_EXTRA)
    if cluster:
        if not producer:
            raise ValueError("the cluster's multicast copies are issued by the producer warpgroup")
        parts.append(cluster_multicast_helpers(request.caps))
    return "\n".join(parts)
