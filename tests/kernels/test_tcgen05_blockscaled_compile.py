"""CPU: the tcgen05 block-scaled kernel (Blackwell datacenter; W4A4 NVFP4 on tcgen05.mma kind::mxf4nvf4 scale_vec::4X
with ue4m3 scales per 16, MXFP4 on kind::mxf4 scale_vec::2X with ue8m0 per 32, e2m1 x e2m1 -> f32; W4A8 MXFP4 x FP8 on
kind::mxf8f6f4 scale_vec::1X, e4m3 x e2m1 with unit activation block scales; accumulator in Tensor Memory, scale
factors moved to Tensor Memory with tcgen05.cp) is planned from the declared forms only, compiles with NVRTC 13
for every shipped profile declaring them (sm_100a B200, sm_103a B300, sm_110a Thor, sm_107a Rubin) with the spelling
each target takes (scale_vec::NX on `a` targets, .block16/.block32 on family targets), is rejected where tcgen05 does
not exist, holds exactly the intended tcgen05.mma, is gated behind HUMMING_UNVERIFIED_KERNELS, and its instruction
descriptors, scale-factor copies and operand addressing - emulated in torch as the PTX ISA describes them - reproduce
humming.reference_gemm. Never run on hardware: no Blackwell device here."""
import dataclasses
import functools
import re

import pytest
import test_tcgen05_compile as w8a8_tests
import torch
from test_tcgen05_compile import _c_expr, _decode_smem_desc, assert_ptxas_fits

import humming
from humming import api
from humming.capabilities import get_profile, list_profiles
from humming.core import registry
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.mma_blockscaled.layout import (
    Tcgen05BlockScaledLayout,
    pack_e2m1,
    pack_weight_scales_tcgen05,
    prepare_blockscaled_tcgen05,
)
from humming.core.families.runnable import runnable_path
from humming.core.families.tcgen05.planner import (
    STATIC_SMEM,
    UNVERIFIED_ENV,
    Tcgen05BlockScaledPlan,
    plan_blockscaled_tcgen05,
    tcgen05_bs_form,
    tcgen05_bs_tmem_cols,
    tcgen05_kernel,
)
from humming.core.problem import Problem
from humming.core.quant.quantize import quantize_activation
from humming.core.registry import kernel_source
from humming.devices import get_backend
from humming.devices.nvidia.tcgen05 import TCGEN05_BLOCK_SCALED, tcgen05_idesc, tcgen05_idesc_block_scaled
from humming.errors import CompileError, ShapeError, UnsupportedOnDevice

NVRTC13 = (13, 0)
RECIPES = {"nvfp4": "w4a4-nvfp4", "mxfp4": "w4a4-mxfp4"}
KIND = {"nvfp4": "mxf4nvf4", "mxfp4": "mxf4"}
VEC = {"nvfp4": ".scale_vec::4X", "mxfp4": ".scale_vec::2X"}  # architecture-specific (`a`) targets
BLOCK = {"nvfp4": ".block16", "mxfp4": ".block32"}  # family (`f`) targets
W4A8 = "w4a8-mxfp4"  # e4m3 activations x e2m1 weights with ue8m0 per 32: kind::mxf8f6f4 scale_vec::1X
W4A8_FORM = "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale"
PROFILES = [c for c in list_profiles(include_abstract=False) if c.find_mma(family="tcgen05")]
BN_CASES = {128: (200, 384), 256: (4096, 8192)}  # (M, N) that make the planner choose BN = 128 and BN = 256
K = 1024


def _toolchain_or_skip(arch):
    try:
        return select_toolchain(arch, NVRTC13)
    except UnsupportedOnDevice as exc:  # e.g. Rubin (sm_107a) needs NVRTC >= 13.4
        pytest.skip(str(exc).splitlines()[0])


def _plan(caps, recipe, bn, act="f16", k=K):
    """recipe: "nvfp4" / "mxfp4" (W4A4) or "w4a8" (MXFP4 x FP8)."""
    m, n = BN_CASES[bn]
    lay = (Tcgen05BlockScaledLayout("mxfp4", n, k, a_type="e4m3") if recipe == "w4a8"
           else Tcgen05BlockScaledLayout(recipe, n, k))
    p = plan_blockscaled_tcgen05(caps, lay, m, act, scheme=W4A8 if recipe == "w4a8" else RECIPES[recipe])
    assert isinstance(p, Tcgen05BlockScaledPlan) and p.family == "tcgen05" and p.tiles.bn == bn
    return p


def _with_target(caps, arch):
    """The profile compiled for another target of its family (e.g. sm_100f): the spelling follows the target."""
    return dataclasses.replace(caps, target=dataclasses.replace(caps.target, arch=arch))


def test_the_profiles_declaring_the_forms():
    assert {c.name for c in PROFILES} == {"nvidia-b200", "nvidia-b300", "nvidia-thor", "nvidia-rubin"}
    for caps in PROFILES:  # FACTS.md: mxf4, mxf4nvf4 and mxf8f6f4 on sm_100a, 103a, 107a and 110a
        for recipe in RECIPES:
            assert tcgen05_bs_form(caps, recipe) is not None, (caps.name, recipe)
        assert tcgen05_bs_form(caps, "mxfp4", "e4m3").kind == "mxf8f6f4"
        assert tcgen05_bs_form(caps, "nvfp4", "e4m3") is None  # no NVFP4 x FP8 form
    for caps in list_profiles(include_abstract=False):
        if caps not in PROFILES:
            assert all(tcgen05_bs_form(caps, r) is None for r in RECIPES)
            assert tcgen05_bs_form(caps, "mxfp4", "e4m3") is None


