"""wgmma (sm_90a) with the A operand in registers (the RS form): the m64nNk16 16-bit and m64nNk32 8-bit register-A
steps and the preludes of the register-A WnA16 kernel (weights dequantized in registers) and W4A8 kernel (int4
widened in registers), with their options: tensor copies, clusters, the producer warpgroup, stream-K hand-over."""
from __future__ import annotations

from humming.devices.base import Backend, HelperRequest
from humming.devices.nvidia.cluster import cluster_multicast_helpers
from humming.devices.nvidia.common import ACT2, ASYNC_COPY, COMMON, STS_128
from humming.devices.nvidia.convert import RS8_WIDEN_LINEAR_T, RS8_WIDEN_T, WGMMA_W4A8
from humming.devices.nvidia.mma_sync import _decode_helper
from humming.devices.nvidia.tma import BULK_G2S, L2_PREFETCH, MBAR_WAIT_POLITE, tensor_copy_helpers
from humming.devices.nvidia.wgmma import CONSUMER_TURN, WGMMA_COMMON, consumer_barrier_helper, consumer_sync_helper

# ---- wgmma with the A operand in registers (sm_90a RS form): the WnA16 kernel that dequantizes weights in registers
RS8_WIDE_EXTRA = r"""__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float r; asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(r) : "r"(addr)); return r;
}
__device__ __forceinline__ void sts_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" :: "r"(addr), "f"(v) : "memory");
}
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


# the wide W4A8 form's stream-K: the block index re-read where used (a volatile read, so the compiler recomputes what
# depends on it instead of keeping it live), and a barrier of one consumer warpgroup (named barriers 3 and 4)
STREAMK_RS8_EXTRA = r"""__device__ __forceinline__ int block_y() { int r; asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(r)); return r; }
__device__ __forceinline__ void warpgroup_sync(int wg) { asm volatile("bar.sync %0, 128;\n" :: "r"(3 + wg) : "memory"); }
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


def wgmma_rs_prelude(backend: Backend, request: HelperRequest, n: int, tensor_copy: bool = False,
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


def wgmma_rs8_prelude(backend: Backend, request: HelperRequest, n: int, producer: bool = False,
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
