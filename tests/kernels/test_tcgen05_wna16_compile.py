"""CPU: the tcgen05 WnA16 kernel (Blackwell datacenter; f16/bf16 activations x signed int4 weights dequantized into
shared memory, tcgen05.mma kind::f16, fp32 accumulator in Tensor Memory) is planned from the declared kind::f16 forms,
selected only with HUMMING_UNVERIFIED_KERNELS=1 (otherwise the plan keeps today's kernel and says why), compiles with
NVRTC 13 for sm_100a/103a/110a/107a with exactly kind::f16, is rejected on sm_90a, and its data path - the wgmma WnA16
kernel's copies and dequant stage (same prepared weights, same slots), two dequantized tiles, MMAs reading through the
tcgen05 descriptor model, the TMEM epilogue - matches humming.reference_gemm in a torch emulation. Never run."""
import itertools
import re
from dataclasses import replace

import pytest
import torch
from test_tcgen05_compile import _read_map, _store_map, assert_ptxas_fits  # the tcgen05 descriptor / copy-loop model
from test_wgmma_wna16_compile import DT, _dequant_stage, _scheme, _Smem  # the dequant stage model (same code)

import humming
from humming import api
from humming.capabilities import get_profile, list_profiles
from humming.core import registry
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.tcgen05.planner import (
    STATIC_SMEM,
    UNVERIFIED_ENV,
    WNA16_PATH,
    Tcgen05WnA16Plan,
    plan_wna16_tcgen05,
    tcgen05_f16_form,
)
from humming.core.families.wgmma_dequant.layout import prepare_wgmma_wna16, wgmma_wna16_layout
from humming.core.families.wgmma_dequant.planner import stage_bytes
from humming.core.problem import Problem
from humming.core.registry import kernel_source
from humming.devices import get_backend
from humming.devices.nvidia.tcgen05 import tcgen05_idesc
from humming.errors import CompileError, ShapeError, UnsupportedOnDevice

NVRTC13 = (13, 0)
PROFILES = [c for c in list_profiles(include_abstract=False) if c.find_mma(family="tcgen05")]
BN_CASES = {128: (200, 384), 256: (4096, 8192)}


def _toolchain_or_skip(arch):
    try:
        return select_toolchain(arch, NVRTC13)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _plan(caps, act="f16", group=128, bn=128, k=4096):
    m, n = BN_CASES[bn]
    p = plan_wna16_tcgen05(caps, wgmma_wna16_layout(_scheme(group), n, k, act), m, act, scheme="w4a16")
    assert isinstance(p, Tcgen05WnA16Plan) and p.path == WNA16_PATH and p.tiles.bn == bn
    return p


def test_every_tcgen05_profile_declares_kind_f16():
    assert {c.name for c in PROFILES} == {"nvidia-b200", "nvidia-b300", "nvidia-thor", "nvidia-rubin"}
    for caps in PROFILES:
        assert tcgen05_f16_form(caps, "f16") is not None and tcgen05_f16_form(caps, "bf16") is not None


@pytest.mark.parametrize("group", [128, 32, None], ids=["g128", "g32", "channel"])
@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("caps", PROFILES, ids=[c.name for c in PROFILES])
def test_compiles_with_exactly_kind_f16(caps, act, bn, group):
    arch = caps.target.arch
    tc = _toolchain_or_skip(arch)
    p = _plan(caps, act, group, bn)
    src = kernel_source(p, get_backend(caps), caps)
    mod = compile_cuda(src, [p.kernel_name], arch, toolchain=tc, options=("--ptxas-options=-v",))
    assert_ptxas_fits(mod, p, caps)
    ptx = mod.ptx
    assert set(re.findall(r"\btcgen05\.mma[.\w:]*", ptx)) == {"tcgen05.mma.cta_group::1.kind::f16"}
    assert len(re.findall(r"\btcgen05\.mma\.", ptx)) >= 4
    for bad in ("wgmma", "mma.sync", "ldmatrix", "block_scale", "kind::f8f6f4", "kind::i8", "tcgen05.cp"):
        assert bad not in ptx, bad
    idesc = tcgen05_idesc("f16", act, act, "f32", 128, bn)
    assert f"{idesc:#010x}u" in src and re.search(rf"\b{idesc}\b", ptx)


def test_the_same_source_is_rejected_on_sm90a():
    caps = get_profile("nvidia-b200")
    _toolchain_or_skip(caps.target.arch)
    tc = _toolchain_or_skip("sm_90a")
    p = _plan(caps)
    with pytest.raises(CompileError):
        compile_cuda(kernel_source(p, get_backend(caps), caps), [p.kernel_name], "sm_90a", toolchain=tc, cache=False)


