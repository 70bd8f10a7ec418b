"""The mma.sync WnA16 family's tiles: the tile kernel uses the shape alone, the stream kernel (weights as the A
operand, a register ring of weight atoms per warp) its options."""
from __future__ import annotations

from dataclasses import dataclass

from humming.core.plan import Tiles


@dataclass(frozen=True)
class MmaWnA16Tiles(Tiles):
    x_ring: int = 0  # stream: 1 = the activations also travel in the register ring (one atom ahead)
    fold: int = 0  # stream: 1 = MMA on raw codes, zero point and scale applied per atom in fp32; 2 = the same with the
    #                16-channel tiles outermost (fewer live registers; needs x_ring or bulk)
    bulk: int = 0  # stream: 1 = weights, tables and activations reach a per-warp shared-memory ring of `stages` slots by
    #                bulk copy (TMA engine, mbarriers) instead of registers
    x_smem: int = 0  # stream: 1 = the block's activations (tokens < M over its K range) and per-atom tables are copied
    #                  once into shared memory after the launch and read with shared loads per atom
    balance: int = 0  # stream without split-K: the last `balance` slabs run as two blocks each, one per half of K (the
    #                   second to finish adds both); N/64 + balance blocks that fill whole rounds of blocks per SM give
    #                   every SM about the same bytes to stream
