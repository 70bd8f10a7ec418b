"""The CUDA C++ of the MoE mma.sync 8-bit kernel: the 8-bit tile kernel (humming.core.families.mma_8bit.generator:
8-bit activation codes through swizzled shared memory and ldmatrix, weights in k32 atoms, mma.sync m16n8k32; W4A8
codes widened in registers) with its rows taken from a routing (humming.core.moe.routing), as the MoE tile kernel
takes the 16-bit one's (humming.core.families.moe_wna16.generator: the same placement, setup, and per-slot epilogue).

Block row r is slot s = slot_of_row[r]: its codes are row s / a_div of A [rows, KA] bytes (columns past KA and padding
rows zero-filled), its outputs row s of C [slots, n_out] times the per-token scale GS[s / a_div] and the slot's router
weight."""
from __future__ import annotations

from humming.core.families.mma_8bit.generator import w8a8_kernel_source
from humming.core.families.mma_wna16.generator import RowSource
from humming.core.families.moe_wna16.generator import MOE_PARAMS, MOE_PLACE, MOE_SETUP

# A row per slot (a_div 1) or per token (a_div top_k), 16 codes a chunk; columns past the real K (KA) read as zeros
MOE_CODE_ROWS = """\
      const int slot = slot_of_row[r];
      const bool ok = slot < num_slots && k0 + ch * 16 < KA;
      const unsigned char* src = A + (ok ? (size_t)(slot / a_div) * KA + k0 + ch * 16 : 0);
"""

INDEXED_CODES = RowSource(params=MOE_PARAMS, setup=MOE_SETUP, rows=MOE_CODE_ROWS, head=MOE_PLACE, block_m="mb",
                          block_n="nb")


def moe_mma_8bit_source(plan, backend, caps=None) -> str:
    return w8a8_kernel_source(plan, backend, caps, rows=INDEXED_CODES)