def test_planner_refuses_what_it_cannot_run():
    caps = get_profile("nvidia-b200")
    with pytest.raises(ShapeError):
        plan_wna16_tcgen05(caps, wgmma_wna16_layout(_scheme(128), 4160, 4096, "f16"), 512, "f16")
    for name in ("nvidia-h200", "nvidia-rtx-5090", "nvidia-a100"):
        with pytest.raises(UnsupportedOnDevice, match="kind::f16"):
            plan_wna16_tcgen05(get_profile(name), wgmma_wna16_layout(_scheme(128), 4096, 4096, "f16"), 512, "f16")
    for bn in (128, 256):
        p = _plan(caps, bn=bn)
        assert p.smem_bytes + STATIC_SMEM <= caps.limits.smem_per_block_kb * 1024 and p.tiles.stages >= 3
    assert p.kernel_name.startswith("hm_wna16_tcgen05_int4_") and "tcgen05" in p.summary()


def test_selection_is_opt_in_and_gated(monkeypatch):
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    for caps in PROFILES:
        note = f"tcgen05 WnA16 kernel (int4 dequantized into shared memory, kind::f16) generated and compiled for " \
               f"{caps.target.arch}, not yet validated on hardware: set {UNVERIFIED_ENV}=1 to use it at M >= 128"
        p = humming.plan("w4a16", 512, 4096, 4096, profile=caps)
        assert p.family == "mma_sync" and p.reasons[-1] == note  # today's kernel, and why not the tcgen05 one
        assert note not in humming.plan("w4a16", 16, 4096, 4096, profile=caps).reasons  # decode: not a candidate
        assert note not in humming.plan("w4a16-zp", 512, 4096, 4096, profile=caps).reasons  # zero points: no
        assert registry.BY_NAME["tcgen05_wna16"].plan(Problem(humming.schemes.get("w4a16"), 512, 4096, 4096),
                                                      caps).family == "tcgen05"  # planned, not taken
        # the table's row at M=512 (its default decode M=16 runs the stream kernel, whose plan has no note)
        row = next(r for r in api.path_table(caps, m=512) if r["scheme"] == "w4a16")
        assert row["kernel"] == "mma_wna16" and note in row["reason"]
    for name in ("nvidia-h200", "nvidia-rtx-5090"):
        assert not any("tcgen05" in r for r in humming.plan("w4a16", 512, 4096, 4096, profile=name).reasons)
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    for caps in PROFILES:
        p = humming.plan("w4a16", 512, 4096, 4096, profile=caps, act="bf16")
        assert isinstance(p, Tcgen05WnA16Plan) and not any("not yet validated" in r for r in p.reasons)
        assert humming.plan("w4a16", 16, 4096, 4096, profile=caps).family == "mma_sync"
        # (the row names the family that runs prefill; it no longer says "unverified")
        row = next(r for r in api.path_table(caps) if r["scheme"] == "w4a16")
        assert "M=1024: tcgen05_wna16" in row["reason"] and "not yet validated" not in row["reason"]


def test_runtime_plan_is_the_tcgen05_kernel_only_when_opted_in(monkeypatch):
    """The prefill choice of humming.gemm's prepared layer (the registry's, per M): without the variable the
    mma.sync kernel; with it, the tcgen05 WnA16 kernel over the wgmma kernel's weight layout (CPU tensors:
    preparation and planning only, no launch)."""
    caps = get_profile("nvidia-b200")
    qw = humming.quantize(torch.randn(256, 512) * 0.05, _scheme(128))
    lay = api._registry[api.prepared(qw, torch.float16, torch.device("cpu"), profile=caps)]
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    inputs, p = lay.choose(256)
    assert p.family == "mma_sync" and not isinstance(p, Tcgen05WnA16Plan) and inputs == "x"
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    inputs, p = lay.choose(256)
    assert isinstance(p, Tcgen05WnA16Plan) and inputs == "x"
    assert registry.select(lay.problem(256), caps).family.name == "tcgen05_wna16"
    assert p.layout == wgmma_wna16_layout(_scheme(128), 256, 512, "f16")
    zp = humming.quantize(torch.randn(256, 512) * 0.05, "w4a16-zp")
    zp_layer = api._registry[api.prepared(zp, torch.float16, torch.device("cpu"), profile=caps)]
    assert zp_layer.plan_for(256).family == "mma_sync"  # zero points: the mma.sync kernel


