"""Planner of the block-scaled mma.sync kernel (W4A4 NVFP4 / MXFP4): only from declared capabilities.

The form comes from the profile's declarations (``mma_sync`` m16n8k64 e2m1 x e2m1 with ``kind::mxf4nvf4``
scale_vec::4X ue4m3 for NVFP4, ``kind::mxf4`` scale_vec::2X ue8m0 for MXFP4); a profile without it gets a refusal
naming what is missing. The kernel is compiled for the profile's target but has never run on hardware, so the
runtime selects it only with HUMMING_UNVERIFIED_KERNELS=1 (``unverified_enabled``)."""
from __future__ import annotations

import dataclasses
import hashlib
import math

from humming.core.common.paths import unverified_enabled
from humming.core.common.paths import unverified_note as paths_unverified_note
from humming.core.families.mma_blockscaled.layout import ATOM_K, RECIPES, STAGE_K, BlockScaledLayout
from humming.core.plan import _DEFAULT_SMS, Plan, Tiles, _choose_splits
from humming.errors import ShapeError, UnsupportedOnDevice

# recipe -> (mma kind, element type, scale format, scale_vec)
FORMS = {"nvfp4": ("mxf4nvf4", "e2m1", "ue4m3", 4), "mxfp4": ("mxf4", "e2m1", "ue8m0", 2)}


def unverified_note(caps) -> str:
    return paths_unverified_note(caps, "block-scaled")


def blockscaled_form(caps, recipe: str):
    """The declared mma.sync form for a recipe, or None."""
    kind, elem, fmt, vec = FORMS[recipe]
    for ins in caps.find_mma(family="mma_sync", a_type=elem, b_type=elem):
        if ins.kind == kind and ins.scale_format == fmt and vec in ins.scale_vec and tuple(ins.shape) == (16, 8, 64):
            return ins
    return None


class BlockScaleDict:
    """``to_dict`` of the block-scaled plans (mma.sync and tcgen05): the instruction's kind, scale format and
    ``scale_vec``."""

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["instruction"].update(kind=self.instruction.kind, scale_format=self.instruction.scale_format,
                                scale_vec=self.scale_vec)
        return d


@dataclasses.dataclass(frozen=True)
class BlockScaledPlan(BlockScaleDict, Plan):
    """A Plan of the block-scaled kernel (its name, key and summary do not depend on a WnA16 decode)."""

    @property
    def scale_vec(self) -> int:
        return self.layout.scale_vec

    @property
    def kernel_key(self) -> str:
        t = self.tiles
        ins = self.instruction
        parts = (self.family, self.path, tuple(ins.shape), ins.kind, ins.scale_format, self.layout.scale_vec,
                 self.layout.recipe, self.act, t.key_text(), self.async_copy)
        return hashlib.sha1(repr(parts).encode()).hexdigest()[:10]

    @property
    def kernel_name(self) -> str:
        t = self.tiles
        return (f"hm_w4a4_{self.layout.recipe}_bs_{self.act}_m{t.bm}n{t.bn}k{t.bk}s{t.stages}"
                f"w{t.warps_m}{t.warps_n}{t.warps_k}_{self.kernel_key}")

    def summary(self) -> str:
        t = self.tiles
        ins = self.instruction
        return (f"{self.scheme} M={self.m} N={self.n} K={self.k} on {self.profile}: mma_sync m16n8k64 "
                f"kind::{ins.kind}.block_scale.scale_vec::{self.layout.scale_vec}X e2m1xe2m1->f32 "
                f"({ins.scale_format} per {self.layout.vec}), {self.path}, tile {t.bm}x{t.bn}x{t.bk}, "
                f"{t.stages} stages, {t.threads} threads (warps {t.warps_m}x{t.warps_n}x{t.warps_k}), "
                f"split-K {self.splits}, smem {self.smem_bytes // 1024} KiB")


def stage_bytes(t: Tiles, layout: BlockScaledLayout) -> int:
    katoms, natoms = t.bk // ATOM_K, t.bn // 64
    return t.bm * t.bk // 2 + katoms * natoms * 4096 + t.bm * t.bk // layout.vec + katoms * natoms * layout.atom_scale_bytes


def smem_bytes(t: Tiles, layout: BlockScaledLayout) -> int:
    return max(t.stages * stage_bytes(t, layout), (t.warps_k - 1) * t.bm * t.bn * 4)


