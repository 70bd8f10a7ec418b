"""What the FP8 wgmma loop of the W4A8 kernel can reach on this GPU (GPU): a synthetic loop with the wide form's shape
and none of its memory traffic, timed in SM cycles (clock64 per block, one block per SM, every SM busy), as a fraction
of the FP8 tensor peak (8192 flops per SM and cycle on sm_90). Each block's two warpgroups run ``--stages`` stages over
operands that stay in shared memory (the results are meaningless; only the cycles count); per stage and warpgroup:
``chains`` wgmma chains of four m64nNk32 e4m3 steps (k 128), A from registers (rs) or from shared memory (ss), each
chain's partial promoted into fp32 registers times a scale (``promote``: two partials, chain c + 1 issued before chain
c is waited for and promoted, as in the wide form; ``acc``: no promotion, every chain accumulates through the stages;
``single``: one partial, chain, wait, promote), optionally with the stage's int4 codes widened to e4m3 (``widen``: the
kernel's 9-instruction widening of 8 words from shared memory; in ss mode the widened fragment is stored to shared
memory, fenced and barriered per warpgroup before the stage's wgmmas: the consumers' widening into the SS operand).

    python scripts/wgmma_ceiling.py [--configs rs:64:4:promote:widen+release,ss:128:2:single] [--stages 4000]
        [--out DIR] [--compile-only]

A config is mode:N:chains:promotion[:extras], extras joined by "+": ``widen`` (above), ``lds`` (rs: the fragment
loaded from shared memory each stage, four 16-byte loads a lane: as if widened elsewhere), ``side`` (a third
warpgroup widening two lanes' fragments per pass into a scratch slot, without pause, until the consumers finish),
``rand`` (random finite e4m3 data instead of small values), ``release`` (the kernel's slot release after the last
wait: syncwarp, proxy fence, an mbarrier arrival), ``fullwait`` (a wait on a completed mbarrier phase at each stage's
head), ``stagger`` (warpgroup 1 starts one chain behind warpgroup 0), ``mulshift`` (the widening's high-half
selectors by a multiply-high instead of a shift). Prints one row per config: cycles per stage, % of the FP8 peak, the
SM clock the run held (cycles over event time). Caveats: rs with constant A registers (``rs:..:promote`` without
``lds`` / ``widen``) has ptxas copy them every stage (63 MOVs), and N 256 with ``single`` spills (256 accumulators);
``release`` arrives 8 times a stage on a barrier of 2^20 - 1 arrivals: keep --stages below ~130000 with it."""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

DEFAULT_CONFIGS = ("rs:64:4:acc", "rs:64:4:promote", "rs:64:4:promote:widen", "rs:64:4:promote:lds",
                   "rs:64:4:promote:lds+side", "rs:64:4:acc:side", "ss:64:4:promote:side", "rs:64:4:single:widen",
                   "rs:128:2:acc", "rs:128:2:single", "rs:128:2:single:widen", "rs:256:1:acc", "rs:256:1:single",
                   "ss:64:4:acc", "ss:64:4:promote", "ss:64:4:promote:widen", "ss:128:2:acc", "ss:128:2:single",
                   "ss:128:2:single:widen", "ss:256:1:acc", "ss:256:1:single")
FP8_FLOPS_PER_SM_CYCLE = 8192


def _wgmma(mode: str, n: int) -> str:
    """One m64nNk32 e4m3 step: d (N/2 fp32 registers) = A B + (acc ? d : 0); A from registers or a descriptor."""
    regs = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    dlist = ",".join(f"%{i}" for i in range(regs))
    if mode == "rs":
        a_ops, a_list, a_param = ('"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3])',
                                  f"{{%{regs},%{regs + 1},%{regs + 2},%{regs + 3}}}", "const uint32_t (&a)[4]")
        nb = regs + 4
    else:
        a_ops, a_list, a_param = '"l"(desc_a)', f"%{regs}", "uint64_t desc_a"
        nb = regs + 1
    return f"""__device__ __forceinline__ void mma{n}(float (&d)[{regs}], {a_param}, uint64_t desc_b, int acc) {{
  asm volatile("{{\\n .reg .pred p;\\n setp.ne.b32 p, %{nb + 1}, 0;\\n"
               " wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{dlist}}}, {a_list}, %{nb}, p, 1, 1;\\n}}\\n"
               : {outs} : {a_ops}, "l"(desc_b), "r"(acc));
}}
"""