# ----------------------------------------------------------------------------- end-to-end emulation
def _check_kernel_indexing(src: str) -> None:
    """The emulation below (and the dequant-stage model it borrows) mirrors these statements; change both together."""
    for text in (
        "const int lrow = tid >> 3, lch = tid & 7;", "const uint32_t lswz = swz128(lrow, lch);",
        "copy_16_async(slot_base + lswz + i * 16 * 128, ok ? a_src + ((size_t)16 * i * K + k0) : A, ok);",
        "copy_16_async(slot_base + A_BYTES + c * 16, b_src + ((size_t)(c >> 7) * (K / 64) + kt) * 2048 + (c & 127) * 16",
        "b_src = reinterpret_cast<const unsigned char*>(B) + (size_t)(n0 / 64) * (K / 64) * 2048",
        "const int c = tid + 128 * i;", "const int n = c >> 1, h = c & 1;", "lds_128(q, raw + c * 16);",
        "uint32_t v = dq_raw(q[j], J);", "v = act2_add(v, zz);", "o[J] = v;",
        "sts_128(bq + swz128(n, 4 * h + j), o[0], o[1], o[2], o[3]);",
        "const uint32_t bq0 = (smem_u32(smem) + 1023u) & ~1023u;", "const uint32_t slot0 = bq0 + BQ * BQ_BYTES;",
        "const uint32_t raw = slot0 + slot * STAGE_BYTES + A_BYTES;", "const uint32_t bq = bq0 + (kt % BQ) * BQ_BYTES;",
        "const uint32_t a_tile = slot0 + (kt % STAGES) * STAGE_BYTES, b_tile = bq0 + (kt % BQ) * BQ_BYTES;",
        "desc_a = tc_smem_desc(a_tile), desc_b = tc_smem_desc(b_tile);",
        "tc_mma(tmem, desc_a + 2 * ks, desc_b + 2 * ks, IDESC, (kt > 0 || ks > 0) ? 1 : 0);",
        "constexpr int BQ = 2;", "const int row = m0 + warp * 32 + lane;",
        "if (CS) { c0 *= load_f32(CS + col0 + j); c1 *= load_f32(CS + col0 + j + 1); }",
        "tc_acc_to_f32(v[j]) * c0 + b0",
    ):
        assert text in src, text
    if "S_ROWS = 0" not in src:
        for text in ("v = act2_mul(v, ss);", "const uint32_t ss = dup_lo((uint32_t)s16);",
                     "copy_16_async(slot_base + S_OFF + (r * BN + ch * 8) * 2, S + (size_t)"):
            assert text in src, text


def _emulate(p, packed, x: torch.Tensor, bias) -> torch.Tensor:
    """The kernel in torch: A tiles through the copy loop, B tiles through the dequant stage (two tiles), each k16
    step read back through the tcgen05 descriptor model, fp64 products accumulated per output tile, the epilogue."""
    caps = get_profile(p.profile)
    _check_kernel_indexing(api.source(p, caps))
    bn, stages, dtype = p.tiles.bn, p.tiles.stages, DT[p.act]
    m, n, k = p.m, p.n, p.k
    sb = stage_bytes(bn, p.layout.scale_group)
    bq0, bq_bytes = 1024, bn * 128
    slot0 = bq0 + 2 * bq_bytes
    smem = _Smem(slot0 + stages * sb)
    a_maps = {s: _store_map(128, slot0 + s * sb) for s in range(stages)}
    out = torch.empty(m, n, dtype=torch.float64)
    for bx, by in itertools.product(range(-(-m // 128)), range(n // bn)):
        m0, n0 = bx * 128, by * bn
        acc = torch.zeros(128, bn, dtype=torch.float64)  # TMEM: lane = tile row, column = tile column
        for kt in range(k // 64):
            slot = kt % stages
            tile = torch.zeros(128, 64, dtype=dtype)  # rows past M zero-filled
            rows = x[m0:m0 + 128, kt * 64:(kt + 1) * 64]
            tile[:rows.shape[0]] = rows
            smem.data[a_maps[slot].flatten()] = tile.contiguous().view(torch.uint8).flatten()
            bq = bq0 + (kt % 2) * bq_bytes
            smem.data[bq:bq + bq_bytes] = 0
            _dequant_stage(p, packed, smem, slot0 + slot * sb, bq, n0, kt)
            for ks in range(4):
                a = smem.data[_read_map(128, slot0 + slot * sb, ks)].contiguous().view(dtype).double()  # [128, 16]
                b = smem.data[_read_map(bn, bq, ks)].contiguous().view(dtype).double()  # [bn, 16]
                acc = a @ b.t() + (acc if (kt > 0 or ks > 0) else 0)
        full = acc[: min(m, m0 + 128) - m0]
        scale = torch.full((bn,), packed.out_scale, dtype=torch.float64)
        if packed.channel_scale is not None:
            scale = scale * packed.channel_scale[n0:n0 + bn].double()
        v = full * scale
        if bias is not None:
            v = v + bias[n0:n0 + bn].double()
        out[m0:m0 + full.shape[0], n0:n0 + bn] = v
    return out


@pytest.mark.parametrize("act,group,bn", [("f16", 128, 128), ("bf16", 32, 256), ("f16", None, 256), ("bf16", 64, 128)])
def test_emulated_kernel_matches_reference(act, group, bn):
    torch.manual_seed(len(act) + bn + (group or 3))
    dtype = DT[act]
    m, n, k = 200, 256, 256
    bias = torch.randn(n).to(dtype)
    qw = humming.quantize(torch.randn(n, k) * 0.05, _scheme(group), bias=bias)
    packed = prepare_wgmma_wna16(qw, dtype)
    caps = get_profile("nvidia-b200")
    p = plan_wna16_tcgen05(caps, packed.layout, m, act, scheme="w4a16")
    p = replace(p, tiles=replace(p.tiles, bn=bn, stages=3))  # the tile under test; K = 4 stages reuses the slots
    x = torch.randn(m, k).to(dtype)
    out = _emulate(p, packed, x, packed.bias).to(dtype)
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < (1e-3 if act == "f16" else 5e-3), err
