"""CUDA pieces the register-A W4A8 kernels share (the narrow, wide, direct and stream-K forms): the values held in
shared memory for the consumers, the slot-0 descriptor, and the call that widens a word of int4 labels to e4m3."""
from __future__ import annotations

from humming.core.common.wgmma import SLOT0_DESCRIPTOR

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
