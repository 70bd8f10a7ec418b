"""The wide register-A W4A8 form's converter warps (RegisterA8Tiles.widened; 256-token tiles without stream-K, clusters
or PDL): the producer warpgroup's warps 1-3 widen every stage's int4 codes into A_SLOTS slots of wgmma A fragments in
shared memory, so the consumers load their fragments instead of widening them. Each stage's codes complete on the
slot's own codes mbarrier (the converters wait there); its activations and scales on the FULL mbarrier, which the
converter warps' arrivals complete."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.families.register_a8.pieces import e4m3_widen_call, uses_tables
from humming.core.families.register_a8.producer import code_copies

# the producer thread's loop: the codes on the slot's codes mbarrier cfull, the rest on FULL
_PRODUCER_LOOP = Template("""      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t full = xbar0 + 8 * s, cfull = cbar0 + 8 * s;
        if (kt >= STAGES) mbar_wait(xbar0 + 8 * (STAGES + s), ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
        mbar_expect_tx(cfull, W_BYTES);
        ${code_copies}
        mbar_expect_tx(full, STAGE_TX - W_BYTES);
        ${activations_and_scales}
      }""")


def producer_loop(scale_copy: str) -> str:
    """The producer thread's loop with converter warps (``scale_copy``: the copy of stage kt's group scales, or
    empty)."""
    activations = "tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);"
    return _PRODUCER_LOOP.fill(code_copies=code_copies("cfull"),
                               activations_and_scales="\n".join(p for p in (activations, scale_copy) if p))


def converter_loop(lay) -> str:
    """The converter warps (the producer warpgroup's warps 1-3, after warp 1 staged the token scales): per stage, wait
    for its codes (their own mbarrier) and for the consumers' release of stage kt - A_SLOTS (whose fragments slot
    kt % A_SLOTS held), widen every consumer lane's 8 words into its 64 bytes of the slot (the lane's words and
    fragment registers as the consumers' own widening has them), then arrive at the stage's FULL mbarrier, which
    completes with the producer's copies and the three converter warps' arrivals: the consumers wait once a stage,
    as without converters."""
    tables = ""
    if uses_tables(lay):
        tables = ("      const uint32_t held0 = smem_u32(held);   // the widening's tables\n"
                  "      const uint32_t la0 = lds_32(held0), la1 = lds_32(held0 + 4), lb0 = lds_32(held0 + 8), "
                  "lb1 = lds_32(held0 + 12);\n")
    if lay.a_type == "e4m3":
        widen = e4m3_widen_call(lay.widen, "wq[ks >> 1][2 * (ks & 1) + e]", "f[2 * e]", "f[2 * e + 1]")
    else:
        widen = "{ f[2 * e] = s8x16_lo(wq[ks >> 1][2 * (ks & 1) + e]); f[2 * e + 1] = s8x16_hi(wq[ks >> 1][2 * (ks & 1) + e]); }"
    return f"""    if (warp > THREADS / 32) {{  // ---- the converter warps: every stage's weights widened into a slot of fragments
{tables}      const int c = tid - THREADS - 32;   // converter thread 0 .. CONVERTERS - 1
      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {{
        const int s = kt % STAGES, u = kt % A_SLOTS;
        mbar_wait(cbar0 + 8 * s, (kt / STAGES) & 1);  // stage kt's codes have landed
        if (kt >= A_SLOTS) {{  // the consumers released stage kt - A_SLOTS: they have loaded its fragments from slot u
          const int r = kt - A_SLOTS;
          mbar_wait(xbar0 + 8 * (STAGES + r % STAGES), (r / STAGES) & 1);
        }}
        #pragma unroll 1
        for (int l = c; l < THREADS; l += CONVERTERS) {{  // consumer lane l: warpgroup l / 128, warp (l / 32) % 4, lane l % 32
          const uint32_t src = w0 + s * W_BYTES + (l >> 7) * SLAB_BYTES + ((l >> 5) & 3) * 1024 + (l & 31) * 16;
          uint32_t wq[2][4];   // its word j = 4 hf + jj, as the consumers' own widening loads them
          lds_128(wq[0], src);
          lds_128(wq[1], src + 512);
          #pragma unroll
          for (int ks = 0; ks < 4; ++ks) {{  // fragment registers a[ks][0..3] from words 2 ks and 2 ks + 1
            uint32_t f[4];
            #pragma unroll
            for (int e = 0; e < 2; ++e) {widen}
            sts_128(aw0 + u * A_BYTES + ks * (THREADS * 16) + l * 16, f[0], f[1], f[2], f[3]);
          }}
        }}
        __syncwarp();
        if (lane == 0) mbar_arrive(xbar0 + 8 * s);  // release: the slot's stores are visible to the consumers
      }}
    }}
"""
