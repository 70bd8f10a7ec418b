"""CPU: the block-scaled mma.sync kernel (W4A4 NVFP4 kind::mxf4nvf4 scale_vec::4X ue4m3, MXFP4 kind::mxf4
scale_vec::2X ue8m0; m16n8k64 e2m1) is planned only where a profile declares the form, compiles with NVRTC 13 for
sm_120a/121a and nowhere else, holds exactly the intended instruction, is gated behind HUMMING_UNVERIFIED_KERNELS,
and its operand layouts - read the way the kernel reads them, interpreted as the PTX ISA fragment and scale
layouts say - reproduce humming.reference_gemm (torch emulation). Never run on hardware: no sm_120 device here."""
import re

import pytest
import torch

import humming
from humming import api
from humming.capabilities import get_profile, list_profiles
from humming.core import registry
from humming.core.common.paths import UNVERIFIED_ENV
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.mma_blockscaled.layout import BlockScaledLayout, pack_e2m1, prepare_blockscaled
from humming.core.families.mma_blockscaled.planner import BlockScaledPlan, blockscaled_form, plan_blockscaled
from humming.core.families.runnable import runnable_path
from humming.core.problem import Problem
from humming.core.quant.quantize import quantize_activation
from humming.core.registry import kernel_source
from humming.devices import get_backend
from humming.errors import CompileError, UnsupportedOnDevice

RECIPES = {"nvfp4": "w4a4-nvfp4", "mxfp4": "w4a4-mxfp4"}
SPELLING = {
    "nvfp4": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4nvf4.block_scale.scale_vec::4X.f32.e2m1.e2m1.f32.ue4m3",
    "mxfp4": "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X.f32.e2m1.e2m1.f32.ue8m0",
}
PROFILES = [c for c in list_profiles(include_abstract=False)
            if all(blockscaled_form(c, r) is not None for r in RECIPES)]
SHAPES = [(1, 1024, 2048), (200, 512, 4096)]
NVRTC13 = (13, 0)


def _toolchain_or_skip(arch):
    try:
        return select_toolchain(arch, NVRTC13)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def test_the_profiles_declaring_the_forms():
    assert {c.name for c in PROFILES} == {"nvidia-rtx-5090", "nvidia-rtx-pro-6000", "nvidia-gb10"}
    assert {c.target.arch for c in PROFILES} == {"sm_120a", "sm_121a"}


@pytest.mark.parametrize("caps", PROFILES, ids=[c.name for c in PROFILES])
@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_compiles_with_exactly_the_block_scaled_mma(caps, recipe, act):
    arch = caps.target.arch
    tc = _toolchain_or_skip(arch)
    for m, n, k in SHAPES:
        p = plan_blockscaled(caps, BlockScaledLayout(recipe, n, k), m, act, scheme=RECIPES[recipe])
        src = kernel_source(p, get_backend(caps), caps)
        mod = compile_cuda(src, [p.kernel_name], arch, toolchain=tc)
        assert mod.cubin and mod.nvrtc_version >= NVRTC13
        forms = set(re.findall(r"\bmma\.sync[.\w:]*", mod.ptx))
        assert forms == {SPELLING[recipe]}
        count = len(re.findall(r"\bmma\.sync", mod.ptx))
        assert count >= 8 * p.tiles.bm // (16 * p.tiles.warps_m) * 2  # the unrolled k64 steps of one atom
        for bad in ("kind::i8", "wgmma", "tcgen05", "kind::f8f6f4", "m16n8k16", "m16n8k32"):
            assert bad not in mod.ptx
        if recipe == "mxfp4":  # the two k64 steps of an atom select byte pairs 0 and 2 of the same scale words
            assert re.search(r"\{0, 0\}", mod.ptx) and re.search(r"\{2, 0\}", mod.ptx)
        else:
            assert not re.search(r"\{2, 0\}", mod.ptx)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
@pytest.mark.parametrize("other", ["sm_90a", "sm_100a", "sm_120"])
def test_the_same_source_is_rejected_on_other_targets(recipe, other):
    caps = get_profile("nvidia-rtx-5090")
    _toolchain_or_skip(caps.target.arch)
    tc = _toolchain_or_skip(other)
    p = plan_blockscaled(caps, BlockScaledLayout(recipe, 1024, 2048), 16, "f16", scheme=RECIPES[recipe])
    src = kernel_source(p, get_backend(caps), caps)
    with pytest.raises(CompileError):
        compile_cuda(src, [p.kernel_name], other, toolchain=tc, cache=False)


def test_no_other_profile_gets_the_block_scaled_plan():
    for caps in list_profiles(include_abstract=False):
        if caps in PROFILES:
            continue
        for recipe, scheme in RECIPES.items():
            with pytest.raises(UnsupportedOnDevice):
                plan_blockscaled(caps, BlockScaledLayout(recipe, 1024, 2048), 16, "f16", scheme=scheme)
            try:
                p = humming.plan(scheme, 16, 1024, 2048, profile=caps)
            except UnsupportedOnDevice:
                continue
            assert not isinstance(p, BlockScaledPlan) and "m16n8k64" not in p.summary()
            if "kind::mxf4" in p.summary():  # the Blackwell datacenter profiles: the tcgen05 block-scaled kernel
                assert p.family == "tcgen05" and caps.find_mma(family="tcgen05")


