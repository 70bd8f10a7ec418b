"""Operand layouts of the block-scaled mma.sync kernel (W4A4 NVFP4 / MXFP4 on sm_120a/121a).

Fragments of ``mma.m16n8k64`` with e2m1 operands (PTX ISA, "Matrix Fragments for mma.m16n8k64"; g = lane/4,
p = lane%4; a 32-bit register holds 8 elements, element j in bits 4j..4j+3):
  A (16x64, row):  a0 row g, k 8p..8p+7;  a1 row g+8, same k;  a2 row g, k 32+8p..;  a3 row g+8, k 32+8p..
  B (64x8, col):   b0 column g, k 8p..8p+7;  b1 column g, k 32+8p..
In bytes (2 elements per byte, the even k in the low nibble) these are the m16n8k32 8-bit fragments, so the
activation tile is read with ldmatrix exactly like the 8-bit kernel's, and the weights use the 8-bit k32 atom
layout on packed bytes (an atom = 64 columns x 128 k = 64 x 64 bytes).

Scale registers ("Block Scaling for mma.sync"): SF_A comes from the lanes with lane%4 in {0, 1} (thread-id-a 0):
lane 4g holds row g, lane 4g+1 row g+8; SF_B from lane%4 == 0 (thread-id-b 0): lane 4g holds column g. Byte i
of a 4X (NVFP4, 16-element blocks, ue4m3) register scales k 16i..16i+15 of the k64 step; a 2X (MXFP4,
32-element blocks, ue8m0) step uses the byte pair selected by byte-id (0: bytes 0-1, 2: bytes 2-3), byte 0/1 of
the pair scaling k 0..31 / 32..63. The kernel fills lanes 4g+2 / 4g+3 like 4g / 4g+1 and every lane of a quad with
the column's SF_B, so the selectors' choice of lane does not matter.

Weight scales, per 64x128 atom (lane reads 16 bytes at [(step*2 + t/4)*8 + g] for NVFP4, [(t/4)*8 + g] for MXFP4):
  NVFP4: [step s (2)][t/4 (2)][g (8)][t%4 (4)] words; word = the 4 ue4m3 scales of column t*8+g, k64 step s.
  MXFP4: [t/4 (2)][g (8)][t%4 (4)] words; word = the 2 ue8m0 scales of step 0 then the 2 of step 1.
Activation scales are used as stored ([M, K/16] or [M, K/32] bytes): a 4X register is the 4 bytes of a row at
k64 step s; a 2X register is the 4 bytes of two steps (byte-id 2*(s%2)).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from humming.core.common.layout import act_name, check_shape, pack_codes_k32
from humming.errors import ShapeError, UnsupportedOnDevice

ATOM_K = 128  # k elements per weight atom (64 bytes of codes per column)
STAGE_K = 256  # k elements per pipeline stage (128 bytes of codes per activation row)

# block-scaled recipe -> (elements per scale, scale format, scale_vec)
RECIPES = {"nvfp4": (16, "ue4m3", 4), "mxfp4": (32, "ue8m0", 2)}


@dataclass(frozen=True)
class BlockScaledLayout:
    """e2m1 weights and activations with per-``vec`` block scales, multiplied as stored by a block-scaled MMA."""

    recipe: str  # "nvfp4" | "mxfp4"
    n: int
    k: int

    @property
    def vec(self) -> int:
        return RECIPES[self.recipe][0]

    @property
    def scale_format(self) -> str:
        return RECIPES[self.recipe][1]

    @property
    def scale_vec(self) -> int:
        return RECIPES[self.recipe][2]

    @property
    def atom_scale_bytes(self) -> int:
        return 64 * ATOM_K // self.vec


@dataclass
class PackedBlockScaled:
    layout: BlockScaledLayout
    qweight: torch.Tensor  # int32, k32 atom layout of the packed bytes
    scales: torch.Tensor  # uint8 weight block scales, per-atom lane order (see the module docstring)
    channel_scale: None
    bias: torch.Tensor | None
    out_scale: float  # the weight's fp32 global scale (1 for MXFP4)


def recipe_of(scheme) -> str:
    """'nvfp4' or 'mxfp4' for a W4A4 scheme whose weights and activations share one e2m1 block recipe."""
    ws, acts = scheme.weight_scale, scheme.act_scale
    if scheme.weight != "e2m1" or scheme.act != "e2m1" or scheme.zero_point or ws.granularity != "group":
        raise UnsupportedOnDevice(f"{scheme.name}: the block-scaled kernel takes e2m1 x e2m1 with block scales")
    if acts.mode != "dynamic_group" or acts.group_size != ws.group_size or acts.format != ws.format:
        raise UnsupportedOnDevice(f"{scheme.name}: weights and activations must share one block-scale recipe")
    for name, (vec, fmt, _) in RECIPES.items():
        if ws.group_size == vec and ws.format == fmt:
            return name
    raise UnsupportedOnDevice(
        f"{scheme.name}: blocks of {ws.group_size} with {ws.format} scales have no block-scaled mma.sync form "
        f"(NVFP4: 16 x ue4m3 with scale_vec::4X; MXFP4: 32 x ue8m0 with scale_vec::2X)")


def check_blockscaled_shape(n: int, k: int) -> None:
    check_shape(n, k)
    if k % STAGE_K:
        raise ShapeError(f"K={k} must be a multiple of {STAGE_K} for the block-scaled kernel")


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e2m1 codes [..., K] (one per byte) -> [..., K/2] bytes, element 2i in the low nibble."""
    c = codes.to(torch.uint8)
    return (c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)


