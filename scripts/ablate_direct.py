"""The ``direct`` ablation of the wide register-A W4A8 form (``scripts/ablate.py --variants direct256,direct128``):
the wgmmas accumulate straight into the block's accumulators in chains of N tokens (m64nNk32, N = 64 / 128 / 256)
instead of into two 64-token partials that are promoted (FFMA) into them. The group scales still apply exactly: the
accumulators hold the running sum in units of the current group's scale, so before group g's wgmmas each is
multiplied by s[g-1] / s[g] (one FMUL, as many as the promotion's FFMAs), and the epilogue multiplies by the last
group's scale. What it saves: 16 -> 4 (N = 256) wgmmas and descriptor adds a stage and the 64 partial registers.
Correct for finite nonzero scales (a zero scale needs the fallback: the promotion form); its error is printed by
ablate.py next to its time.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from humming.core.families.register_a8.direct import _stage_in  # noqa: E402  (the stage head, without scales)

_LOOP = r"""  wg_acc_t pa[WG_ACC_REGS], pb[WG_ACC_REGS];"""
_LOOP_END = r"""  consumer_sync();                 // all wgmmas done"""


def _wgmma_helper(n: int) -> str:
    regs = n // 2
    outs = ",".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    return (
        f"// one m64n{n}k32 e4m3 step, A from registers, accumulating into d[0 .. {regs - 1}]\n"
        f"__device__ __forceinline__ void wgmma_k32_rs_n{n}(float* d, const uint32_t (&a)[4], uint64_t desc_b) {{\n"
        f'  asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{outs}}}, '
        f'{{%{regs},%{regs + 1},%{regs + 2},%{regs + 3}}}, %{regs + 4}, 1, 1, 1;\\n"\n'
        f"               : {binds}\n"
        f'               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));\n'
        "}\n"
        "__device__ __forceinline__ float rcp_approx(float x) {\n"
        '  float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x)); return r;\n'
        "}\n")