def kernel_source(mode: str, n: int, chains: int, promotion: str, extras: frozenset = frozenset()) -> str:
    regs = n // 2
    if chains * regs > 128:
        raise ValueError("at most 128 fp32 accumulator registers per thread")
    partials = {"promote": 2, "single": 1, "acc": chains}[promotion]
    widen = "widen" in extras
    side = "side" in extras
    name = f"ceiling_{mode}_{n}_{chains}_{promotion}" + "".join(f"_{e}" for e in sorted(extras))
    a_rows = 64  # one warpgroup's A: 64 rows x 128 bytes (k 128), 128-byte swizzle
    lines = []
    emit = lines.append

    def chain(c: int, p: str, acc_first: str) -> None:
        emit(f"      fence_acc(p{p});")
        emit("      wgmma_fence();")
        for ks in range(4):
            a = f"a[{ks}]" if mode == "rs" else f"desc_a + {2 * ks}"
            first = acc_first if ks == 0 else "1"
            emit(f"      mma{n}(p{p}, {a}, desc_b + {c * n * 128 // 16 + 2 * ks}, {first});")
        emit("      wgmma_commit();")

    def promote(c: int, p: str) -> None:
        emit(f"      fence_acc(p{p});")
        emit(f"      #pragma unroll\n      for (int i = 0; i < {regs}; ++i) facc[{c * regs} + i] += p{p}[i] * (i & 2 ? sc1 : sc0);")

    if "stagger" in extras:  # the kernel's staggered start: warpgroup 1 one chain behind warpgroup 0
        emit('    if (wg == 1) asm volatile("bar.sync 4, 256;" ::: "memory");')
    emit("    #pragma unroll 1\n    for (int st = 0; st < stages; ++st) {")
    if "fullwait" in extras:  # the kernel's wait for the stage's copies, on a phase long complete
        emit('      { uint32_t ok; do { asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; '
             'selp.u32 %0, 1, 0, p; }" : "=r"(ok) : "r"(smem_u32(&ready)), "r"(0) : "memory"); } while (!ok); }')
    if widen:
        emit("      uint32_t wq[2][4];   // the stage's int4 codes (one of 4 slots, as the kernel's ring)")
        emit("      lds_128(wq[0], code_lane + (st & 3) * 4096);")
        emit("      lds_128(wq[1], code_lane + (st & 3) * 4096 + 512);")
        emit("      uint32_t w8[4][4];")
        emit("      #pragma unroll\n      for (int j = 0; j < 8; ++j)\n"
             "        widen8(wq[j >> 2][j & 3], la0, la1, lb0, lb1, w8[j >> 1][2 * (j & 1)], w8[j >> 1][2 * (j & 1) + 1], k16);")
        if mode == "rs":
            emit("      #pragma unroll\n      for (int i = 0; i < 16; ++i) a[i >> 2][i & 3] = w8[i >> 2][i & 3];")
        else:  # the consumers' widening into the SS operand: store, proxy fence, warpgroup barrier
            emit("      #pragma unroll\n      for (int ks = 0; ks < 4; ++ks) sts_128(a_lane + ks * 2048, w8[ks]);")
            emit("      fence_proxy_async_smem();")
            emit("      asm volatile(\"bar.sync %0, 128;\" :: \"r\"(2 + wg) : \"memory\");")
    if "lds" in extras:  # the fragment widened elsewhere: 4 x 16 bytes per lane from one of two slots
        emit("      #pragma unroll\n      for (int ks = 0; ks < 4; ++ks) lds_128(a[ks], a_lane + (st & 1) * 8192 * 0 + ks * 2048);")
    emit("      const float sc0 = 1.0f + 1e-7f * (float)st, sc1 = 1.0f - 1e-7f * (float)st;")
    for c in range(chains):
        if c == 1 and "stagger" in extras:  # (after chain 0's issue) warpgroup 0 lets warpgroup 1 start
            emit('      if (wg == 0 && st == 0) asm volatile("bar.arrive 4, 256;" ::: "memory");')
        if promotion == "acc":
            chain(c, str(c), "1")
        elif promotion == "single":
            chain(c, "0", "0")
            emit("      wgmma_wait<0>();")
            promote(c, "0")
        else:
            chain(c, str(c % 2), "0")
            if c > 0:
                emit("      wgmma_wait<1>();")
                promote(c - 1, str((c - 1) % 2))
    if promotion == "promote":
        emit("      wgmma_wait<0>();")
        if "release" in extras:  # the kernel's slot release (an mbarrier that never completes)
            emit("      __syncwarp();\n      if (lane == 0) { fence_proxy_async_smem(); "
                 "asm volatile(\"mbarrier.arrive.shared::cta.b64 _, [%0];\" :: \"r\"(smem_u32(&sink)) : \"memory\"); }")
        promote(chains - 1, str((chains - 1) % 2))
    emit("    }")
    loop = "\n".join(lines)
    if promotion == "acc":
        fold = "\n".join(f"  wgmma_wait<0>();\n  fence_acc(p{c});\n  #pragma unroll\n  for (int i = 0; i < {regs}; ++i) "
                         f"facc[{c * regs} + i] += p{c}[i];" for c in range(chains))
    else:
        fold = ""
    pdecl = "\n".join(f"  float p{i}[{regs}];\n  #pragma unroll\n  for (int i = 0; i < {regs}; ++i) p{i}[i] = 0.0f;"
                      for i in range(partials))
    threads = 384 if side else 256
    # "rand": every byte random but finite (bit 3, the exponent's low bit, cleared: no all-ones exponent, no NaN),
    # else small values; the register A the same
    data_mask = "0xF7F7F7F7u" if "rand" in extras else "0x3B3B3B3Bu"
    widening = _widening("mulshift" in extras)
    a_init = ("(((const uint32_t*)init)[(tid * 16 + i) % 4096] & 0xF7F7F7F7u)" if "rand" in extras
              else "(0x38383838u ^ (uint32_t)(tid & 7))")
    side_loop = SIDE_LOOP if side else ""
    return f"""typedef unsigned int uint32_t; typedef unsigned char uint8_t; typedef unsigned long long uint64_t;
#define DATA_MASK {data_mask}
#define A_INIT {a_init}
__device__ __forceinline__ uint32_t smem_u32(const void* p) {{ return (uint32_t)__cvta_generic_to_shared(p); }}
__device__ __forceinline__ void wgmma_fence() {{ asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory"); }}
__device__ __forceinline__ void wgmma_commit() {{ asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory"); }}
template <int N> __device__ __forceinline__ void wgmma_wait() {{ asm volatile("wgmma.wait_group.sync.aligned %0;\\n" :: "n"(N) : "memory"); }}
__device__ __forceinline__ void fence_proxy_async_smem() {{ asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory"); }}
template <int R> __device__ __forceinline__ void fence_acc_n(float (&d)[R]) {{
  #pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}}
#define fence_acc(d) fence_acc_n<{regs}>(d)
__device__ __forceinline__ uint64_t make_smem_desc(uint32_t addr) {{
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}}
__device__ __forceinline__ void lds_128(uint32_t (&r)[4], uint32_t addr) {{
  asm volatile("ld.shared.v4.u32 {{%0,%1,%2,%3}}, [%4];\\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}}
__device__ __forceinline__ void sts_128(uint32_t addr, const uint32_t (&r)[4]) {{
  asm volatile("st.shared.v4.u32 [%0], {{%1,%2,%3,%4}};\\n" :: "r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}}
__device__ __forceinline__ uint32_t prmt_b32(uint32_t a, uint32_t b, uint32_t s) {{
  uint32_t d; asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s)); return d;
}}
{widening}
{_wgmma(mode, n)}
extern "C" __global__ void __launch_bounds__({threads}, 1) {name}(const uint8_t* __restrict__ init, float* __restrict__ out,
                                                           long long* __restrict__ cycles, int stages) {{
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, w = (tid >> 5) & 3;
  const uint32_t b0 = (smem_u32(smem) + 1023u) & ~1023u;     // B: 256 rows x 128 bytes (32 KB)
  const uint32_t a0s = b0 + 32768;                            // A: two warpgroups x 64 rows x 128 bytes (16 KB)
  const uint32_t codes = a0s + 16384;                         // four 8 KB slots of int4 codes
  __shared__ int done;
  __shared__ __align__(8) unsigned long long sink;   // "release": arrivals that never complete a phase
  __shared__ __align__(8) unsigned long long ready;  // "fullwait": its phase 0 completes at the start
  if (tid == 0) {{
    done = 0;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(&sink)), "r"((1 << 20) - 1) : "memory");
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_u32(&ready)) : "memory");
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(&ready)) : "memory");
  }}
  for (int i = tid; i < (32768 + 16384 + 32768) / 16; i += {threads}) {{
    uint32_t r[4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) r[j] = ((const uint32_t*)init)[4 * i + j] & DATA_MASK;  // finite e4m3 / codes
    sts_128(b0 + 16 * i, r);
  }}
  fence_proxy_async_smem();
  __syncthreads();
  const uint32_t k16 = 65536u + (uint32_t)(stages >> 30);   // (65536, not a constant to the compiler)
  const uint32_t la0 = 0x44403800u + (uint32_t)(stages >> 30), la1 = 0x3533312Fu, lb0 = 0x4E4C4A48u, lb1 = 0xB8C0C4C8u;
  const uint32_t code_lane = codes + wg * 2048 + w * 512 + lane * 16;  // (16 B per lane, + 512 for the second half)
  const uint32_t a_lane = a0s + wg * {a_rows * 128} + (tid & 127) * 16;   // (ss widen: 16 B per lane and k32 step)
{side_loop}  const uint64_t desc_b = make_smem_desc(b0);
  const uint64_t desc_a = make_smem_desc(a0s + wg * {a_rows * 128});
  uint32_t a[4][4];
  #pragma unroll
  for (int i = 0; i < 16; ++i) a[i >> 2][i & 3] = A_INIT;   // e4m3 ones, or random finite values (rs)
  float facc[128];
  #pragma unroll
  for (int i = 0; i < 128; ++i) facc[i] = 0.0f;
{pdecl}
  asm volatile("bar.sync 1, 256;" ::: "memory");   // both consumer warpgroups (a side warpgroup runs on its own)
  long long t0 = clock64();
{loop}
{fold}
  wgmma_wait<0>();
  asm volatile("bar.sync 1, 256;" ::: "memory");   // both consumer warpgroups
  long long t1 = clock64();
  if (tid == 0) *(volatile int*)&done = 1;
  float sum = 0.0f;
  #pragma unroll
  for (int i = 0; i < 128; ++i) sum += facc[i];
  out[blockIdx.x * 256 + tid] = sum;   // (consumers only)
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
}}
""", name


