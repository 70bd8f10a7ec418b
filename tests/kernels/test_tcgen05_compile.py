"""CPU: the tcgen05 W8A8 kernel (Blackwell datacenter; kind::f8f6f4 e4m3 x e4m3 -> f32, kind::i8 s8 x s8 -> s32 where
declared) is planned from the declared forms only, compiles with NVRTC 13 for every shipped profile declaring tcgen05
(sm_100a B200, sm_103a B300, sm_110a Thor, sm_107a Rubin) and is rejected on sm_90a, holds exactly the intended
tcgen05 instructions (never kind::i8 for B300/Rubin), is gated behind HUMMING_UNVERIFIED_KERNELS, and its instruction
descriptor, shared-memory descriptor and copy-loop addressing agree with the PTX ISA tables (torch emulation).
Never run on hardware: no Blackwell device here."""
import re

import pytest
import torch

import humming
from humming import api
from humming.capabilities import get_profile, list_profiles
from humming.core import registry
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.runnable import runnable_path
from humming.core.families.tcgen05.planner import STATIC_SMEM, UNVERIFIED_ENV, plan_w8a8_tcgen05, tcgen05_form
from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout
from humming.core.problem import Problem
from humming.core.registry import kernel_source
from humming.devices import get_backend
from humming.devices.nvidia.tcgen05 import TCGEN05_COMMON, tcgen05_idesc
from humming.devices.nvidia.wgmma import WGMMA_COMMON
from humming.errors import CompileError, ShapeError, UnsupportedOnDevice

NVRTC13 = (13, 0)
KIND = {"e4m3": "f8f6f4", "s8": "i8"}
ACC = {"e4m3": "f32", "s8": "s32"}
PROFILES = [c for c in list_profiles(include_abstract=False) if c.find_mma(family="tcgen05")]
# (M, N) that make the planner choose BN = 128 and BN = 256
BN_CASES = {128: (200, 384), 256: (4096, 8192)}
K = 1024


def _toolchain_or_skip(arch):
    try:
        return select_toolchain(arch, NVRTC13)
    except UnsupportedOnDevice as exc:  # e.g. Rubin (sm_107a) needs NVRTC >= 13.4
        pytest.skip(str(exc).splitlines()[0])


def _plan(caps, a_type, bn, act="f16"):
    m, n = BN_CASES[bn]
    p = plan_w8a8_tcgen05(caps, WgmmaW8A8Layout(a_type, n, K, "channel"), m, act, scheme=f"w8a8-{a_type}")
    assert p.family == "tcgen05" and p.tiles.bn == bn and p.tiles.threads == 128
    return p


def test_the_profiles_declaring_tcgen05():
    assert {c.name for c in PROFILES} == {"nvidia-b200", "nvidia-b300", "nvidia-thor", "nvidia-rubin"}
    with_i8 = {c.name for c in PROFILES if tcgen05_form(c, "s8") is not None}
    assert with_i8 == {"nvidia-b200", "nvidia-thor"}
    assert all(tcgen05_form(c, "e4m3") is not None for c in PROFILES)


def assert_ptxas_fits(mod, p, caps):
    """The ptxas statistics of a tcgen05 kernel (absent on a cache hit): at most 255 registers, no spills, static
    shared memory within STATIC_SMEM and, with the plan's dynamic part, within the profile's limit."""
    if mod.log and "registers" in mod.log:
        assert max(int(r) for r in re.findall(r"Used (\d+) registers", mod.log)) <= 255, mod.log
        assert all(int(s) == 0 for s in re.findall(r"(\d+) bytes spill stores", mod.log)), mod.log
        static = max(int(s) for s in re.findall(r"(\d+) bytes smem", mod.log))
        assert static <= STATIC_SMEM and p.smem_bytes + static <= caps.limits.smem_per_block_kb * 1024, mod.log