def _cases():
    for caps in PROFILES:
        for recipe in sorted(RECIPES):
            yield pytest.param(caps, recipe, id=f"{caps.name}-{recipe}")


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("caps,recipe", list(_cases()))
def test_compiles_with_exactly_the_block_scaled_tcgen05_mma(caps, recipe, bn, act):
    arch = caps.target.arch
    tc = _toolchain_or_skip(arch)
    p = _plan(caps, recipe, bn, act)
    src = kernel_source(p, get_backend(caps), caps)
    mod = compile_cuda(src, [p.kernel_name], arch, toolchain=tc, options=("--ptxas-options=-v",))
    assert mod.cubin and mod.nvrtc_version >= NVRTC13
    assert_ptxas_fits(mod, p, caps)
    ptx = mod.ptx
    forms = set(re.findall(r"\btcgen05\.mma[.\w:]*", ptx))
    assert forms == {f"tcgen05.mma.cta_group::1.kind::{KIND[recipe]}.block_scale{VEC[recipe]}"}
    assert len(re.findall(r"\btcgen05\.mma\.", ptx)) >= 4  # the unrolled k64 steps of a stage
    words = Tcgen05BlockScaledLayout(recipe, 128, K).words_per_stage
    assert len(re.findall(r"\btcgen05\.cp\.cta_group::1\.32x128b\.warpx4\b", ptx)) >= words * (1 + bn // 128)
    for need in ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32",
                 "tcgen05.dealloc.cta_group::1.sync.aligned.b32",
                 "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64",
                 "tcgen05.ld.sync.aligned.32x32b.x32.b32", "tcgen05.wait::ld.sync.aligned",
                 "mbarrier.try_wait.parity.shared::cta.b64", "fence.proxy.async.shared::cta",
                 "cp.async.cg.shared.global", "cp.async.ca.shared.global"):
        assert need in ptx, need
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 4\b", ptx), "4-byte activation-scale copies"
    for bad in ("kind::i8", "kind::f8f6f4", "kind::mxf8f6f4", "kind::f16", "wgmma", "mma.sync", "ldmatrix", ".block16",
                ".block32", "scale_vec::1X"):
        assert bad not in ptx, bad
    other = "kind::mxf4nvf4" if recipe == "mxfp4" else "kind::mxf4."
    assert other not in ptx
    idescs = [int(v, 16) for v in re.search(r"IDESC\[4\] = \{([^}]*)\}", src).group(1).replace("u", "").split(",")]
    for d in set(idescs):
        assert re.search(rf"\b{d}\b", ptx), "every step's instruction descriptor reaches the MMA"


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("caps", PROFILES, ids=[c.name for c in PROFILES])
def test_w4a8_compiles_with_exactly_kind_mxf8f6f4(caps, bn, act):
    arch = caps.target.arch
    tc = _toolchain_or_skip(arch)
    p = _plan(caps, "w4a8", bn, act)
    assert p.tiles.bk == 128 and p.instruction.a_type == "e4m3" and p.instruction.b_type == "e2m1"
    src = kernel_source(p, get_backend(caps), caps)
    mod = compile_cuda(src, [p.kernel_name], arch, toolchain=tc, options=("--ptxas-options=-v",))
    assert_ptxas_fits(mod, p, caps)
    ptx = mod.ptx
    assert set(re.findall(r"\btcgen05\.mma[.\w:]*", ptx)) == {W4A8_FORM + ".scale_vec::1X"}
    assert len(re.findall(r"\btcgen05\.cp\.cta_group::1\.32x128b\.warpx4\b", ptx)) >= 1 + bn // 128
    assert re.search(r"cp\.async\.ca\.shared\.global \[[^]]+\], \[[^]]+\], 8\b", ptx), "8-byte e2m1 copies"
    for bad in ("kind::i8", "kind::f8f6f4", "kind::mxf4", "wgmma", "mma.sync", "ldmatrix", ".block32", "scale_vec::2X"):
        assert bad not in ptx, bad
    assert len(set(_idescs(src))) == 4, "one scale-factor ID per k32 step"


@pytest.mark.parametrize("recipe", sorted(RECIPES) + ["w4a8"])
@pytest.mark.parametrize("family", ["sm_100f", "sm_103f", "sm_110f", "sm_107f"])
def test_family_targets_take_the_block_spelling(recipe, family):
    """On family targets scale_vec::NX is rejected (FACTS.md): the backend spells .block16/.block32 there, and that
    source compiles; the `a`-target source does not."""
    tc = _toolchain_or_skip(family)
    base = get_profile({"sm_100f": "nvidia-b200", "sm_103f": "nvidia-b300", "sm_110f": "nvidia-thor",
                        "sm_107f": "nvidia-rubin"}[family])
    caps = _with_target(base, family)
    p = _plan(caps, recipe, 128)
    src = kernel_source(p, get_backend(caps), caps)
    mod = compile_cuda(src, [p.kernel_name], family, toolchain=tc, cache=False)
    forms = set(re.findall(r"\btcgen05\.mma[.\w:]*", mod.ptx))
    if recipe == "w4a8":
        assert forms == {W4A8_FORM + ".block32"}
    else:
        assert forms == {f"tcgen05.mma.cta_group::1.kind::{KIND[recipe]}.block_scale{BLOCK[recipe]}"}
    assert "scale_vec::" not in mod.ptx
    a_src = kernel_source(_plan(base, recipe, 128), get_backend(base), base)
    vec, block = (".scale_vec::1X", ".block32") if recipe == "w4a8" else (VEC[recipe], BLOCK[recipe])
    assert vec in a_src and block not in a_src
    with pytest.raises(CompileError):
        compile_cuda(a_src, [p.kernel_name], family, toolchain=tc, cache=False)


@pytest.mark.parametrize("recipe", sorted(RECIPES) + ["w4a8"])
@pytest.mark.parametrize("other", ["sm_90a", "sm_100", "sm_120a"])
def test_the_same_source_is_rejected_without_tcgen05(recipe, other):
    caps = get_profile("nvidia-b200")
    _toolchain_or_skip(caps.target.arch)
    tc = _toolchain_or_skip(other)
    p = _plan(caps, recipe, 128)
    with pytest.raises(CompileError):
        compile_cuda(kernel_source(p, get_backend(caps), caps), [p.kernel_name], other, toolchain=tc, cache=False)