# a third warpgroup widening two consumer lanes' fragments per pass (codes from shared memory, e4m3 fragments stored to
# a scratch slot of its own) until the consumers are done: the converter warpgroup of a weights-into-shared design
SIDE_LOOP = """  if (wg == 2) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    const uint32_t scratch = codes + 32768;
    #pragma unroll 1
    for (int st = 0; !*(volatile int*)&done; ++st) {
      #pragma unroll
      for (int job = 0; job < 2; ++job) {
        const int t = (tid & 127) + 128 * job, tw = (t >> 5) & 3, tl = t & 31;
        const uint32_t src = codes + (st & 3) * 4096 + (t >> 7) * 2048 + tw * 512 + tl * 16;
        uint32_t wq[2][4];
        lds_128(wq[0], src);
        lds_128(wq[1], src + 512);
        #pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          uint32_t f[4];
          widen8(wq[ks >> 1][2 * (ks & 1)], la0, la1, lb0, lb1, f[0], f[1], k16);
          widen8(wq[ks >> 1][2 * (ks & 1) + 1], la0, la1, lb0, lb1, f[2], f[3], k16);
          sts_128(scratch + (st & 1) * 16384 + t * 16 + ks * 4096, f);
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
"""


def _widening(mulshift: bool) -> str:
    """The W4A8 kernel's widening as the nvidia backend writes it (``int4n8_to_e4m3x8_x``, two byte-permute lookups
    and an xor per 4 codes), as ``widen8`` with a ``k16`` argument; with ``mulshift`` its high-half selectors come from
    a multiply-high with k16 = 65536 (not a constant to the compiler: the FMA pipe's IMAD.HI instead of the ALU's
    shift)."""
    from humming.devices.nvidia.backend import RS8_WIDEN_T

    text = RS8_WIDEN_T
    subs = [("int4n8_to_e4m3x8_x(", "widen8("), ("uint32_t& lo, uint32_t& hi)", "uint32_t& lo, uint32_t& hi, uint32_t k16)")]
    if mulshift:
        subs += [("w >> 16", "__umulhi(w, k16)"), ("wf >> 16", "__umulhi(wf, k16)")]
    for old, new in subs:
        if old not in text:
            raise ValueError(f"internal: the backend's widening no longer has {old!r}")
        text = text.replace(old, new)
    return text