def _cases():
    for caps in PROFILES:
        for a_type in ("e4m3", "s8"):
            if tcgen05_form(caps, a_type) is not None:
                yield pytest.param(caps, a_type, id=f"{caps.name}-{a_type}")


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("caps,a_type", list(_cases()))
def test_compiles_with_tcgen05(caps, a_type, bn, act):
    arch = caps.target.arch
    tc = _toolchain_or_skip(arch)
    p = _plan(caps, a_type, bn, act)
    src = kernel_source(p, get_backend(caps), caps)
    mod = compile_cuda(src, [p.kernel_name], arch, toolchain=tc, options=("--ptxas-options=-v",))
    assert mod.cubin and mod.nvrtc_version >= NVRTC13
    assert_ptxas_fits(mod, p, caps)
    if arch == "sm_107a":
        assert mod.nvrtc_version >= (13, 4)
    ptx = mod.ptx
    forms = set(re.findall(r"\btcgen05\.mma[.\w:]*", ptx))
    assert forms == {f"tcgen05.mma.cta_group::1.kind::{KIND[a_type]}"}
    assert len(re.findall(r"\btcgen05\.mma\.", ptx)) >= 4  # the unrolled k32 steps of a stage
    for need in ("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32",
                 "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned",
                 "tcgen05.dealloc.cta_group::1.sync.aligned.b32",
                 "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64",
                 "tcgen05.ld.sync.aligned.32x32b.x32.b32", "tcgen05.wait::ld.sync.aligned",
                 "tcgen05.fence::before_thread_sync", "tcgen05.fence::after_thread_sync",
                 "mbarrier.try_wait.parity.shared::cta.b64", "fence.proxy.async.shared::cta", "cp.async.cg.shared.global"):
        assert need in ptx, need
    for bad in ("wgmma", "mma.sync", "ldmatrix"):
        assert bad not in ptx
    if tcgen05_form(caps, "s8") is None:
        assert "kind::i8" not in ptx
    idesc = tcgen05_idesc(KIND[a_type], a_type, a_type, ACC[a_type], 128, bn)
    assert f"{idesc:#010x}u" in src
    assert re.search(rf"\b{idesc}\b", ptx), "the encoded instruction descriptor reaches the MMA"


@pytest.mark.parametrize("unverified", [False, True])
def test_no_kind_i8_in_any_b300_or_rubin_kernel_and_int8_stays_legacy(unverified, monkeypatch):
    """With the tcgen05 kernels on (HUMMING_UNVERIFIED_KERNELS=1) FP8 runs on them, INT8 stays on the legacy mma.sync
    kernel; without, both run mma.sync. No kernel holds kind::i8."""
    if unverified:
        monkeypatch.setenv(UNVERIFIED_ENV, "1")
    else:
        monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    for name in ("nvidia-b300", "nvidia-rubin"):
        caps = get_profile(name)
        assert tcgen05_form(caps, "s8") is None
        with pytest.raises(UnsupportedOnDevice, match="kind::i8"):
            plan_w8a8_tcgen05(caps, WgmmaW8A8Layout("s8", 4096, 4096, "channel"), 512, "f16")
        p = humming.plan("w8a8-int8", 512, 4096, 4096, profile=caps)
        assert p.family == "mma_sync" and p.path == "legacy" and "kind::i8" not in api.source(p, caps)
        p = humming.plan("w8a8-fp8", 512, 4096, 4096, profile=caps)
        assert p.family == ("tcgen05" if unverified else "mma_sync") and "kind::i8" not in api.source(p, caps)
        planned = registry.BY_NAME["tcgen05_w8a8"].plan(Problem(humming.schemes.get("w8a8-fp8"), 512, 4096, 4096),
                                                        caps)  # the tcgen05 kernel, taken or not
        assert planned.family == "tcgen05" and "kind::f8f6f4" in api.source(planned, caps)
        assert "kind::i8" not in api.source(planned, caps)


@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
def test_the_same_source_is_rejected_on_sm90a(a_type):
    caps = get_profile("nvidia-b200")
    _toolchain_or_skip(caps.target.arch)
    tc = _toolchain_or_skip("sm_90a")
    p = _plan(caps, a_type, 128)
    src = kernel_source(p, get_backend(caps), caps)
    with pytest.raises(CompileError):
        compile_cuda(src, [p.kernel_name], "sm_90a", toolchain=tc, cache=False)


def test_kind_i8_source_is_rejected_on_sm103a():
    """The B200 INT8 kernel does not compile for the B300 target (ptxas: kind::i8 not supported on sm_103a)."""
    caps = get_profile("nvidia-b200")
    _toolchain_or_skip(caps.target.arch)
    tc = _toolchain_or_skip("sm_103a")
    p = _plan(caps, "s8", 128)
    with pytest.raises(CompileError):
        compile_cuda(kernel_source(p, get_backend(caps), caps), [p.kernel_name], "sm_103a", toolchain=tc, cache=False)