def test_planner_refuses_what_it_cannot_run():
    caps = get_profile("nvidia-b200")
    for recipe in RECIPES:
        with pytest.raises(ShapeError):  # K % 256
            plan_blockscaled_tcgen05(caps, Tcgen05BlockScaledLayout(recipe, 4096, 4224), 512, "f16")
        with pytest.raises(ShapeError):  # N % 128
            plan_blockscaled_tcgen05(caps, Tcgen05BlockScaledLayout(recipe, 4160, 4096), 512, "f16")
        for name in ("nvidia-h200", "nvidia-rtx-5090", "nvidia-a100"):
            with pytest.raises(UnsupportedOnDevice, match="declares no tcgen05"):
                plan_blockscaled_tcgen05(get_profile(name), Tcgen05BlockScaledLayout(recipe, 4096, 4096), 512, "f16")
        for bn in (128, 256):
            p = _plan(caps, recipe, bn)
            assert p.smem_bytes + STATIC_SMEM <= caps.limits.smem_per_block_kb * 1024
            cols = tcgen05_bs_tmem_cols(bn, p.tiles.stages, p.layout)
            assert cols <= caps.memory.tmem_kb * 1024 // 512 and cols & (cols - 1) == 0
    with pytest.raises(ShapeError):  # W4A8: K % 128
        plan_blockscaled_tcgen05(caps, Tcgen05BlockScaledLayout("mxfp4", 4096, 4160, a_type="e4m3"), 512, "f16")
    assert _plan(caps, "w4a8", 128, k=384).tiles.bk == 128  # K = 3 x 128 is fine for W4A8
    with pytest.raises(UnsupportedOnDevice, match="declares no tcgen05"):
        plan_blockscaled_tcgen05(get_profile("nvidia-h200"), Tcgen05BlockScaledLayout("mxfp4", 4096, 4096, a_type="e4m3"),
                                 512, "f16")
    with pytest.raises(ShapeError):  # the repack checks the shape too
        pack_weight_scales_tcgen05(torch.zeros(4160, 256, dtype=torch.uint8), "nvfp4")


def test_selection_is_opt_in_and_gated(monkeypatch):
    """Without HUMMING_UNVERIFIED_KERNELS=1 the tcgen05 families plan the problem (with the note) but select passes
    them by: humming.plan shows what gemm runs (the upconvert route / the mma.sync kernel) with the tcgen05 kernel's
    note in its reasons; with it, humming.plan is the tcgen05 kernel."""
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    for caps in PROFILES:
        note = f"tcgen05 kernel generated and compiled for {caps.target.arch}, not yet validated on hardware: " \
               f"set {UNVERIFIED_ENV}=1 to use it"
        for recipe, scheme in RECIPES.items():
            sch = humming.schemes.get(scheme)
            problem = Problem(sch, 512, 4096, 4096)
            planned = registry.BY_NAME["tcgen05_blockscaled"].plan(problem, caps)
            assert isinstance(planned, Tcgen05BlockScaledPlan) and planned.path == "native" and note in planned.reasons
            assert f"kind::{KIND[recipe]}.block_scale" in planned.summary()
            p = humming.plan(scheme, 512, 4096, 4096, profile=caps)
            assert not isinstance(p, Tcgen05BlockScaledPlan) and p.family == "mma_sync"
            assert any(note in r for r in p.reasons)
            assert registry.select(problem, caps).family.name == "upconvert"
            run = runnable_path(caps, sch)
            assert run.family == "mma_sync" and run.path == "upconvert" and note in run.reasons[-1]
            assert tcgen05_kernel(humming.core.common.paths.choose_path(caps, sch), sch) == "blockscaled"
            row = next(r for r in api.path_table(caps) if r["scheme"] == scheme)
            assert note in row["reason"] and "not generated yet" not in row["reason"]
            # shapes the tile does not take keep the upconvert plan
            assert not isinstance(humming.plan(scheme, 32, 4096, 4352 - 128, profile=caps), Tcgen05BlockScaledPlan)
        sch = humming.schemes.get(W4A8)  # MXFP4 x FP8: the e2m1 -> e4m3 path, run as kind::mxf8f6f4 e4m3 x e2m1
        planned = registry.BY_NAME["tcgen05_w4a8"].plan(Problem(sch, 512, 4096, 4096), caps)
        assert isinstance(planned, Tcgen05BlockScaledPlan) and planned.instruction.kind == "mxf8f6f4"
        assert note in planned.reasons
        p = humming.plan(W4A8, 512, 4096, 4096, profile=caps)
        assert not isinstance(p, Tcgen05BlockScaledPlan) and p.family == "mma_sync"
        assert any(note in r for r in p.reasons)
        assert tcgen05_kernel(humming.core.common.paths.choose_path(caps, sch), sch, caps) == "w4a8"
        run = runnable_path(caps, sch)
        assert run.family == "mma_sync" and note in run.reasons[-1]
        # the table's row at M=512 (at M=16 W4A8 runs widened on the weight-only kernel, whose plan has no note)
        row = next(r for r in api.path_table(caps, m=512) if r["scheme"] == W4A8)
        assert row["kernel"] == "mma_8bit" and note in row["reason"] and "not generated yet" not in row["reason"]
        assert not isinstance(humming.plan(W4A8, 32, 4160, 4096, profile=caps), Tcgen05BlockScaledPlan)
        # int4 x e4m3 (w4a8-fp8) has no tcgen05 kernel: still "not generated yet", no note
        assert "not generated yet" in humming.plan("w4a8-fp8", 512, 4096, 4096, profile=caps).explain()
        row = next(r for r in api.path_table(caps, m=512) if r["scheme"] == "w4a8-fp8")
        assert row["kernel"] == "mma_8bit" and note not in row["reason"]
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    for caps in PROFILES:
        run = runnable_path(caps, humming.schemes.get(W4A8))
        assert run.family == "tcgen05" and run.path == "dequant-to-activation"
        # (the row names the kernel that runs; it no longer marks the unverified tcgen05 kernels "(unverified)")
        row = next(r for r in api.path_table(caps, m=512) if r["scheme"] == W4A8)
        assert row["family"] == "tcgen05" and row["instruction"].endswith("e4m3xe2m1") and row["route"] is None
        assert "M=512: tcgen05_w4a8" in row["reason"] and "not yet validated" not in row["reason"]
        p = humming.plan(W4A8, 512, 4096, 4096, profile=caps)
        assert isinstance(p, Tcgen05BlockScaledPlan) and p.instruction.kind == "mxf8f6f4"
        for recipe, scheme in RECIPES.items():
            run = runnable_path(caps, humming.schemes.get(scheme))
            assert run.family == "tcgen05" and run.path == "native" and run.instruction.scale_format
            p = humming.plan(scheme, 512, 4096, 4096, profile=caps)
            assert isinstance(p, Tcgen05BlockScaledPlan) and not any("not yet validated" in r for r in p.reasons)
            assert p.path == "native" and f"kind::{KIND[recipe]}.block_scale" in p.summary()
            row = next(r for r in api.path_table(caps) if r["scheme"] == scheme)
            assert row["family"] == "tcgen05" and row["kernel"] == "tcgen05_blockscaled"
            assert "not yet validated" not in row["reason"]