def _chains(n: int, frag: str, ind: str) -> list[str]:
    """Each chain of n tokens: its running sums rescaled by r0 / r1, then its four wgmmas from fragment ``frag``."""
    regs = n // 2
    body = []
    for c in range(256 // n):
        body += [
            f"{ind}#pragma unroll",
            f"{ind}for (int i = 0; i < {regs}; ++i) facc[{regs * c} + i] *= (i & 2) ? r1 : r0;",
            f"{ind}#pragma unroll",
            f'{ind}for (int i = 0; i < {regs}; ++i) asm volatile("" : "+f"(facc[{regs * c} + i]) :: "memory");',
            f"{ind}wgmma_fence();",
            f"{ind}#pragma unroll",
            f"{ind}for (int ks = 0; ks < 4; ++ks)",
            f"{ind}  wgmma_k32_rs_n{n}(facc + {regs * c}, {frag}[ks], desc_x + {c} * ({n} * BK / 16) + 2 * ks);",
            f"{ind}wgmma_commit();",
        ]
        if c == 0:
            body.append(f"{ind}if (wg == 0 && kt == 0) consumer_turn_give();  // warpgroup 1 may start")
    return body


def _release(ind: str) -> list[str]:
    """Wait for the stage's wgmmas, then release its slot."""
    return [
        f"{ind}wgmma_wait<0>();",
        f"{ind}#pragma unroll",
        f'{ind}for (int i = 0; i < BT / 2; ++i) asm volatile("" : "+f"(facc[i]) :: "memory");',
        f"{ind}__syncwarp();   // this warp's reads of the slot are done: release it to the producer",
        f"{ind}if (lane == 0) {{ fence_proxy_async_smem(); mbar_arrive(xbar0 + 8 * (STAGES + s)); }}",
    ]


def _loop(n: int) -> str:
    body = [
        "  float sp0 = 0.0f, sp1 = 0.0f;   // the previous group's scales of the thread's two channels",
        "  if (wg == 1) consumer_turn_take();  // start one chain behind warpgroup 0",
        "  #pragma unroll 1",
        "  for (int kt = 0; kt < ktiles; ++kt) {",
        "    const int s = kt % STAGES;",
        "    mbar_wait(xbar0 + 8 * s, (kt / STAGES) & 1);",
        "    uint32_t wq[2][4];",
        "    lds_128(wq[0], wlane + s * W_BYTES);",
        "    lds_128(wq[1], wlane + s * W_BYTES + 512);",
        "    const float sc0 = lds_f32(slane + s * S_BYTES), sc1 = lds_f32(slane + s * S_BYTES + 32);",
        "    uint32_t a[4][4];",
        "    #pragma unroll",
        "    for (int j = 0; j < 8; ++j)",
        "      int4_to_e4m3x8(wq[j >> 2][j & 3], a[j >> 1][2 * (j & 1)], a[j >> 1][2 * (j & 1) + 1]);",
        "    const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));",
        "    // the running sums into units of this group's scale (at kt = 0 they are 0)",
        "    const float r0 = sp0 * rcp_approx(sc0), r1 = sp1 * rcp_approx(sc1);",
        *_chains(n, "a", "    "),
        *_release("    "),
        "    sp0 = sc0; sp1 = sc1;",
        "  }",
    ]
    return "\n".join(body) + "\n"


def _stage_loads(buf: str, kt: str, scales: str, ind: str) -> list[str]:
    """Wait for stage kt's copies, widen its codes into A fragment ``buf`` (the library's direct loop's stage), and
    load its group scales into ``scales``."""
    lines = _stage_in(kt, buf, "e4m3", ind)
    return lines[:-1] + [f"{ind}  {scales}[0] = lds_f32(slane + sl * S_BYTES); "
                         f"{scales}[1] = lds_f32(slane + sl * S_BYTES + 32);", lines[-1]]


def _prefetched_loop(n: int) -> str:
    """Chains of n tokens with the next stage's fragment widened (into the other of two A buffers) while this stage's
    wgmmas run: the loop unrolled by two stages."""
    body = [
        "  float sp[2] = {0.0f, 0.0f}, sc[2], sn[2];   // previous, current, next group scales of the lane's channels",
        "  uint32_t fa[2][4][4];   // two A fragments: stage kt's in fa[kt % 2]",
        "  if (wg == 1) consumer_turn_take();  // start one chain behind warpgroup 0",
        *_stage_loads("fa[0]", "0", "sc", "  "),
        "  #pragma unroll 1",
        "  for (int k2 = 0; k2 < ktiles; k2 += 2) {",
        "    #pragma unroll",
        "    for (int u = 0; u < 2; ++u) {",
        "      const int kt = k2 + u;",
        "      if (kt >= ktiles) break;",
        "      const int s = kt % STAGES;",
        "      const uint64_t desc_x = desc0 + (uint64_t)(s * (X_BYTES >> 4));",
        "      const float r0 = sp[0] * rcp_approx(sc[0]), r1 = sp[1] * rcp_approx(sc[1]);",
        *_chains(n, "fa[u]", "      "),
        "      if (kt + 1 < ktiles)",
        *_stage_loads("fa[u ^ 1]", "kt + 1", "sn", "      "),
        *_release("      "),
        "      sp[0] = sc[0]; sp[1] = sc[1]; sc[0] = sn[0]; sc[1] = sn[1];",
        "    }",
        "  }",
        "  const float sp0 = sp[0], sp1 = sp[1];",
    ]
    return "\n".join(body) + "\n"


def direct_prefetched(n: int) -> list[tuple[str, str]]:
    """``directw{n}``: direct(n) with the next stage's widening under this stage's wgmmas."""
    return _subs(n, _prefetched_loop(n))


def direct(n: int) -> list[tuple[str, str]]:
    """The substitutions (regex, replacement) of the variant with chains of n tokens."""
    return _subs(n, _loop(n))


def _subs(n: int, loop: str) -> list[tuple[str, str]]:
    if n not in (64, 128, 256):
        raise KeyError(f"direct{n}: chains of 64, 128 or 256 tokens")
    esc = lambda s: s.replace("\\", "\\\\")  # noqa: E731  (replacement text for re.sub)
    return [
        (r'(extern "C" __global__)', esc(_wgmma_helper(n)) + r"\1"),
        (r"  wg_acc_t pa\[WG_ACC_REGS\], pb\[WG_ACC_REGS\];(?:.|\n)*?(  consumer_sync\(\);                 // all wgmmas done)",
         esc(loop) + r"\1"),
        (r"cs\[h\] = CS \? load_f32\(CS \+ n0 \+ ch\) : 1\.0f;",
         "cs[h] = (CS ? load_f32(CS + n0 + ch) : 1.0f) * (h ? sp1 : sp0);"),
    ]