def test_planner_refuses_what_it_cannot_run():
    caps = get_profile("nvidia-b200")
    with pytest.raises(ShapeError):
        plan_w8a8_tcgen05(caps, WgmmaW8A8Layout("e4m3", 4096, 4000, "channel"), 512, "f16")
    with pytest.raises(ShapeError):
        plan_w8a8_tcgen05(caps, WgmmaW8A8Layout("e4m3", 4032, 4096, "channel"), 512, "f16")
    with pytest.raises(UnsupportedOnDevice):
        plan_w8a8_tcgen05(get_profile("nvidia-h200"), WgmmaW8A8Layout("e4m3", 4096, 4096, "channel"), 512, "f16")
    p = _plan(caps, "e4m3", 256)
    assert p.smem_bytes + STATIC_SMEM <= caps.limits.smem_per_block_kb * 1024


def test_selection_is_opt_in_and_gated(monkeypatch):
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    for name in ("nvidia-b200", "nvidia-b300", "nvidia-thor", "nvidia-rubin"):
        caps = get_profile(name)
        note = f"tcgen05 kernel generated and compiled for {caps.target.arch}, not yet validated on hardware: " \
               f"set {UNVERIFIED_ENV}=1 to use it"
        schemes = ["w8a8-fp8", "w8a8-fp8-tensor"] + (["w8a8-int8"] if tcgen05_form(caps, "s8") else [])
        for scheme in schemes:
            problem = Problem(humming.schemes.get(scheme), 512, 4096, 4096)
            planned = registry.BY_NAME["tcgen05_w8a8"].plan(problem, caps)  # planned, not taken
            assert planned.family == "tcgen05" and note in planned.reasons
            p = humming.plan(scheme, 512, 4096, 4096, profile=caps)  # what gemm runs: the mma.sync kernel, with the note
            assert p.family == "mma_sync" and any(note in r for r in p.reasons)
            assert registry.select(problem, caps).family.name == "mma_8bit"
            run = runnable_path(caps, humming.schemes.get(scheme))
            assert run.family == "mma_sync" and note in run.reasons[-1]
            row = next(r for r in api.path_table(caps) if r["scheme"] == scheme)
            assert note in row["reason"] and "not generated yet" not in row["reason"]
        # shapes the tile does not take keep the mma.sync plan
        assert humming.plan("w8a8-fp8", 32, 4160, 4096, profile=caps).family == "mma_sync"
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    caps = get_profile("nvidia-b200")
    for scheme in ("w8a8-fp8", "w8a8-int8"):
        run = runnable_path(caps, humming.schemes.get(scheme))
        assert run.family == "tcgen05" and run.path == "native"
        p = humming.plan(scheme, 512, 4096, 4096, profile=caps)
        assert p.family == "tcgen05" and not any("not yet validated" in r for r in p.reasons)
        assert registry.select(Problem(humming.schemes.get(scheme), 512, 4096, 4096), caps).family.name == \
            "tcgen05_w8a8"
        # (the row names the family that runs; it no longer marks the unverified tcgen05 kernels "(unverified)")
        row = next(r for r in api.path_table(caps) if r["scheme"] == scheme)
        assert row["family"] == "tcgen05" and "[M=16: tcgen05_w8a8]" in row["reason"]
        assert "not yet validated" not in row["reason"]
    # shapes the tile does not take keep the mma.sync plan
    assert humming.plan("w8a8-fp8", 32, 4160, 4096, profile=caps).family == "mma_sync"



@pytest.mark.parametrize("scheme,family", [("w8a8-fp8", "tcgen05_w8a8"), ("w4a16", "tcgen05_wna16")])
def test_a_prepared_layer_packs_a_tcgen05_plan_for_its_family(scheme, family, monkeypatch):
    """With HUMMING_UNVERIFIED_KERNELS=1 on a B200 profile, the weight prepared for CPU tensors: the family select
    chooses for M=512 owns the plan and packs its weights (what the first gemm of that M does)."""
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    caps = get_profile("nvidia-b200")
    qw = humming.quantize(torch.randn(256, 512) * 0.05, scheme)
    lay = api._registry[api.prepared(qw, torch.float16, torch.device("cpu"), profile=caps)]
    inputs, plan = lay.choose(512)
    assert plan.family == "tcgen05" and registry.select(lay.problem(512), caps).family.name == family
    want = registry.BY_NAME[family].pack(qw, torch.float16, plan.layout, caps)
    packed = lay.packed_for(plan, inputs)
    assert type(packed) is type(want) and torch.equal(packed.qweight, want.qweight)
    assert registry.family_of(plan).name == family