# ----------------------------------------------------------------------------- ISA tables, emulated
def _decode_idesc_bs(d: int) -> dict:
    """The fields of a tcgen05 instruction descriptor for .kind::mxf4 / .kind::mxf4nvf4 (PTX ISA table)."""
    return {"bits0_1": d & 3, "sparse": (d >> 2) & 1, "bit3": (d >> 3) & 1, "sfb_id": (d >> 4) & 3, "bit6": (d >> 6) & 1,
            "atype": (d >> 7) & 7, "btype": (d >> 10) & 3, "bit12": (d >> 12) & 1, "neg_a": (d >> 13) & 1,
            "neg_b": (d >> 14) & 1, "trans_a": (d >> 15) & 1, "trans_b": (d >> 16) & 1, "n": ((d >> 17) & 0x3F) << 3,
            "scale_type": (d >> 23) & 1, "bits24_26": (d >> 24) & 7, "m": ((d >> 27) & 3) << 7,
            "sfa_id": (d >> 29) & 3, "k_dim": d >> 31}


def _idescs(src: str) -> list[int]:
    body = re.search(r"constexpr uint32_t IDESC\[4\] = \{([^}]*)\};", src).group(1)
    return [int(v.strip().rstrip("u"), 16) for v in body.split(",")]


@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_instruction_descriptors_decode_to_the_tile_and_scale_ids(recipe, bn):
    caps = get_profile("nvidia-b200")
    src = api.source(_plan(caps, recipe, bn), caps)
    ids = [0, 0, 0, 0] if recipe == "nvfp4" else [0, 2, 0, 2]  # 4X: the whole word; 2X: byte pair 0 or 2
    for ks, d in enumerate(_idescs(src)):
        f = _decode_idesc_bs(d)
        assert d < 2 ** 32 and (f["m"], f["n"]) == (128, bn)
        assert f["atype"] == f["btype"] == 1  # E2M1 = 1 for the mxf4 kinds
        assert f["scale_type"] == (0 if recipe == "nvfp4" else 1)  # UE4M3 = 0, UE8M0 = 1
        assert f["sfa_id"] == f["sfb_id"] == ids[ks]
        for zero in ("bits0_1", "sparse", "bit3", "bit6", "bit12", "neg_a", "neg_b", "trans_a", "trans_b",
                     "bits24_26", "k_dim"):
            assert f[zero] == 0, zero
    with pytest.raises(ValueError):
        tcgen05_idesc_block_scaled("mxf4", "e2m1", "e2m1", "ue8m0", 128, 128, sfa_id=1)
    with pytest.raises(ValueError):
        tcgen05_idesc_block_scaled("mxf4", "e2m1", "e2m1", "ue4m3", 128, 128)
    # M=128 sits where the dense kinds put it too (M >> 4 at bit 24 == M >> 7 at bit 27)
    assert tcgen05_idesc_block_scaled("mxf4", "e2m1", "e2m1", "ue8m0", 128, bn) >> 24 == \
        tcgen05_idesc("f8f6f4", "e4m3", "e4m3", "f32", 128, bn) >> 24


def tc_sf_desc(addr: int) -> int:
    return eval(_c_expr(TCGEN05_BLOCK_SCALED, "tc_sf_desc"), {"addr": addr})  # noqa: S307 (our own helper text)


def test_scale_block_descriptor_fields():
    f = _decode_smem_desc(tc_sf_desc(0x8A00))
    assert f["start"] == 0x8A00 and f["sbo"] == 128 and f["swizzle"] == 0 and f["version"] == 1
    assert f["base_offset"] == 0 and f["lbo_mode"] == 0 and f["bits14_15"] == f["bits30_31"] == f["bits53_60"] == 0