def pack_weight_scales(scale_bytes: torch.Tensor, recipe: str) -> torch.Tensor:
    """uint8 weight block scales [N, K/vec] -> the per-atom lane order (flat uint8)."""
    n, blocks = scale_bytes.shape
    vec = RECIPES[recipe][0]
    k = blocks * vec
    check_blockscaled_shape(n, k)
    s = scale_bytes.contiguous()
    if recipe == "nvfp4":  # [na][t2 t4 g][ka][step][4] -> [na][ka][step][t2][g][t4][4]
        s = s.view(n // 64, 2, 4, 8, k // ATOM_K, 2, 4)
        s = s.permute(0, 4, 5, 1, 3, 2, 6)
    else:  # [na][t2 t4 g][ka][step, 2] = 4 bytes -> [na][ka][t2][g][t4][4]
        s = s.view(n // 64, 2, 4, 8, k // ATOM_K, 4)
        s = s.permute(0, 4, 1, 3, 2, 5)
    return s.contiguous().reshape(-1)


def prepare_blockscaled(qw, act_dtype: torch.dtype) -> PackedBlockScaled:
    """Repack an NVFP4 / MXFP4 W4A4 weight for the block-scaled kernel: packed e2m1 bytes in the k32 atom layout
    (16-byte B fragment loads), block scales in the lanes' order, the global scale as the epilogue multiplier."""
    act_name(act_dtype)
    recipe = recipe_of(qw.scheme)
    n, k = qw.shape
    check_blockscaled_shape(n, k)
    if qw.g_idx is not None:
        raise UnsupportedOnDevice(f"{qw.scheme.name}: act-order is not supported by the block-scaled kernel")
    packed = pack_e2m1(qw.codes())
    words = pack_codes_k32(packed)
    scales = pack_weight_scales(qw.scales.view(torch.uint8).reshape(n, -1), recipe)
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    bias = None if qw.bias is None else qw.bias.to(device=qw.packed.device, dtype=act_dtype).contiguous()
    return PackedBlockScaled(BlockScaledLayout(recipe, n, k), words, scales, None, bias, out_scale)


# ---- tcgen05 (Blackwell datacenter): block-scaled tcgen05.mma, operands and scale factors read as the ISA stores them
TC_ROWS = 128  # output channels (or activation rows) per scale-factor block: 4 x 32 TMEM lanes
TC_STAGE_K = 256  # e2m1 activations: elements per pipeline stage = one 128-byte swizzled row of packed codes
TC_STAGE_K_8BIT = 128  # e4m3 activations (W4A8): one 128-byte row of codes


@dataclass(frozen=True)
class Tcgen05BlockScaledLayout(BlockScaledLayout):
    """e2m1 weights with block scales for the tcgen05 block-scaled kernel: W4A4 NVFP4 / MXFP4 (``a_type`` "e2m1",
    kind::mxf4nvf4 / kind::mxf4) or W4A8 MXFP4 x FP8 (``a_type`` "e4m3": kind::mxf8f6f4, the activations' own scales
    per token or tensor in the epilogue, unit block scales for them in the MMA). Weights: packed e2m1 bytes [N, K/2]
    row-major (K-major, element 2i in the low nibble). Weight block scales in 512-byte blocks
    [N/128][K/(4*vec)][32][4][4]: block (nb, w) holds, at byte r*16 + j*4 + b, scale byte 4w + b of channel
    nb*128 + j*32 + r - the shared-memory image of one tcgen05.cp .32x128b.warpx4, which puts row r in TMEM lane r
    (of every 32-lane partition) and word j in column j, i.e. channel n at lane n % 32, column n // 32. W4A4
    activation scales stay as stored ([M, K/vec] bytes); the kernel gathers their 4-byte words the same way."""

    a_type: str = "e2m1"

    @property
    def stage_k(self) -> int:
        """K elements per pipeline stage (128 bytes of activation codes per row)."""
        return TC_STAGE_K if self.a_type == "e2m1" else TC_STAGE_K_8BIT

    @property
    def words_per_stage(self) -> int:
        """32-bit scale words (4 scale bytes) per row per pipeline stage."""
        return self.stage_k // self.vec // 4


def check_tcgen05_blockscaled_shape(n: int, k: int, stage_k: int = TC_STAGE_K) -> None:
    check_shape(n, k)
    if n % TC_ROWS or k % stage_k:
        raise ShapeError(f"the tcgen05 block-scaled kernel needs N % {TC_ROWS} == 0 and K % {stage_k} == 0 "
                         f"(N={n}, K={k})")


def pack_weight_scales_tcgen05(scale_bytes: torch.Tensor, recipe: str, stage_k: int = TC_STAGE_K) -> torch.Tensor:
    """uint8 weight block scales [N, K/vec] -> the 512-byte tcgen05.cp blocks [N/128][K/(4 vec)][32][4][4] (flat)."""
    n, blocks = scale_bytes.shape
    vec = RECIPES[recipe][0]
    check_tcgen05_blockscaled_shape(n, blocks * vec, stage_k)
    s = scale_bytes.contiguous().view(n // TC_ROWS, 4, 32, blocks // 4, 4)  # [nb][j][r][w][b], n = nb*128 + j*32 + r
    return s.permute(0, 3, 2, 1, 4).contiguous().reshape(-1)  # [nb][w][r][j][b]


def prepare_blockscaled_tcgen05(qw, act_dtype: torch.dtype) -> PackedBlockScaled:
    """Repack an NVFP4 / MXFP4 W4A4 weight, or a W4A8 MXFP4 x FP8 weight (e2m1 with ue8m0 per 32, e4m3 activations),
    for the tcgen05 block-scaled kernel: packed e2m1 bytes [N, K/2] as they are multiplied (W4A4: copied into
    128-byte-swizzled shared memory; W4A8: widened to the padded 16-in-16-bytes form by the copy), block scales in
    tcgen05.cp blocks, the global scale (NVFP4) as the epilogue multiplier."""
    act_name(act_dtype)
    sch = qw.scheme
    if sch.weight == "e2m1" and sch.act == "e4m3":
        ws = sch.weight_scale
        if ws.granularity != "group" or ws.group_size != 32 or ws.format != "ue8m0" or sch.zero_point:
            raise UnsupportedOnDevice(f"{sch.name}: the tcgen05 W4A8 kernel takes e2m1 weights with ue8m0 scales per 32")
        recipe, a_type = "mxfp4", "e4m3"
    else:
        recipe, a_type = recipe_of(sch), "e2m1"
    layout = Tcgen05BlockScaledLayout(recipe, *qw.shape, a_type=a_type)
    n, k = qw.shape
    check_tcgen05_blockscaled_shape(n, k, layout.stage_k)
    if qw.g_idx is not None:
        raise UnsupportedOnDevice(f"{sch.name}: act-order is not supported by the block-scaled kernel")
    packed = pack_e2m1(qw.codes()).contiguous()
    scales = pack_weight_scales_tcgen05(qw.scales.view(torch.uint8).reshape(n, -1), recipe, layout.stage_k)
    out_scale = 1.0 if qw.global_scale is None else float(qw.global_scale)
    bias = None if qw.bias is None else qw.bias.to(device=qw.packed.device, dtype=act_dtype).contiguous()
    return PackedBlockScaled(layout, packed, scales, None, bias, out_scale)