def ideal_cycles(n: int, chains: int) -> float:
    """Cycles per stage of two warpgroups' chains at the FP8 tensor peak."""
    flops = 2 * chains * 4 * 2 * 64 * n * 32
    return flops / FP8_FLOPS_PER_SM_CYCLE


EXTRAS = ("widen", "lds", "side", "rand", "release", "stagger", "fullwait", "mulshift")


def parse(config: str) -> tuple[str, int, int, str, frozenset]:
    parts = config.split(":")
    extras = frozenset(parts[4].split("+")) if len(parts) == 5 else frozenset()
    if len(parts) not in (4, 5) or parts[0] not in ("rs", "ss") or parts[3] not in ("acc", "promote", "single") \
            or not extras <= set(EXTRAS) or ("lds" in extras and (parts[0] != "rs" or "widen" in extras)):
        raise SystemExit(f"config {config!r}: expected mode:N:chains:acc|promote|single[:extras], mode rs or ss, extras "
                         f"widen, lds (rs only), side, rand, release, stagger, fullwait, mulshift, joined by +")
    return parts[0], int(parts[1]), int(parts[2]), parts[3], extras


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    ap.add_argument("--stages", type=int, default=4000)
    ap.add_argument("--compile-only", action="store_true", help="compile every config, print ptxas registers")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from humming.core.compile.compiler import compile_cuda

    rows = []
    modules = []
    for config in args.configs.split(","):
        mode, n, chains, promotion, extras = parse(config)
        if "release" in extras and 8 * args.stages >= (1 << 20) - 1:
            raise SystemExit(f"{config}: --stages {args.stages} would complete the release barrier's phase "
                             "(8 arrivals a stage, 2^20 - 1 in all)")
        src, name = kernel_source(mode, n, chains, promotion, extras)
        mod = compile_cuda(src, [name], "sm_90a", options=["--ptxas-options=-v"], cache=False)
        regs = [ln for ln in mod.log.splitlines() if "registers" in ln]
        modules.append((config, n, chains, name, mod, 384 if "side" in config else 256))
        if args.compile_only:
            print(config, name, regs[-1].strip() if regs else mod.log.strip()[-200:])
    if args.compile_only:
        return
    import torch

    from humming.core.runtime.kernel import LoadedKernel

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    init = torch.randint(0, 256, (96 * 1024,), dtype=torch.uint8, device="cuda")
    out = torch.empty(sms * 256, dtype=torch.float32, device="cuda")
    cycles = torch.empty(sms, dtype=torch.int64, device="cuda")
    for config, n, chains, name, mod, threads in modules:
        kern = LoadedKernel(mod.cubin, name, 32768 + 16384 + 32768 + 32768 + 1024)
        stages = ctypes.c_int(args.stages)
        ptrs = [ctypes.c_void_p(init.data_ptr()), ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(cycles.data_ptr()), stages]
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(3):  # warm up (the clock ramps)
            kern.launch(0, (sms, 1, 1), threads, stream, ptrs)
        samples = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            kern.launch(0, (sms, 1, 1), threads, stream, ptrs)
            end.record()
            torch.cuda.synchronize()
            cyc = cycles.double().mean().item()
            samples.append((cyc / args.stages, cyc / (start.elapsed_time(end) * 1e3), start.elapsed_time(end) * 1e3 / args.stages))
        per_stage = statistics.median(s[0] for s in samples)
        mhz = statistics.median(s[1] for s in samples)
        us = statistics.median(s[2] for s in samples)
        ideal = ideal_cycles(n, chains)
        rows.append(dict(config=config, cycles_per_stage=round(per_stage, 1), ideal=ideal,
                         peak_pct=round(100 * ideal / per_stage, 1), mhz=round(mhz), us_per_stage=round(us, 4)))
        print(f"{config:28s} {per_stage:8.1f} cycles/stage (ideal {ideal:6.0f}) {100 * ideal / per_stage:5.1f}% of FP8 peak "
              f"at {mhz:5.0f} MHz", flush=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "wgmma_ceiling.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