def _check_kernel_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated kernel; change both together."""
    for text in ("copy_4_async(sa_tile + w * 512 + (r & 31) * 16 + (r >> 5) * 4,",
                 "ok ? SA + (size_t)(m0 + r) * sa_row + kt * (WORDS * 4) + w * 4 : SA, ok);",
                 "const int c = tid + i * THREADS, r = c / WORDS, w = c % WORDS;",
                 "const int j = c / (WORDS * 32), q = c % (WORDS * 32);",
                 "copy_16_async(sb_tile + c * 16, SB + ((size_t)(n0 / 128 + j) * sb_blocks + kt * WORDS) * 512 + q * 16, true);",
                 "const uint32_t sa_tile = smem0 + stage * STAGE_BYTES + A_BYTES + B_BYTES, sb_tile = sa_tile + SA_BYTES;",
                 "const uint32_t sfa = tmem + BN + slot * (SFA_COLS + SFB_COLS), sfb = sfa + SFA_COLS;",
                 "for (int w = 0; w < WORDS; ++w) tc_cp_sf(sfa + 4 * w, tc_sf_desc(sa_tile + 512 * w));",
                 "tc_cp_sf(sfb + w * (BN / 32) + 4 * j, tc_sf_desc(sb_tile + 512 * (j * WORDS + w)));",
                 "const int word = ks * SPM / 4;",
                 "tc_mma_bs(tmem, desc_a + 2 * ks, desc_b + 2 * ks, IDESC[ks], sfa + 4 * word, sfb + (BN / 32) * word,",
                 "const int K = K_el / 2;", "const int sa_row = K_el / VEC;",
                 "const int sb_blocks = K_el / (4 * VEC);",
                 "const float scale = GS ? out_scale * load_f32(GS) : out_scale;",
                 "tc_acc_to_f32(v[j]) * scale + b0",
                 # the A/B code tiles: the 8-bit kernel's loader (emulated by test_tcgen05_compile._store_map)
                 "const unsigned char* a_src = A + (size_t)(m0 + lrow) * K + lch * 16;",
                 "copy_16_async(a_tile + i * 16 * 128,", "copy_16_async(b_tile + i * 16 * 128,"):
        assert text in src, text


E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)


def _scale(byte: torch.Tensor, fmt: str) -> torch.Tensor:
    byte = byte.to(torch.uint8)
    if fmt == "ue4m3":
        return byte.view(torch.float8_e4m3fn).to(torch.float64)
    return torch.pow(2.0, byte.to(torch.float64) - 127)


# the W8A8 kernel's emulated copy loop and descriptor reads (same loader, same swizzle), memoized
_store_map = functools.lru_cache(maxsize=None)(w8a8_tests._store_map)
_read_map = functools.lru_cache(maxsize=None)(w8a8_tests._read_map)


def _nibbles(b: torch.Tensor) -> torch.Tensor:
    """[rows, bytes] packed e2m1 -> [rows, 2 * bytes] values (element 2i in the low nibble of byte i)."""
    b = b.to(torch.int64)
    return E2M1[torch.stack([b & 15, b >> 4], -1).reshape(b.shape[0], -1)]


class Tmem:
    """Tensor Memory of one CTA as bytes: 128 lanes x 512 columns x 4 bytes."""

    def __init__(self):
        self.b = torch.zeros(128, 512, 4, dtype=torch.uint8)

    def cp_32x128b_warpx4(self, col: int, desc: int, smem: torch.Tensor) -> None:
        """tcgen05.cp .32x128b.warpx4: 32 rows x 16 bytes from the (unswizzled) source the descriptor describes;
        row r -> lane r of each 32-lane partition, bytes 4c..4c+3 -> column col + c."""
        f = _decode_smem_desc(desc)
        assert f["swizzle"] == 0 and f["version"] == 1 and f["base_offset"] == 0
        for r in range(32):
            at = f["start"] + (r // 8) * f["sbo"] + (r % 8) * 16  # core matrices of 8 rows x 16 bytes
            row = smem[at:at + 16].view(4, 4)
            for p in range(4):
                self.b[32 * p + r, col:col + 4] = row

    def scale_matrix(self, col: int, rows: int, sid: int, count: int, fmt: str) -> torch.Tensor:
        """[rows, count] scale factors an MMA reads at column ``col`` with scale-factor ID ``sid``: row m from lane
        m % 32 (identical in the four partitions), column col + m // 32, bytes sid .. sid + count - 1."""
        m = torch.arange(rows)
        words = torch.stack([self.b[m % 32 + 32 * p, col + m // 32] for p in range(4)])  # [partition, rows, 4]
        assert all(torch.equal(words[0], words[p]) for p in range(1, 4)), "scale factors duplicated per partition"
        return _scale(words[0, :, sid:sid + count], fmt)


def _emulate(p, packed, a_codes, sa, gs, bad_sfb=False):
    """The kernel's data path for every CTA of the plan, in float64."""
    lay = p.layout
    m, n, bn, stages = p.m, p.n, p.tiles.bn, p.tiles.stages
    words, vec = lay.words_per_stage, lay.vec
    spm = 64 // vec
    a_bytes, b_bytes = 128 * 128, bn * 128
    sa_bytes, sb_bytes = words * 512, bn // 128 * words * 512
    stage_bytes = a_bytes + b_bytes + sa_bytes + sb_bytes
    sfa_cols, sfb_cols = 4 * words, bn // 32 * words
    kb, k_el = p.k // 2, p.k
    sa_row, sb_blocks = k_el // vec, k_el // (4 * vec)
    src = api.source(p, get_profile(p.profile))
    _check_kernel_indexing(src)
    idescs = _idescs(src)
    w_u8 = packed.qweight.view(torch.uint8).reshape(n, kb)
    sb = packed.scales.view(torch.uint8)
    out = torch.zeros(m, n, dtype=torch.float64)
    for m0 in range(0, m, 128):
        a_u8 = torch.zeros(128, kb, dtype=torch.uint8)
        rows = min(128, m - m0)
        a_u8[:rows] = a_codes[m0:m0 + rows]
        for n0 in range(0, n, bn):
            smem = torch.zeros(stages * stage_bytes, dtype=torch.uint8)
            tmem = Tmem()
            d = torch.zeros(128, bn, dtype=torch.float64)
            for kt in range(kb // 128):
                slot = kt % stages
                base = slot * stage_bytes
                smem[base:base + stage_bytes] = 0
                a_store, b_store = _store_map(128, base), _store_map(bn, base + a_bytes)
                smem[a_store.flatten()] = a_u8[:, kt * 128:(kt + 1) * 128].flatten()
                smem[b_store.flatten()] = w_u8[n0:n0 + bn, kt * 128:(kt + 1) * 128].flatten()
                sa_tile, sb_tile = base + a_bytes + b_bytes, base + a_bytes + b_bytes + sa_bytes
                c = torch.arange(128 * words)  # load_scales, activation words (every thread's c at once)
                r, w = c // words, c % words
                ok = m0 + r < m
                at = sa_tile + w * 512 + (r & 31) * 16 + (r >> 5) * 4
                s0 = (m0 + r) * sa_row + kt * (words * 4) + w * 4
                smem[(at[ok, None] + torch.arange(4)).flatten()] = sa.reshape(-1)[(s0[ok, None] + torch.arange(4)).flatten()]
                c = torch.arange(bn // 128 * words * 32)  # load_scales, weight blocks
                j, q = c // (words * 32), c % (words * 32)
                s0 = ((n0 // 128 + j) * sb_blocks + kt * words) * 512 + q * 16
                smem[(sb_tile + c[:, None] * 16 + torch.arange(16)).flatten()] = sb[(s0[:, None] + torch.arange(16)).flatten()]
                sfa = bn + slot * (sfa_cols + sfb_cols)  # tmem = column 0
                sfb = sfa + sfa_cols
                for w in range(words):
                    tmem.cp_32x128b_warpx4(sfa + 4 * w, tc_sf_desc(sa_tile + 512 * w), smem)
                for j in range(bn // 128):
                    for w in range(words):
                        tmem.cp_32x128b_warpx4(sfb + w * (bn // 32) + 4 * j, tc_sf_desc(sb_tile + 512 * (j * words + w)), smem)
                for ks in range(4):
                    f = _decode_idesc_bs(idescs[ks])
                    word = ks * spm // 4
                    a = _nibbles(smem[_read_map(128, base, ks)])  # [128, 64] through the operand descriptor
                    b = _nibbles(smem[_read_map(bn, base + a_bytes, ks)])  # [bn, 64]
                    fmt = "ue4m3" if f["scale_type"] == 0 else "ue8m0"
                    s_a = tmem.scale_matrix(sfa + 4 * word, 128, f["sfa_id"], spm, fmt)
                    s_b = tmem.scale_matrix(sfb + (bn // 32) * word, bn, f["sfb_id"] if not bad_sfb else 0, spm, fmt)
                    a = a * s_a.repeat_interleave(vec, 1)
                    b = b * s_b.repeat_interleave(vec, 1)
                    d = a @ b.T + (d if (kt > 0 or ks > 0) else 0)
            out[m0:m0 + rows, n0:n0 + bn] = d[:rows] * packed.out_scale * gs
    return out


@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_emulated_kernel_matches_the_reference(recipe, bn):
    """Operands and scales copied by the kernel's loops into emulated shared memory, scales moved to an emulated
    Tensor Memory by tcgen05.cp as decoded, MMAs reading A/B through the operand descriptors and SF_A/SF_B through the
    scale-factor IDs of each step's instruction descriptor, stages cycling through the slots, epilogue scales."""
    torch.manual_seed(1)
    caps = get_profile("nvidia-b200")
    m, n, k = (100, 256, 1024) if bn == 128 else (150, 256, 768)
    scheme = RECIPES[recipe]
    w = torch.randn(n, k) * torch.rand(n, 1) * 3
    x = torch.randn(m, k) * torch.rand(m, 1) * 2
    qw = humming.quantize(w, scheme)
    packed = prepare_blockscaled_tcgen05(qw, torch.float16)
    p = plan_blockscaled_tcgen05(caps, packed.layout, m, "f16", scheme=scheme)
    # the tile width under test (the planner picks by SM waves) and 2 stages, so that the K loop reuses the slots
    p = dataclasses.replace(p, tiles=dataclasses.replace(p.tiles, bn=bn, stages=2))
    assert k // 256 > p.tiles.stages
    qa = quantize_activation(x, scheme)
    a_codes = pack_e2m1(qa.codes)
    sa = qa.scales.view(torch.uint8).contiguous()
    gs = 1.0 if qa.global_scale is None else float(qa.global_scale)
    out = _emulate(p, packed, a_codes, sa, gs).to(torch.float32)
    ref = humming.reference_gemm(x, qw)
    assert torch.allclose(out, ref, rtol=2e-6, atol=1e-6 * float(ref.abs().max()))
    if recipe == "mxfp4":  # the check has teeth: SF_B's byte pair of the odd steps matters
        assert not torch.allclose(_emulate(p, packed, a_codes, sa, gs, bad_sfb=True).to(torch.float32), ref,
                                  rtol=1e-3, atol=1e-3 * float(ref.abs().max()))


def test_weight_scale_blocks_put_channel_n_at_lane_n_mod_32_column_n_div_32():
    """The repack is the shared-memory image tcgen05.cp expects: channel n's word w at byte (n % 32) * 16 +
    ((n % 128) // 32) * 4 of block (n // 128, w)."""
    n, k = 256, 512
    s = torch.randint(0, 256, (n, k // 16), dtype=torch.uint8)
    flat = pack_weight_scales_tcgen05(s, "nvfp4")
    blocks = k // 64
    for ch in (0, 1, 31, 32, 77, 127, 128, 255):
        for w in range(blocks):
            at = ((ch // 128) * blocks + w) * 512 + (ch % 32) * 16 + ((ch % 128) // 32) * 4
            assert torch.equal(flat[at:at + 4], s[ch, 4 * w:4 * w + 4])


# ----------------------------------------------------------------------------- W4A8 (kind::mxf8f6f4), emulated
def _decode_idesc_mxf8f6f4(d: int) -> dict:
    """The fields of a tcgen05 instruction descriptor for .kind::mxf8f6f4 (PTX ISA table)."""
    return {"bits0_1": d & 3, "sparse": (d >> 2) & 1, "bit3": (d >> 3) & 1, "sfb_id": (d >> 4) & 3, "bit6": (d >> 6) & 1,
            "atype": (d >> 7) & 7, "btype": (d >> 10) & 7, "neg_a": (d >> 13) & 1, "neg_b": (d >> 14) & 1,
            "trans_a": (d >> 15) & 1, "trans_b": (d >> 16) & 1, "n": ((d >> 17) & 0x3F) << 3, "scale_type": (d >> 23) & 1,
            "bits24_26": (d >> 24) & 7, "m": ((d >> 27) & 3) << 7, "sfa_id": (d >> 29) & 3, "bit31": d >> 31}


@pytest.mark.parametrize("bn", [128, 256])
def test_w4a8_instruction_descriptors(bn):
    caps = get_profile("nvidia-b300")
    for ks, d in enumerate(_idescs(api.source(_plan(caps, "w4a8", bn), caps))):
        f = _decode_idesc_mxf8f6f4(d)
        assert (f["m"], f["n"]) == (128, bn) and f["atype"] == 0 and f["btype"] == 5  # E4M3 = 0, E2M1 = 5
        assert f["scale_type"] == 1 and f["sfa_id"] == f["sfb_id"] == ks  # UE8M0; 1X: byte ks of the stage's word
        for zero in ("bits0_1", "sparse", "bit3", "bit6", "neg_a", "neg_b", "trans_a", "trans_b", "bits24_26", "bit31"):
            assert f[zero] == 0, zero


def _check_w4a8_indexing(src: str) -> None:
    """The W4A8 emulation mirrors these statements of the generated kernel; change both together."""
    for text in ("const unsigned char* a_src = A + (size_t)(m0 + lrow) * K_el + lch * 16;",
                 "const unsigned char* b_src = B + (size_t)(n0 + lrow) * (K_el / 2) + lch * 8;",
                 "copy_16_async(a_tile + i * 16 * 128, ok ? a_src + (16 * i * K_el + kt * BK) : A, ok);",
                 "copy_8_async(b_tile + i * 16 * 128, b_src + (16 * i * (K_el / 2) + kt * (BK / 2)), true);",
                 "st_shared_64(smem0 + (c / (BN * 8)) * STAGE_BYTES + A_BYTES + (c % (BN * 8)) * 16 + 8, 0u, 0u);",
                 "st_shared_128(smem0 + ONES_OFFSET + c * 16, 0x7F7F7F7Fu,",
                 "if (kt == 0) tc_cp_sf(sfa, tc_sf_desc(smem0 + ONES_OFFSET));",
                 "const uint32_t sfa = tmem + BN;", "const uint32_t sfb = tmem + BN + 4 + slot * SFB_COLS;",
                 "tc_cp_sf(sfb + w * (BN / 32) + 4 * j, tc_sf_desc(sb_tile + 512 * (j * WORDS + w)));",
                 "copy_16_async(sb_tile + c * 16, SB + ((size_t)(n0 / 128 + j) * sb_blocks + kt * WORDS) * 512 + q * 16, true);",
                 "tc_mma_bs(tmem, desc_a + 2 * ks, desc_b + 2 * ks, IDESC[ks], sfa + 4 * word, sfb + (BN / 32) * word,",
                 "const float rs = (TS && row < M) ? scale * load_f32(TS + row) : scale;", "tc_acc_to_f32(v[j]) * rs + b0"):
        assert text in src, text


def _emulate_w4a8(p, packed, a_codes, ts, padding_first=False):
    """The W4A8 kernel's data path (float64): e4m3 A through the 8-bit loader, e2m1 B copied 8 bytes into the low half
    of each swizzled 16-byte chunk (``padding_first``: the other half, to show the layout matters), unit SF_A, the
    weight's ue8m0 SF_B through tcgen05.cp, four k32 MMAs per stage with scale-factor ID ks, per-token scales."""
    m, n, bn, stages = p.m, p.n, p.tiles.bn, p.tiles.stages
    words = p.layout.words_per_stage
    a_bytes, b_bytes, sb_bytes = 128 * 128, bn * 128, bn // 128 * words * 512
    stage_bytes = -(-(a_bytes + b_bytes + sb_bytes) // 1024) * 1024
    ones = stages * stage_bytes
    k_el = p.k
    sb_blocks = k_el // (4 * 32)
    src = api.source(p, get_profile(p.profile))
    _check_w4a8_indexing(src)
    idescs = _idescs(src)
    w_u8 = packed.qweight.view(torch.uint8).reshape(n, k_el // 2)
    sb = packed.scales.view(torch.uint8)
    out = torch.zeros(m, n, dtype=torch.float64)
    for m0 in range(0, m, 128):
        rows = min(128, m - m0)
        a_u8 = torch.zeros(128, k_el, dtype=torch.uint8)
        a_u8[:rows] = a_codes[m0:m0 + rows]
        for n0 in range(0, n, bn):
            smem = torch.zeros(ones + 512, dtype=torch.uint8)
            smem[ones:ones + 512] = 0x7F  # st_shared_128 of the unit scales (the padding halves stay zero)
            tmem = Tmem()
            d = torch.zeros(128, bn, dtype=torch.float64)
            for kt in range(k_el // 128):
                slot = kt % stages
                base = slot * stage_bytes
                smem[base:base + a_bytes] = 0
                a_store, b_store = _store_map(128, base), _store_map(bn, base + a_bytes)
                smem[a_store.flatten()] = a_u8[:, kt * 128:(kt + 1) * 128].flatten()
                half = 8 if padding_first else 0
                for ch in range(8):  # copy_8_async: 8 bytes (16 codes) into the low half of swizzled chunk ch
                    smem[b_store[:, ch * 16 + half:ch * 16 + half + 8].flatten()] = \
                        w_u8[n0:n0 + bn, kt * 64 + ch * 8:kt * 64 + ch * 8 + 8].flatten()
                c = torch.arange(bn // 128 * words * 32)
                j, q = c // (words * 32), c % (words * 32)
                s0 = ((n0 // 128 + j) * sb_blocks + kt * words) * 512 + q * 16
                sb_tile = base + a_bytes + b_bytes
                smem[(sb_tile + c[:, None] * 16 + torch.arange(16)).flatten()] = sb[(s0[:, None] + torch.arange(16)).flatten()]
                sfa, sfb = bn, bn + 4 + slot * (bn // 32) * words
                if kt == 0:
                    tmem.cp_32x128b_warpx4(sfa, tc_sf_desc(ones), smem)
                for jj in range(bn // 128):
                    for w in range(words):
                        tmem.cp_32x128b_warpx4(sfb + w * (bn // 32) + 4 * jj, tc_sf_desc(sb_tile + 512 * (jj * words + w)), smem)
                for ks in range(4):
                    f = _decode_idesc_mxf8f6f4(idescs[ks])
                    a = smem[_read_map(128, base, ks)].view(torch.float8_e4m3fn).to(torch.float64)  # [128, 32]
                    bb = smem[_read_map(bn, base + a_bytes, ks)].reshape(bn, 2, 16)[:, :, :8]  # 2 chunks: 8 data bytes
                    b = _nibbles(bb.reshape(bn, 16))  # [bn, 32]: 16 codes per chunk, element 2i in the low nibble
                    s_a = tmem.scale_matrix(sfa, 128, f["sfa_id"], 1, "ue8m0")
                    s_b = tmem.scale_matrix(sfb, bn, f["sfb_id"], 1, "ue8m0")
                    d = (a * s_a) @ (b * s_b).T + (d if (kt > 0 or ks > 0) else 0)
            out[m0:m0 + rows, n0:n0 + bn] = d[:rows] * ts[m0:m0 + rows, None] * packed.out_scale
    return out


@pytest.mark.parametrize("bn", [128, 256])
def test_w4a8_emulated_kernel_matches_the_reference(bn):
    torch.manual_seed(2)
    caps = get_profile("nvidia-b300")
    m, n, k = 150, 256, 512
    w = torch.randn(n, k) * torch.rand(n, 1) * 3
    x = torch.randn(m, k) * torch.rand(m, 1) * 2
    qw = humming.quantize(w, W4A8)
    packed = prepare_blockscaled_tcgen05(qw, torch.bfloat16)
    assert packed.layout.a_type == "e4m3" and packed.layout.stage_k == 128
    p = plan_blockscaled_tcgen05(caps, packed.layout, m, "bf16", scheme=W4A8)
    p = dataclasses.replace(p, tiles=dataclasses.replace(p.tiles, bn=bn, stages=2))  # slots reused over K = 4 x 128
    qa = quantize_activation(x, W4A8)
    ts = qa.scale_values().reshape(-1).double()
    out = _emulate_w4a8(p, packed, qa.codes, ts).to(torch.float32)
    ref = humming.reference_gemm(x, qw)
    assert torch.allclose(out, ref, rtol=2e-6, atol=1e-6 * float(ref.abs().max()))
    bad = _emulate_w4a8(p, packed, qa.codes, ts, padding_first=True).to(torch.float32)
    assert not torch.allclose(bad, ref, rtol=1e-3, atol=1e-3 * float(ref.abs().max()))


# ----------------------------------------------------------------------------- the runtime dispatch, on CPU
@pytest.mark.parametrize("scheme", ["w4a4-nvfp4", "w4a4-mxfp4", W4A8])
def test_runtime_dispatch_hands_the_kernel_its_operands(scheme, monkeypatch, set_knobs):
    """humming's runtime with HUMMING_UNVERIFIED_KERNELS=1 on a B200 profile (a weight prepared for CPU tensors:
    the registry's choice, the family's packed weights, the activations' input step), the compile and launch
    replaced by the torch emulation of the kernel: the prepared weight, the activation codes and scales and the
    epilogue arguments reach the parameter slots the kernel reads them from (reference activation quantization)."""
    from humming.core.runtime import layer as runtime_layer

    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    set_knobs({"act_quant.kernel": False})  # the reference activation quantization
    caps = get_profile("nvidia-b200")
    torch.manual_seed(3)
    m, n, k = 130, 256, 512
    bias = torch.randn(n, dtype=torch.float16)
    qw = humming.quantize(torch.randn(n, k) * 0.05, humming.schemes.get(scheme), bias=bias)
    x = torch.randn(m, k, dtype=torch.float16)
    seen = {}

    class EmulatedLaunch:
        """In place of launch.LaunchSpec: the kernel's slots (A; B S Z CS BIAS; GS) run through the emulation."""

        def __init__(self, plan, inputs, packed, kernel, device, out_scale):
            self.plan, self.inputs, self.packed = plan, inputs, packed

        def launch(self, a, out, weights, gscale):
            qweight, s2, s3, chan, b = weights
            packed = self.packed
            p = dataclasses.replace(self.plan, tiles=dataclasses.replace(self.plan.tiles, stages=2))
            assert isinstance(p, Tcgen05BlockScaledPlan) and qweight is packed.qweight and chan is None
            assert s3 is packed.scales  # SB: the weight's tcgen05.cp blocks
            if p.layout.a_type == "e2m1":  # (A codes [M, K/2], SA [M, K/vec] bytes, ..., GS)
                assert self.inputs == "e2m1"
                assert a.shape == (m, k // 2) and s2.dtype == torch.uint8 and s2.shape == (m, k // p.layout.vec)
                gs = 1.0 if gscale is None else float(gscale)
                res = _emulate(p, packed, a, s2, gs)
            else:  # (A e4m3 codes [M, K], TS [M], ...)
                assert self.inputs == "codes8"
                assert a.shape == (m, k) and s2.shape == (m,) and gscale is None
                res = _emulate_w4a8(p, packed, a, s2.double())
            seen["kernel"] = self.plan.kernel_name
            out.copy_((res + b.double()).to(out.dtype))

    monkeypatch.setattr(runtime_layer, "compile_plan", lambda plan, caps, run_arch=None: (None, None))
    monkeypatch.setattr(runtime_layer, "LaunchSpec", EmulatedLaunch)
    handle = api.prepared(qw, torch.float16, torch.device("cpu"), profile=caps)
    out = api.gemm_prepared(x, handle)
    assert seen["kernel"].startswith("hm_w4a8_" if scheme == W4A8 else "hm_w4a4_")
    spec = api._registry[handle].launches[m]
    assert isinstance(spec, EmulatedLaunch) and spec.plan.kernel_name == seen["kernel"]
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    err = float((out.double() - ref.double()).norm() / ref.double().norm())
    assert out.dtype == torch.float16 and err < 2e-3, err
