"""tcgen05 (Blackwell datacenter): instruction descriptors (dense and block-scaled), Tensor Memory allocation and
loads, the MMA spellings, the scale-factor copies, and the preludes of the tcgen05 8-bit, WnA16 and block-scaled
kernels."""
from __future__ import annotations

from humming.devices.base import Backend, HelperRequest
from humming.devices.nvidia.common import ACT2, ASYNC_COPY, COMMON, STS_128
from humming.devices.nvidia.mma_sync import BLOCKSCALED_COPY, _decode_helper

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


def tcgen05_prelude(backend: Backend, request: HelperRequest, acc: str) -> str:
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


def tcgen05_blockscaled_prelude(backend: Backend, request: HelperRequest, scale_vec: int) -> str:
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


def tcgen05_wna16_prelude(backend: Backend, request: HelperRequest) -> str:
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