# ----------------------------------------------------------------------------- ISA tables, emulated
def _decode_idesc(d: int) -> dict:
    """The fields of a tcgen05 instruction descriptor for .kind::tf32/f16/f8f6f4/i8 (PTX ISA table)."""
    return {"sparse_sel": d & 3, "sparse": (d >> 2) & 1, "saturate": (d >> 3) & 1, "dtype": (d >> 4) & 3,
            "bit6": (d >> 6) & 1, "atype": (d >> 7) & 7, "btype": (d >> 10) & 7, "neg_a": (d >> 13) & 1,
            "neg_b": (d >> 14) & 1, "trans_a": (d >> 15) & 1, "trans_b": (d >> 16) & 1, "n": ((d >> 17) & 0x3F) << 3,
            "bit23": (d >> 23) & 1, "m": ((d >> 24) & 0x1F) << 4, "bit29": (d >> 29) & 1, "max_shift": d >> 30}


@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
def test_instruction_descriptor_decodes_to_the_tile(a_type, bn):
    caps = get_profile("nvidia-b200")
    p = _plan(caps, a_type, bn)
    src = api.source(p, caps)
    d = int(re.search(r"constexpr uint32_t IDESC = (0x[0-9a-f]+)u;", src).group(1), 16)
    f = _decode_idesc(d)
    assert d < 2 ** 32
    assert (f["m"], f["n"]) == (128, bn)
    assert f["dtype"] == {"f32": 1, "s32": 2}[ACC[a_type]]
    assert f["atype"] == f["btype"] == {"e4m3": 0, "s8": 1}[a_type]  # E4M3 = 0 (f8f6f4); signed 8b = 1 (i8)
    assert f["trans_a"] == f["trans_b"] == 0  # both K-major
    for zero in ("sparse_sel", "sparse", "saturate", "bit6", "neg_a", "neg_b", "bit23", "bit29", "max_shift"):
        assert f[zero] == 0, zero
    with pytest.raises(ValueError):
        tcgen05_idesc("f8f6f4", "e4m3", "e4m3", "f32", 128, 264)


def _c_expr(helper: str, fn: str) -> str:
    """The return expression of a one-line C helper of the backend, as Python (casts and suffixes removed)."""
    m = re.search(fn + r"\([^)]*\)\s*\{\s*return (.*?);\s*\}", helper, re.S)
    assert m, fn
    expr = re.sub(r"\((uint64_t|uint32_t)\)", "", m.group(1))
    return re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)u\b", r"\1", expr)


def swz128(r: int, ch: int) -> int:
    return eval(_c_expr(TCGEN05_COMMON, "swz128"), {"r": r, "ch": ch})  # noqa: S307 (our own helper text)


def tc_smem_desc(addr: int) -> int:
    return eval(_c_expr(TCGEN05_COMMON, "tc_smem_desc"), {"addr": addr})  # noqa: S307


def _decode_smem_desc(d: int) -> dict:
    """The fields of a tcgen05 shared-memory descriptor (PTX ISA table)."""
    return {"start": (d & 0x3FFF) << 4, "bits14_15": (d >> 14) & 3, "lbo": ((d >> 16) & 0x3FFF) << 4,
            "bits30_31": (d >> 30) & 3, "sbo": ((d >> 32) & 0x3FFF) << 4, "version": (d >> 46) & 7,
            "base_offset": (d >> 49) & 7, "lbo_mode": (d >> 52) & 1, "bits53_60": (d >> 53) & 0xFF,
            "swizzle": (d >> 61) & 7}