@pytest.mark.parametrize("caps", PROFILES, ids=[c.name for c in PROFILES])
def test_planned_but_gated(caps, monkeypatch):
    """Without HUMMING_UNVERIFIED_KERNELS=1 the block-scaled kernel is planned (its planner takes the problem) but
    humming.plan shows what gemm runs: the upconvert route, with the block-scaled kernel's note and the switch in
    its reasons; with it, humming.plan is the block-scaled kernel itself."""
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    note = f"block-scaled kernel generated and compiled for {caps.target.arch}, not yet validated on hardware"
    for recipe, scheme in RECIPES.items():
        planned = plan_blockscaled(caps, BlockScaledLayout(recipe, 4096, 4096), 16, "f16", scheme=scheme)
        assert isinstance(planned, BlockScaledPlan) and planned.path == "native" and planned.family == "mma_sync"
        assert f"kind::{blockscaled_form(caps, recipe).kind}" in planned.summary()
        p = humming.plan(scheme, 16, 4096, 4096, profile=caps)
        assert not isinstance(p, BlockScaledPlan) and "block_scale" not in p.summary()
        assert registry.select(Problem(humming.schemes.get(scheme), 16, 4096, 4096), caps).family.name == "upconvert"
        assert any(note in r for r in p.reasons) and UNVERIFIED_ENV + "=1" in p.explain()
        run = runnable_path(caps, humming.schemes.get(scheme))
        assert run.path == "upconvert" and any(note in r for r in run.reasons)
        row = next(r for r in api.path_table(caps) if r["scheme"] == scheme)
        assert row["route"] == "upconvert" and note in row["reason"] and "not generated yet" not in row["reason"]
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    for scheme in RECIPES.values():
        run = runnable_path(caps, humming.schemes.get(scheme))
        assert run.path == "native" and run.instruction.kind in ("mxf4", "mxf4nvf4")
        p = humming.plan(scheme, 16, 4096, 4096, profile=caps)
        assert isinstance(p, BlockScaledPlan) and p.path == "native" and p.family == "mma_sync"
        assert "block_scale" in p.summary() and not any(note in r for r in p.reasons)
        row = next(r for r in api.path_table(caps) if r["scheme"] == scheme)
        assert row["path"] == "native" and row["route"] is None and note not in row["reason"]


# ---------------------------------------------------------------- torch emulation of the layouts
E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)


def _word(b: torch.Tensor) -> torch.Tensor:
    """[..., 4] bytes -> int64 little-endian words (what a 32-bit load puts in a register)."""
    b = b.to(torch.int64)
    return b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)


def _scale(byte: torch.Tensor, fmt: str) -> torch.Tensor:
    byte = byte.to(torch.uint8)
    if fmt == "ue4m3":
        return byte.view(torch.float8_e4m3fn).to(torch.float64)
    return torch.pow(2.0, byte.to(torch.float64) - 127)


