"""wgmma (sm_90a) with both operands in shared memory: fences, commit / wait, the shared-memory matrix descriptor, the
m64nNk32 8-bit and m64nNk16 16-bit steps, the preludes of the wgmma 8-bit, WnA16, W4A8 and warp-specialised W4A8
kernels; per-warpgroup register budgets (setmaxnreg) and the consumer warps' named barriers; stmatrix."""
from __future__ import annotations

from humming.devices.base import Backend, HelperRequest
from humming.devices.nvidia.common import ACT2, ASYNC_COPY, COMMON, STS_128
from humming.devices.nvidia.convert import WGMMA_W4A8
from humming.devices.nvidia.mma_sync import _decode_helper
from humming.devices.nvidia.tma import MBARRIER

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


def wgmma_prelude(backend: Backend, request: HelperRequest, n: int) -> str:
    """Helpers of the wgmma 8-bit kernel: copies, epilogue arithmetic, fences/commit/wait, the shared-memory
    descriptor and one m64n{n}k32 step for the plan's operand type (request.mma, a wgmma form)."""
    if request.mma.family != "wgmma":
        raise ValueError(f"wgmma_prelude needs a wgmma form, got {request.mma.family}")
    if n not in request.mma.n_values:
        raise ValueError(f"wgmma n={n} is not a declared N of {request.mma.describe()}")
    return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], WGMMA_COMMON,
                      _wgmma_k32_helper(request.mma.a_type, n)])


def wgmma_wna16_prelude(backend: Backend, request: HelperRequest, n: int) -> str:
    """Helpers of the wgmma WnA16 kernel (16-bit activations, integer weights dequantized into shared
    memory): copies, 16-bit pair arithmetic, the weight decode (dq_raw), 16-byte shared stores, fences and
    descriptors, and one m64n{n}k16 step for the plan's activation type (request.mma, a wgmma f16/bf16 form)."""
    if request.mma.family != "wgmma" or request.mma.a_type not in ("f16", "bf16"):
        raise ValueError(f"wgmma_wna16_prelude needs a wgmma f16/bf16 form, got {request.mma.describe()}")
    if n not in request.mma.n_values:
        raise ValueError(f"wgmma n={n} is not a declared N of {request.mma.describe()}")
    return "\n".join([COMMON, ASYNC_COPY, ACT2[request.act], WGMMA_COMMON, STS_128,
                      _decode_helper(request.weight), _wgmma_k16_helper(request.mma.a_type, n)])


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


def wgmma_w4a8_prelude(backend: Backend, request: HelperRequest, n: int) -> str:
    """Helpers of the wgmma W4A8 kernel: those of the wgmma 8-bit kernel, a 16-byte shared store and the
    widenings (int4 -> 16 x s8 with masks; int4 / e2m1 -> e4m3 with byte permutes)."""
    return wgmma_prelude(backend, request, n) + "\n" + WGMMA_W4A8


SETMAXNREG = r"""// per-warpgroup register budgets (every thread of the warpgroup executes these)
template <int R> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(R)); }
template <int R> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(R)); }
"""


WGMMA_WARP_SPECIALISED = (
    "\n// ---- warp specialisation (sm_90a): producer and consumer warpgroups linked by mbarriers" + MBARRIER + SETMAXNREG)


def wgmma_ws_prelude(backend: Backend, request: HelperRequest, n: int) -> str:
    """Helpers of the warp-specialised wgmma W4A8 kernel: those of the lock-step W4A8 kernel, mbarriers and
    setmaxnreg (the profile must declare mbarrier and setmaxnreg)."""
    caps = request.caps
    if caps is not None and not (caps.memory.mbarrier and caps.memory.setmaxnreg):
        raise ValueError(f"{caps.name} does not declare mbarrier and setmaxnreg, which warp specialisation uses")
    return wgmma_w4a8_prelude(backend, request, n) + "\n" + WGMMA_WARP_SPECIALISED


CONSUMER_TURN = r"""// named barrier 2 across the two consumer warpgroups: one arrives (no wait), the other waits for it
__device__ __forceinline__ void consumer_turn_give() { asm volatile("bar.arrive 2, 256;\n" ::: "memory"); }
__device__ __forceinline__ void consumer_turn_take() { asm volatile("bar.sync 2, 256;\n" ::: "memory"); }
"""


def consumer_barrier_helper(consumer_threads: int) -> str:
    """consumer_sync(): a barrier of the consumer warps alone (named barrier 1; a producer warp has left)."""
    return (f"__device__ __forceinline__ void consumer_sync() {{ asm volatile(\"bar.sync 1, "
            f"{consumer_threads};\\n\" ::: \"memory\"); }}\n")


def consumer_sync_helper(consumer_threads: int) -> str:
    """setmaxnreg and a barrier of the consumer warps alone (named barrier 1; the producer warpgroup has left)."""
    return SETMAXNREG + consumer_barrier_helper(consumer_threads)


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