def tc_address(desc: int, row: int, kb: int) -> int:
    """Shared-memory byte the tensor core reads for (row, k byte kb) of a K-major 8-bit operand under the decoded
    descriptor: 128-byte swizzle (mode 2): canonical rows of 128 bytes, 8-row groups SBO apart, then the 16-byte
    chunk bits 4-6 XOR the row-in-pattern bits 7-9 of the address (1024-byte period, base offset 0)."""
    f = _decode_smem_desc(desc)
    assert f["version"] == 1 and f["swizzle"] == 2 and f["base_offset"] == 0 and f["lbo_mode"] == 0
    assert 0 <= kb < 32 and f["start"] % 128 + kb < 128, "a k32 step stays inside its 128-byte row"
    logical = f["start"] + (row // 8) * f["sbo"] + (row % 8) * 128 + kb
    return logical ^ (((logical >> 7) & 7) << 4)


def test_shared_memory_descriptor_fields():
    d = tc_smem_desc(0x12400)
    f = _decode_smem_desc(d)
    assert f["start"] == 0x12400 and f["sbo"] == 1024 and f["lbo"] == 16  # LBO unused for swizzled K-major
    assert f["version"] == 1 and f["base_offset"] == 0 and f["lbo_mode"] == 0 and f["swizzle"] == 2
    assert f["bits14_15"] == f["bits30_31"] == f["bits53_60"] == 0
    assert tc_smem_desc(0x12400) + 2 == tc_smem_desc(0x12400 + 32)  # the k32 advance of the kernel
    # the wgmma descriptor differs: no version bits, 2-bit swizzle field at 62-63 with 128 B = 1
    wgmma_desc = eval(_c_expr(WGMMA_COMMON, "make_smem_desc"), {"addr": 0x12400})  # noqa: S307
    assert wgmma_desc ^ tc_smem_desc(0x12400) == 1 << 46  # 2 << 61 == 1 << 62: same swizzle bits


def _check_kernel_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated kernel; change both together."""
    for text in ("const int lrow = tid >> 3, lch = tid & 7;", "const uint32_t lswz = swz128(lrow, lch);",
                 "copy_16_async(a_tile + i * 16 * 128,", "copy_16_async(b_tile + i * 16 * 128,",
                 "smem0 + stage * STAGE_BYTES + lswz, b_tile = a_tile + A_BYTES",
                 "a_tile = smem0 + slot * STAGE_BYTES, b_tile = a_tile + A_BYTES",
                 "desc_a = tc_smem_desc(a_tile), desc_b = tc_smem_desc(b_tile)",
                 "tc_mma(tmem, desc_a + 2 * ks, desc_b + 2 * ks, IDESC, (kt > 0 || ks > 0) ? 1 : 0);",
                 "(smem_u32(smem) + 1023u) & ~1023u", "const int row = m0 + warp * 32 + lane;",
                 "tmem_ld32(v, tmem + ((uint32_t)(warp * 32) << 16) + (uint32_t)(c * 32));",
                 "const int col0 = n0 + 32 * c;", "store_128(out + 8 * q, packed[4 * q]"):
        assert text in src, text


def _store_map(rows: int, tile_base: int) -> torch.Tensor:
    """[rows, 128] shared-memory address written for byte (row, k) of a tile by the kernel's copy loop."""
    out = torch.full((rows, 128), -1, dtype=torch.int64)
    for tid in range(128):
        lrow, lch = tid >> 3, tid & 7
        lswz = swz128(lrow, lch)
        for i in range(rows // 16):
            for b in range(16):
                assert out[lrow + 16 * i, lch * 16 + b] == -1
                out[lrow + 16 * i, lch * 16 + b] = tile_base + lswz + i * 16 * 128 + b
    assert (out >= 0).all()
    return out


def _read_map(rows: int, tile_base: int, ks: int) -> torch.Tensor:
    desc = tc_smem_desc(tile_base) + 2 * ks
    return torch.tensor([[tc_address(desc, r, kb) for kb in range(32)] for r in range(rows)], dtype=torch.int64)


@pytest.mark.parametrize("bn", [128, 256])
def test_copy_loop_and_descriptor_address_the_same_bytes(bn):
    """For every (row, k byte) of the A and B tiles of every stage and k32 step: the byte the copy loop wrote is the
    byte the descriptor makes the tensor core read (M = 128 rows of A, N = BN rows of B); no two bytes collide."""
    caps = get_profile("nvidia-b200")
    p = _plan(caps, "e4m3", bn)
    _check_kernel_indexing(api.source(p, caps))
    a_bytes, stage_bytes = 128 * 128, 128 * 128 + bn * 128
    smem0 = 3 * 1024  # any 1024-byte aligned base (the kernel rounds the dynamic shared memory up)
    seen = set()
    for stage in range(p.tiles.stages):
        base = smem0 + stage * stage_bytes
        a_store, b_store = _store_map(128, base), _store_map(bn, base + a_bytes)
        addrs = set(a_store.flatten().tolist()) | set(b_store.flatten().tolist())
        assert len(addrs) == (128 + bn) * 128 and not (addrs & seen)
        assert min(addrs) == base and max(addrs) == base + stage_bytes - 1
        seen |= addrs
        for ks in range(4):
            assert torch.equal(_read_map(128, base, ks), a_store[:, ks * 32:(ks + 1) * 32])
            assert torch.equal(_read_map(bn, base + a_bytes, ks), b_store[:, ks * 32:(ks + 1) * 32])
    assert max(seen) < smem0 + p.smem_bytes - 1024 + 1


@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
def test_emulated_kernel_matches_reference(a_type):
    """The whole data path in torch: operands copied into emulated shared memory by the copy loop, read back through
    the descriptor model per k32 step, D = A B^T accumulated as the MMAs do (enable-input-d 0 on the first), the
    epilogue reading TMEM lane = row, column = column (32x32b: thread t of warp w reads lane 32w + t), scales."""
    caps = get_profile("nvidia-b200")
    bn, m, n, k = 128, 100, 128, 256
    p = plan_w8a8_tcgen05(caps, WgmmaW8A8Layout(a_type, n, k, "channel"), m, "f16")
    assert p.tiles.bn == bn
    g = torch.Generator().manual_seed(0)
    if a_type == "s8":
        a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int64).to(torch.int8)
        w = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int64).to(torch.int8)
        val = lambda b: b.view(torch.int8).to(torch.float64)  # noqa: E731
    else:
        a = (torch.randn(m, k, generator=g) * 4).to(torch.float8_e4m3fn)
        w = (torch.randn(n, k, generator=g) * 4).to(torch.float8_e4m3fn)
        val = lambda b: b.view(torch.float8_e4m3fn).to(torch.float64)  # noqa: E731
    a_u8 = torch.zeros(128, k, dtype=torch.uint8)
    a_u8[:m] = a.view(torch.uint8)  # rows past M are zero-filled by the copy
    w_u8 = w.view(torch.uint8)
    ts = torch.rand(m, generator=g, dtype=torch.float64) + 0.5
    cs = torch.rand(n, generator=g, dtype=torch.float64) + 0.5
    a_store, b_store = _store_map(128, 0), _store_map(bn, 128 * 128)
    tmem = torch.zeros(128, bn, dtype=torch.float64)  # lane = row, column = column
    for kt in range(k // 128):
        smem = torch.zeros(128 * 128 + bn * 128, dtype=torch.uint8)
        smem[a_store.flatten()] = a_u8[:, kt * 128:(kt + 1) * 128].flatten()
        smem[b_store.flatten()] = w_u8[:, kt * 128:(kt + 1) * 128].flatten()
        for ks in range(4):
            at = val(smem[_read_map(128, 0, ks)])
            bt = val(smem[_read_map(bn, 128 * 128, ks)])
            tmem = at @ bt.T + (tmem if (kt > 0 or ks > 0) else 0)
    out = torch.zeros(m, n, dtype=torch.float64)
    for warp in range(4):
        for lane in range(32):
            row = warp * 32 + lane
            if row < m:
                out[row] = tmem[row] * ts[row] * cs
    ref = (val(a.view(torch.uint8)) @ val(w_u8).T) * ts[:, None] * cs[None, :]
    assert torch.allclose(out, ref, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("arch", ["sm_100f", "sm_103f", "sm_110f", "sm_107f", "sm_100", "sm_120a"])
def test_family_and_other_targets(arch):
    """kind::f8f6f4 compiles for every family (`f`) target; kind::i8 for none of them (FACTS.md); plain sm_100 and
    sm_120a (no tcgen05) reject both."""
    caps = get_profile("nvidia-b200")
    tc = _toolchain_or_skip(arch)
    for a_type in ("e4m3", "s8"):
        p = _plan(caps, a_type, 128)
        src = kernel_source(p, get_backend(caps), caps)
        if arch.endswith("f") and a_type == "e4m3":
            mod = compile_cuda(src, [p.kernel_name], arch, toolchain=tc, cache=False)
            assert "tcgen05.mma.cta_group::1.kind::f8f6f4" in mod.ptx
        else:
            with pytest.raises(CompileError):
                compile_cuda(src, [p.kernel_name], arch, toolchain=tc, cache=False)