def plan_blockscaled(caps, layout: BlockScaledLayout, m: int, act: str, choice=None, scheme: str = "",
                     tiles: Tiles | None = None, splits: int | None = None) -> BlockScaledPlan:
    """Plan C[M, N] = A[M, K] @ W[N, K]^T with e2m1 operands and block scales multiplied by the declared
    block-scaled mma.sync (native path). ``choice`` (a paths.PathChoice) contributes its reasons."""
    if m < 1:
        raise ShapeError(f"M={m}: a GEMM needs at least one row")
    if act not in ("f16", "bf16"):
        raise ShapeError(f"the output type must be f16 or bf16, got {act}")
    n, k = layout.n, layout.k
    if n % 64 or k % STAGE_K:
        raise ShapeError(f"the block-scaled kernel needs N % 64 == 0 and K % {STAGE_K} == 0 (N={n}, K={k})")
    ins = blockscaled_form(caps, layout.recipe)
    kind, elem, fmt, vec = FORMS[layout.recipe]
    if ins is None:
        raise UnsupportedOnDevice(
            f"{caps.name} declares no mma_sync m16n8k64 kind::{kind}.block_scale.scale_vec::{vec}X {elem} with {fmt} "
            f"scales; {scheme or layout.recipe} runs the upconvert path there")
    if not caps.memory.cp_async or not caps.memory.ldmatrix:
        raise UnsupportedOnDevice(f"{caps.name}: the block-scaled kernel needs cp.async and ldmatrix")
    reasons = list(getattr(choice, "reasons", ()) or ())
    reasons.append(f"native: mma_sync m16n8k64 kind::{kind}.block_scale.scale_vec::{vec}X {elem}x{elem} declared "
                   f"({fmt} scale per {RECIPES[layout.recipe][0]} elements of K); operands as stored, block scales "
                   f"in the MMA, global scales in the fp32 epilogue")
    limit = caps.limits.smem_per_block_kb * 1024
    sms = caps.limits.sms or _DEFAULT_SMS
    if tiles is None:
        tm = math.ceil(m / 16)
        cands = ([Tiles(16 * tm, 64, STAGE_K, st, 1, 1, 2) for st in (4, 3, 2)] if m <= 64 else
                 [Tiles(128, 128, STAGE_K, st, 2, 2, 1) for st in (3, 2)] + [Tiles(64, 128, STAGE_K, 2, 1, 2, 1)])
        cands = [t for t in cands if n % t.bn == 0] or [Tiles(16 * min(tm, 4), 64, STAGE_K, 2, 1, 1, 2)]
        fitting = [t for t in cands if smem_bytes(t, layout) <= limit]
        if not fitting:
            raise UnsupportedOnDevice(f"no block-scaled tile fits {caps.name}'s {limit} B of shared memory")
        tiles = fitting[0]
        reasons.append(f"block-scaled tile {tiles.bm}x{tiles.bn}x{tiles.bk}, {tiles.stages} stages")
    else:
        if tiles.bk != STAGE_K or tiles.bn % (64 * tiles.warps_n) or tiles.bm % (16 * tiles.warps_m) or \
                (tiles.bk // ATOM_K) % tiles.warps_k or n % tiles.bn:
            raise ShapeError(f"tile {tiles} is not valid for the block-scaled kernel")
        reasons.append(f"tile {tiles.bm}x{tiles.bn}x{tiles.bk} forced (tuned)")
    smem = smem_bytes(tiles, layout)
    if splits is None:
        tiles_mn = math.ceil(m / tiles.bm) * (n // tiles.bn)
        occ = max(1, min(limit // max(smem, 1), 2048 // tiles.threads, 4))
        splits, why = _choose_splits(tiles_mn, k, tiles.bk, tiles.stages, sms, occ, m <= 64)
        reasons.append(why)
    elif k % (tiles.bk * splits):
        raise ShapeError(f"split-K {splits} does not divide K={k} into multiples of BK={tiles.bk}")
    if not unverified_enabled():
        reasons.append(unverified_note(caps))
    return BlockScaledPlan(
        scheme=scheme, profile=caps.name, m=m, n=n, k=k, act=act, out=act, family="mma_sync", instruction=ins,
        path="native", layout=layout, tiles=tiles, splits=splits, async_copy=True, smem_bytes=smem,
        reasons=tuple(reasons),
    )