def _kernel_registers(a_bytes, sa, words, sb, lay, m, n, k):
    """Per lane, the registers the generated kernel hands to mma_bs (mirrors its indexing; global addresses
    stand for the shared-memory copies, which move 16-byte chunks unchanged).
    Returns dicts of int64 tensors: a[l][r] [MT, KA, 2], sfa[l] [MT, KA, 2], b[l][r] [NA, KA, 2, 8], sfb[l] [NA, KA, 2, 8],
    and the byte-id per step."""
    mt, ka, na = m // 16, k // 128, n // 64
    ab = a_bytes.view(mt, 16, ka, 2, 2, 16)  # tile, row, atom, step, 16-byte chunk of the step, byte
    sav = sa.view(mt, 16, -1)
    w = words.view(na, ka, 8, 32, 4)  # atom (na, ka), chunk, lane, word
    sbw = _word(sb.view(na, ka, -1, 4))  # atom words
    regs = {"a": [], "sfa": [], "b": [], "sfb": []}
    for lane in range(32):
        g, p = lane // 4, lane % 4
        # ldmatrix_x4: matrix r = rows 8*(r&1).. of the tile, chunk (r>>1) of the step; this lane: row g, word p
        regs["a"].append([_word(ab[:, 8 * (r & 1) + g, :, :, r >> 1, 4 * p:4 * p + 4]) for r in range(4)])
        row = g + 8 * (lane & 1)
        if lay.recipe == "nvfp4":
            sfa = _word(sav[:, row].reshape(mt, ka, 2, 4))  # (ka*2 + ks)*4
        else:
            sfa = _word(sav[:, row].reshape(mt, ka, 4)).unsqueeze(-1).expand(mt, ka, 2)  # ka*4, both steps
        regs["sfa"].append(sfa)
        b = torch.stack([torch.stack([torch.stack([w[:, :, s * 4 + t // 2, lane, (t % 2) * 2 + r] for t in range(8)], -1)
                                      for s in range(2)], 2) for r in range(2)])  # r, na, ka, s, t
        regs["b"].append([b[0] & 0xFFFFFFFF, b[1] & 0xFFFFFFFF])
        if lay.recipe == "nvfp4":
            sfb = torch.stack([torch.stack([sbw[:, :, ((s * 2 + t // 4) * 8 + g) * 4 + t % 4] for t in range(8)], -1)
                               for s in range(2)], 2)
        else:
            sfb = torch.stack([sbw[:, :, ((t // 4) * 8 + g) * 4 + t % 4] for t in range(8)], -1)
            sfb = sfb.unsqueeze(2).expand(na, ka, 2, 8)
        regs["sfb"].append(sfb)
    byte_id = [0, 0] if lay.recipe == "nvfp4" else [0, 2]
    return regs, byte_id


def _mma_semantics(regs, byte_id, lay, m, n, k):
    """D = (A * SF_A) * (B * SF_B) per m16n8k64 step as the PTX ISA defines the fragments and selectors
    (thread-id-a = thread-id-b = 0, byte-id as given), accumulated over all steps; [M, N] float64."""
    mt, ka, na = m // 16, k // 128, n // 64
    nblk = 64 // lay.vec
    a_val = torch.zeros(mt, ka, 2, 16, 64, dtype=torch.float64)
    b_val = torch.zeros(na, ka, 2, 8, 64, 8, dtype=torch.float64)  # na, ka, s, t, k, col
    for lane in range(32):
        g, p = lane // 4, lane % 4
        for r in range(4):  # A fragment: a_r holds row g + 8*(r&1), k 32*(r>>1) + 8p + j
            for j in range(8):
                a_val[:, :, :, g + 8 * (r & 1), 32 * (r >> 1) + 8 * p + j] = E2M1[(regs["a"][lane][r] >> (4 * j)) & 15]
        for r in range(2):  # B fragment: b_r holds column g, k 32r + 8p + j
            for j in range(8):
                b_val[:, :, :, :, 32 * r + 8 * p + j, g] = E2M1[(regs["b"][lane][r] >> (4 * j)) & 15]
    sfa = torch.zeros(mt, ka, 2, 16, nblk, dtype=torch.float64)
    sfb = torch.zeros(na, ka, 2, 8, 8, nblk, dtype=torch.float64)  # na, ka, s, t, col, block
    for s in range(2):
        for i in range(16):  # thread-id-a 0: lane 4*(i%8) supplies row i%8, lane 4*(i%8)+1 row i%8 + 8
            word = regs["sfa"][4 * (i % 8) + i // 8][:, :, s]
            for blk in range(nblk):
                sfa[:, :, s, i, blk] = _scale((word >> (8 * (byte_id[s] + blk))) & 0xFF, lay.scale_format)
        for col in range(8):  # thread-id-b 0: lane 4*col supplies column col
            word = regs["sfb"][4 * col][:, :, s]
            for blk in range(nblk):
                sfb[:, :, s, :, col, blk] = _scale((word >> (8 * (byte_id[s] + blk))) & 0xFF, lay.scale_format)
    a_scaled = a_val * sfa.repeat_interleave(lay.vec, -1)
    b_scaled = b_val * sfb.repeat_interleave(lay.vec, -1).transpose(-1, -2)
    d = torch.einsum("xasik,yastkj->xiytj", a_scaled, b_scaled)  # tile, row, n atom, n8 tile, col
    return d.reshape(m, n)


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_emulated_mma_fragments_match_the_reference(recipe):
    torch.manual_seed(0)
    m, n, k = 32, 128, 512
    scheme = RECIPES[recipe]
    w = torch.randn(n, k) * torch.rand(n, 1) * 3
    x = torch.randn(m, k) * torch.rand(m, 1) * 2
    qw = humming.quantize(w, scheme)
    packed = prepare_blockscaled(qw, torch.float16)
    lay = packed.layout
    qa = quantize_activation(x, scheme)
    assert torch.equal(humming.formats.get("e2m1").decode(torch.arange(16, dtype=torch.uint8)).double(), E2M1)
    a_bytes = pack_e2m1(qa.codes)
    sa = qa.scales.view(torch.uint8).contiguous()
    regs, byte_id = _kernel_registers(a_bytes, sa, packed.qweight, packed.scales, lay, m, n, k)
    d = _mma_semantics(regs, byte_id, lay, m, n, k)
    gs = 1.0 if qa.global_scale is None else float(qa.global_scale)
    out = (d * packed.out_scale * gs).to(torch.float32)
    ref = humming.reference_gemm(x, qw)
    assert torch.allclose(out, ref, rtol=2e-6, atol=1e-6 * float(ref.abs().max()))
    # the check has teeth: scales of the wrong rows / a wrong byte selector give a different result
    regs_bad = dict(regs, sfa=[regs["sfa"][lane ^ 1] for lane in range(32)])
    assert not torch.allclose(_mma_semantics(regs_bad, byte_id, lay, m, n, k), d)
    if recipe == "mxfp4":
        assert not torch.allclose(_mma_semantics(regs, [0, 0], lay, m, n, k), d)
