"""CUDA pieces the register-A W4A8 kernels share (the narrow, wide, direct and stream-K forms): the values held in
shared memory for the consumers, the slot-0 descriptor, the widening of a word of int4 labels, the checks both forms
start with, the per-channel scales, and the frame of the kernel (the end of its constants, the start of its body)."""
from __future__ import annotations

from humming.core.common.emit import Template
from humming.core.common.wgmma import SLOT0_DESCRIPTOR, tile_of_block
from humming.core.families.register_a import pair_cluster
from humming.core.families.register_a8.planner import BT, QUARTER_WT
from humming.devices.base import HelperRequest

# The wide and stream-K forms' values held in registers: ptxas, short of registers in the consumers' loop, recomputes a
# value at every use when it can (the tables from ktiles, the lane's slot addresses from the thread index: 16
# instructions a stage), but not a value loaded from shared memory. Thread 0 writes them next to the mbarriers.
HELD_DECL = ("  // values the consumers read back into registers: ptxas keeps a loaded value in a register, but recomputes one\n"
             "  // it can derive (the tables, the lane's addresses) at every use when registers are short\n"
             "  __shared__ uint32_t held[5];  // the widening's tables, a zero\n")


def held_init(backend) -> str:
    """Thread 0's stores of the held values: the widening's four tables (the backend's data "rs8_widen_tables"), a 0."""
    t = backend.data("rs8_widen_tables")
    return (f"    held[0] = 0x{t[0][0]:08X}u; held[1] = 0x{t[1][0]:08X}u;   // {t[0][1]} | {t[1][1]}\n"
            f"    held[2] = 0x{t[2][0]:08X}u; held[3] = 0x{t[3][0]:08X}u;   // {t[2][1]} | {t[3][1]}\n"
            "    held[4] = 0u;\n")


HELD_ZERO = "  const uint32_t held0 = smem_u32(held), zero = lds_32(held0 + 16);   // 0, loaded (held)\n"


HELD_LUTS = HELD_ZERO + ("  const uint32_t la0 = lds_32(held0), la1 = lds_32(held0 + 4);   // the widening's tables\n"
                         "  const uint32_t lb0 = lds_32(held0 + 8), lb1 = lds_32(held0 + 12);\n")


DESC0 = SLOT0_DESCRIPTOR  # (9 fewer uniform instructions a stage than building each stage's descriptor)


def e4m3_widen_call(widen: str, word: str, lo: str, hi: str) -> str:
    """The call that widens one word of e4m3 labels into its two fragment registers, by the layout's widening
    (WgmmaRs8Layout.widen: "linear", no tables; "prmt", the four tables la0 la1 lb0 lb1 in registers)."""
    if widen == "prmt":
        return f"int4n8_to_e4m3x8_x({word}, la0, la1, lb0, lb1, {lo}, {hi});"
    return f"int4_to_e4m3x8({word}, {lo}, {hi});"


def uses_tables(lay) -> bool:
    """True when the layout's widening reads the four lookup tables (e4m3 with the "prmt" widening)."""
    return lay.a_type == "e4m3" and lay.widen == "prmt"


def group_and_chain(plan, caps) -> tuple[bool, HelperRequest, int]:
    """Both forms' checks: groups of 128 or per channel, chains of 128 or 64 tokens (the wide form: two halves or
    four quarters; the narrow form: one partial or two halves). Returns (per channel, the helper request, chain)."""
    lay = plan.layout
    if lay.group not in (128, lay.k):
        raise ValueError(f"the register-A wgmma W4A8 kernel takes groups of 128 or per channel, not {lay.group}")
    chain = plan.instruction.shape[1]  # tokens per wgmma chain
    if chain not in (BT, QUARTER_WT):
        raise ValueError(f"the register-A W4A8 kernel runs chains of {BT} or {QUARTER_WT} tokens, not {chain}")
    request = HelperRequest(mma=plan.instruction, act=plan.act, weight=None, async_copy=True, caps=caps)
    return lay.group != 128, request, chain


def to_f32(lay) -> str:
    """The helper converting a partial's accumulator to fp32 (int32 sums of s8 fragments are small: an add)."""
    return "small_s32_to_f32" if lay.a_type == "s8" else "wg_acc_to_f32"


def widening(lay, word: str, ind: str) -> str:
    """The body of the ``for (int j = 0; j < 8; ++j)`` loop that widens word j (``word``) into the two fragment
    registers a[j / 2][2 (j % 2)] and a[j / 2][2 (j % 2) + 1] (the loop's lines at ``ind``)."""
    out = "a[j >> 1][2 * (j & 1)]", "a[j >> 1][2 * (j & 1) + 1]"
    if lay.a_type == "e4m3":
        return f"\n{ind}  {e4m3_widen_call(lay.widen, word, *out)}"
    return f" {{\n{ind}  {out[0]} = s8x16_lo({word});\n{ind}  {out[1]} = s8x16_hi({word});\n{ind}}}"


def channel_scales(at: str) -> tuple[str, str]:
    """Per-channel scales: the declaration loading this lane's two channels' (at ``at`` and 8 channels on) once, and
    the per-stage pick of them."""
    return (f"  // per-channel scales: this lane's two channels, once\n"
            f"  const float s_lo = load_f32({at}), s_hi = load_f32({at} + 8);\n",
            "const float sc0 = s_lo, sc1 = s_hi;")


# the end of both forms' cfg namespace
CFG_END = """static_assert(BT * OUT_LD * 2 <= STAGES * X_BYTES, "the staging tile fits in the activation slots");
static_assert((BT * (BC / 8)) % THREADS == 0, "whole copy-out passes");
}
"""

# the start of both forms' kernel body: thread coordinates, the block's tile (``tile``: launch order, or rasterized in
# groups of RASTER token tiles), its stages
_BLOCK_HEAD = Template("""  using namespace cfg;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2, w = warp & 3;
  const int g = lane >> 2, q = lane & 3;
${tile}
  const int ktiles = K / BK;
""")


def block_head(raster: int, pair: bool = False, tile: str | None = None) -> str:
    """The kernel body's start, the block's tile in launch order or rasterized in groups of ``raster`` token tiles
    (``pair``: a cluster pair's block, humming.core.families.register_a.pair_cluster.tile; ``tile``: the lines giving
    m0 / n0 instead, e.g. a routed block's)."""
    if tile is None:
        tile = pair_cluster.tile(raster) if pair else tile_of_block(raster)
    return _BLOCK_HEAD.fill(tile=tile)
