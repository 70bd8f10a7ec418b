"""The wide register-A W4A8 form's producer thread (the first of the producer warpgroup): per stage, after the
consumers released the slot, one TMA tensor copy of the activation tile and bulk copies of the block's two 4 KB slabs
of int4 codes and the group scales, all completing on the slot's FULL mbarrier; with programmatic dependent launch the
first stages' weights before the wait for the previous kernel; optionally (RegisterA8Tiles.l2next) the next wave's first
stages of weights into L2 after the last stage."""
from __future__ import annotations

import re

from humming.core.common.emit import Template
from humming.core.common.wgmma import TILE_IN_LAUNCH_ORDER, TILE_RASTERIZED

# stage kt's codes: the block's slabs n0 / 64 and n0 / 64 + 1 (ktiles stages each), into slot s, completing on ``bar``
_CODE_COPIES = Template("""bulk_copy_g2s(w0 + s * W_BYTES, codes + (size_t)kt * SLAB_BYTES, SLAB_BYTES, ${bar});
bulk_copy_g2s(w0 + s * W_BYTES + SLAB_BYTES, codes + ((size_t)ktiles + kt) * SLAB_BYTES, SLAB_BYTES, ${bar});""")

_LOOP = Template("""      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t full = xbar0 + 8 * s;
        if (kt >= STAGES) mbar_wait(xbar0 + 8 * (STAGES + s), ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
        mbar_expect_tx(full, STAGE_TX);
        ${activations}
        ${weights}
      }""", activations="tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);")

# with programmatic dependent launch: each FULL mbarrier still expects the whole stage
_PDL_LOOP = Template("""      // programmatic dependent launch: the first stages' weights while the previous kernel finishes
      for (int kt = 0; kt < min(ktiles, STAGES); ++kt) {
        const int s = kt;
        const uint32_t full = xbar0 + 8 * s;
        mbar_expect_tx(full, STAGE_TX);
        ${weights}
      }
      pdl_wait();  // the previous kernel (the activation quantizer) has finished: its codes are visible
      #pragma unroll 1
      for (int kt = 0; kt < ktiles; ++kt) {
        const int s = kt % STAGES;
        const uint32_t full = xbar0 + 8 * s;
        if (kt >= STAGES) {
          mbar_wait(xbar0 + 8 * (STAGES + s), ((kt / STAGES) + 1) & 1);  // stage kt - STAGES released
          mbar_expect_tx(full, STAGE_TX);
          ${weights}
        }
        tma_load_2d(x0 + s * X_BYTES, &XMAP, kt * BK, m0, full);
      }""")


def code_copies(bar: str) -> str:
    """The bulk copies of stage kt's codes into slot s, completing on the mbarrier ``bar``."""
    return _CODE_COPIES.fill(bar=bar)


def producer_loop(scale_copy: str, pdl: bool, activations: str | None = None) -> tuple[str, str]:
    """The producer thread's loop (``scale_copy``: the copy of stage kt's group scales, or empty) and the token-scale
    warp's wait. With programmatic dependent launch the first STAGES stages' codes and scales are copied before
    griddepcontrol.wait (they do not come from the previous kernel), their activations after it. ``activations``:
    another copy of stage kt's activations (the cluster pair's multicast)."""
    weights = "\n".join(p for p in (code_copies("full"), scale_copy) if p)
    if not pdl:
        return _LOOP.fill(weights=weights, **({"activations": activations} if activations else {})), ""
    if activations:
        raise ValueError("the producer loop with programmatic dependent launch copies the activations itself")
    return (_PDL_LOOP.fill(weights=weights),
            "      pdl_wait();  // the token scales come from the previous kernel (the activation quantizer)\n")


def next_wave_prefetch(raster: int, group_scales: bool) -> str:
    """The producer thread's L2 prefetch, after its tile's last stage, of the first STAGES stages' codes (and group
    scales) of the block launched one wave later: block id + the SM count, its tile by the block's own mapping
    (humming.core.common.wgmma.tile_of_block, renamed), so that block's pipeline fill reads the weights from L2."""
    if raster:  # the block's own lines 2-3 for block nb: first / rows / m0 / n0 -> nfirst / nrows / nm0 / nn0
        lines = TILE_RASTERIZED.split("\n")[1:]
        tile = "\n".join(re.sub(r"\b(bid|first|rows|m0|n0)\b", lambda m: "nb" if m.group(1) == "bid" else "n" + m.group(1),
                                ln.split("   //")[0].rstrip()) for ln in lines)
        head = "        const int nb = bid + (int)nsm;"
    else:
        if TILE_IN_LAUNCH_ORDER != "  const int m0 = blockIdx.x * BT, n0 = blockIdx.y * BC;":
            raise ValueError("internal: the launch-order tile mapping changed; the next wave's prefetch follows it")
        tile = "  const int nm0 = nb % (int)gridDim.x * BT, nn0 = nb / (int)gridDim.x * BC;"
        head = "        const int nb = blockIdx.x + blockIdx.y * gridDim.x + (int)nsm;"
    tile = "\n".join("          " + ln.strip() for ln in tile.split("\n"))
    scales = ("\n            l2_prefetch(S + (size_t)kt * N + nn0, S_BYTES);" if group_scales else "")
    return f"""
      {{  // the block launched one wave later (block id + the SM count): its first stages' weights into L2
        const uint32_t nsm = sm_count();
{head}
        if (nb < (int)(gridDim.x * gridDim.y)) {{
{tile}
          const unsigned char* ncodes = reinterpret_cast<const unsigned char*>(Bw) + (size_t)(nn0 / 64) * ktiles * SLAB_BYTES;
          (void)nm0;   // (its activations are shared with this wave's blocks: in L2 already)
          for (int kt = 0; kt < min(ktiles, STAGES); ++kt) {{
            l2_prefetch(ncodes + (size_t)kt * SLAB_BYTES, SLAB_BYTES);
            l2_prefetch(ncodes + ((size_t)ktiles + kt) * SLAB_BYTES, SLAB_BYTES);{scales}
          }}
        }}
      }}"""
