"""CPU: the register-A wgmma WnA16 kernel (sm_90a, opt-in with HUMMING_WGMMA_RS=1; weights dequantized in registers
as wgmma's A operand, activations the B operand in swizzled shared memory) is planned only when opted in and where a
profile declares wgmma k16 forms, compiles with NVRTC for sm_90a with the register-A form, no ldmatrix, no spills and
no serialized wgmmas, and its addressing is emulated in torch: which global words and table words each lane loads for
its a[] registers (under the m16n8k16 A-fragment semantics that the PTX ISA gives each warp of the warpgroup), which
shared-memory bytes the activation copies write and the B descriptor reads, and the epilogue's (channel, token)
mapping through the staging tile, against humming.reference_gemm."""
import itertools
import re
from dataclasses import replace

import pytest
import torch
from test_wgmma_compile import _read_map, _store_map  # the validated descriptor / swizzle model
from test_wgmma_wna16_compile import _dq_raw_model

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core.common.layout import layout_for, prepare
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.register_a.generator import X16_DECODE
from humming.core.families.register_a.planner import (
    ENV,
    OUT_PAD,
    PATH,
    TMA_ENV,
    layout_refusal,
    plan_wna16_wgmma_rs,
    smem_bytes,
)
from humming.devices.nvidia import backend as nv
from humming.errors import ShapeError, UnsupportedOnDevice

H200 = "nvidia-h200"
DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def _caps(name=H200):
    return api.resolve_profile(name)


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _scheme(name="w4a16", group=128):
    sch = humming.schemes.get(name)
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _plan(act="f16", name="w4a16", group=128, m=1024, n=1024, k=4096, bt=None, profile=H200, tma=None):
    lay = layout_for(_scheme(name, group), n, k, act, caps=_caps(profile))  # tile-major where the profile has wgmma
    return plan_wna16_wgmma_rs(_caps(profile), lay, m, act, scheme=name, bt=bt, tma=tma)


# ----------------------------------------------------------------------------- compile
CASES = [("f16", 256, "w4a16", 128), ("bf16", 128, "w4a16", 128), ("f16", 128, "w4a16", None),
         ("bf16", 256, "w4a16-zp", 128), ("f16", 256, "w4a16-zp", None), ("bf16", 256, "w4a16", None)]


@pytest.mark.parametrize("act,bt,name,group", CASES, ids=[f"{a}-bt{b}-{n}-g{g}" for a, b, n, g in CASES])
def test_compiles_with_register_a_wgmma(act, bt, name, group):
    _need_sm90a()
    caps = _caps()
    p = _plan(act, name, group, bt=bt)
    assert p.family == "wgmma" and p.path == PATH and p.tiles.bm == bt and p.tiles.bn == 128
    assert p.threads == (384 if p.tiles.bulk == 2 else 256)  # the producer warpgroup where tma + setmaxnreg
    assert p.splits == 1 and p.smem_bytes <= caps.limits.smem_per_block_kb * 1024
    assert p.kernel_name.startswith(f"hm_wna16_wgmmars_int4_{act}_m{bt}n128k64")
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    forms = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+) \{[^}]*\}, (\{[^}]*\})?",
                       ptx)
    assert forms and {f[:4] for f in forms} == {(f"m64n{bt}k16", "f32", act, act)}
    # the RS form: A is a brace list of four 32-bit registers, then the B descriptor, scale-d, 1, 1, trans-b 0
    rs = re.findall(r"m64n\d+k16\.f32\.\w+\.\w+ \{[^}]*\}, \{%r\d+, ?%r\d+, ?%r\d+, ?%r\d+\}, %rd\d+, p, 1, 1, 0;", ptx)
    assert len(rs) == len(forms) > 0
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 1",
                "wgmma.wait_group.sync.aligned 0", "fence.proxy.async.shared::cta", _copy_instruction(p),
                "ld.global.nc.L1::no_allocate.v4.u32", "lop3.b32", "st.global.v4.u32",
                # the epilogue's staging: stmatrix where declared (the default), else 16-bit shared stores
                "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" if p.tiles.stsm else "st.shared.u16"):
        assert ins in ptx, ins
    assert p.tiles.stsm == int(caps.memory.stmatrix)
    assert "ldmatrix" not in ptx and "mma.sync" not in ptx and "tcgen05" not in ptx
    log = mod.log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 255, log
    assert spills and max(spills) == 0, log
    assert "serialized" not in log, log  # C7513/C7515: ptxas would serialize the wgmmas


TMA_COPY = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"


def _copy_instruction(p) -> str:
    """The instruction that brings the activation stages in: a TMA tensor copy (tiles.bulk, the default where the
    profile declares tma) or every thread's cp.async."""
    return TMA_COPY if p.tiles.bulk else "cp.async.cg.shared.global"


@pytest.mark.parametrize("form", ["small", "prefill"])
def test_activation_copies_tma_and_cp_async(form, monkeypatch):
    """Both ways of bringing the activations in compile without spills for both forms: TMA by default where the
    profile declares tma and mbarrier (one tensor copy per stage, mbarrier waits, the map a __grid_constant__
    parameter; no per-thread cp.async), HUMMING_WGMMA_RS_TMA=0 or tma=False the cp.async copies; a profile without
    tma gets cp.async by default and a clear refusal when TMA is asked for."""
    _need_sm90a()
    caps = _caps()
    lay = layout_for(_scheme("w4a16", 128), 2048, 4096, "f16")
    small = form == "small"
    m = 64 if small else 1024
    stages = 4 if small else None  # the default rule's stages at 64 tokens
    default = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", small=small, stages=stages)
    monkeypatch.setenv(TMA_ENV, "0")
    off = plan_wna16_wgmma_rs(caps, lay, m, "f16", scheme="w4a16", small=small, stages=stages)
    monkeypatch.delenv(TMA_ENV)
    # (the two-warpgroup form's default TMA variant has a producer warpgroup: bulk 2, see the test below)
    assert default.tiles.bulk == (1 if small else 2) and off.tiles.bulk == 0 and default.kernel_name != off.kernel_name
    assert "TMA tensor-copy" in default.explain() and "cp.async activation" in off.explain()
    for p, copy, absent in ((default, TMA_COPY, "cp.async.cg"), (off, "cp.async.cg.shared.global", "cp.async.bulk")):
        src = api.source(p, caps)
        assert ("__grid_constant__ TmaMap XMAP" in src) == bool(p.tiles.bulk)
        mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
        assert copy in mod.ptx and absent not in mod.ptx
        if p.tiles.bulk:
            assert "mbarrier.try_wait.parity.shared::cta.b64" in mod.ptx and "mbarrier.arrive.expect_tx" in mod.ptx
        assert max(int(v) for v in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log
        assert not re.search(r"C751\d", mod.log), mod.log
    no_tma = replace(caps, memory=replace(caps.memory, tma=False))
    assert plan_wna16_wgmma_rs(no_tma, lay, m, "f16", scheme="w4a16", small=small).tiles.bulk == 0
    with pytest.raises(UnsupportedOnDevice, match="does not declare tma"):
        plan_wna16_wgmma_rs(no_tma, lay, m, "f16", scheme="w4a16", small=small, tma=True)
    assert api.tma_boxes(default) == ((m, 4096, default.tiles.bm, 64, 2), None) and api.tma_boxes(off) == (None, None)


WGMMA_PROFILES = [c.name for c in list_profiles(include_abstract=False) if c.find_mma(family="wgmma", a_type="f16")]


def test_every_profile_declaring_wgmma_compiles_it():
    """Rule of the HAL: the kernel follows the declaration (H100, H200, H20), not a device name."""
    _need_sm90a()
    assert {"nvidia-h100", "nvidia-h200", "nvidia-h20"} <= set(WGMMA_PROFILES)
    for name in WGMMA_PROFILES:
        p = _plan("bf16", "w4a16-zp", 128, m=512, n=2048, k=2048, profile=name)
        _, mod = api.compile_plan(p, _caps(name))
        assert f"wgmma.mma_async.sync.aligned.m64n{p.tiles.bm}k16.f32.bf16.bf16" in mod.ptx


# ----------------------------------------------------------------------------- planning
def test_selection_is_opt_in_and_gated(monkeypatch):
    caps = _caps()
    sch = humming.schemes.get("w4a16")
    monkeypatch.delenv(ENV, raising=False)  # the default: this kernel from M = 513 (2026-12-01), its small form below
    assert not api._wgmma_rs_eligible(caps, sch, 512, 1024, 2048, "f16")
    assert api._wgmma_rs_eligible(caps, sch, 513, 1024, 2048, "f16")
    small = humming.plan("w4a16", 512, 1024, 2048, profile=H200)
    assert small.path == PATH and small.tiles.bn == 64 and small.tiles.bm == 128, small.explain()
    assert humming.plan("w4a16", 513, 1024, 2048, profile=H200).tiles.bn == 128
    assert humming.plan("w4a16", 1024, 1024, 2048, profile=H200).tiles.bn == 128
    for name, group in itertools.product(("w4a16", "w4a16-zp"), (128, None)):  # the GPU-tested layouts
        assert humming.plan(_scheme(name, group), 4096, 1024, 2048, profile=H200).path == PATH, (name, group)
    for group in (64, 256):  # GPU-tested since the third H200 session: the default takes them
        assert humming.plan(_scheme("w4a16", group), 4096, 1024, 2048, profile=H200).path == PATH, group
    assert humming.plan(_scheme("w4a16", 512), 4096, 1024, 2048, profile=H200).path != PATH  # not GPU-tested
    monkeypatch.setenv(ENV, "0")
    assert humming.plan("w4a16", 4096, 1024, 2048, profile=H200).path == "wgmma-dequant-smem"
    assert humming.plan("w4a16", 1023, 1024, 2048, profile=H200).path == "wgmma-dequant-smem"
    assert humming.plan("w4a16", 513, 1024, 2048, profile=H200).path == "wgmma-dequant-smem"
    assert humming.plan("w4a16", 1024, 1024, 2048, profile=H200).path != PATH
    monkeypatch.setenv(ENV, "1")
    for act, name, group in itertools.product(("f16", "bf16"), ("w4a16", "w4a16-zp"), (128, 64, 256, None)):
        p = humming.plan(_scheme(name, group), 1024, 1024, 2048, profile=H200, act=act)
        assert p.family == "wgmma" and p.path == PATH, p.explain()
        assert PATH in p.explain() and ENV in p.explain()
    assert humming.plan("w4a16", 128, 1024, 2048, profile=H200).path == PATH
    monkeypatch.setenv(api.WGMMA_WNA16_ENV, "0")  # keeps the mma.sync kernels, this one too
    assert humming.plan("w4a16", 1024, 1024, 2048, profile=H200).family == "mma_sync"
    monkeypatch.delenv(api.WGMMA_WNA16_ENV)
    assert humming.plan("w4a16", 127, 1024, 2048, profile=H200).tiles.bn == 64  # below one 128-token tile: small form
    assert humming.plan("w4a16", 1024, 1088, 2048, profile=H200).path != PATH  # N % 128
    assert humming.plan(_scheme("w4a16", 32), 1024, 1024, 2048, profile=H200).path == "wgmma-dequant-smem"
    for other in ("w8a16", "w4a16-fp4", "w2a16"):  # not int4: the other kernels
        assert humming.plan(other, 1024, 1024, 2048, profile=H200).path != PATH, other
    for profile in ("nvidia-l40s", "nvidia-a100", "nvidia-b300"):
        assert humming.plan("w4a16", 1024, 1024, 2048, profile=profile).path != PATH


def test_names_are_distinct():
    p = _plan("f16", bt=256)
    q = _plan("bf16", bt=256)
    z = _plan("f16", "w4a16-zp", bt=256)
    assert len({p.kernel_name, q.kernel_name, z.kernel_name}) == 3
    assert p.kernel_name.startswith("hm_wna16_wgmmars_")
    small = humming.plan("w4a16", 512, 1024, 4096, profile=H200)  # the small form (default below 1024)
    assert small.tiles.bn == 64 and small.kernel_key != p.kernel_key and small.kernel_name != p.kernel_name


def test_plan_refuses_what_it_does_not_run():
    caps = _caps()
    with pytest.raises(UnsupportedOnDevice, match="group 32 is not a multiple of 64"):
        plan_wna16_wgmma_rs(caps, layout_for(_scheme("w4a16", 32), 1024, 2048, "f16"), 1024, "f16")
    with pytest.raises(ShapeError, match="multiple of 128"):
        plan_wna16_wgmma_rs(caps, layout_for(_scheme(), 1088, 2048, "f16"), 1024, "f16")
    with pytest.raises(UnsupportedOnDevice, match="4-bit integer"):
        plan_wna16_wgmma_rs(caps, layout_for(humming.schemes.get("w8a16"), 1024, 2048, "f16"), 1024, "f16")
    with pytest.raises(UnsupportedOnDevice, match="declares no wgmma"):
        plan_wna16_wgmma_rs(_caps("nvidia-l40s"), layout_for(_scheme(), 1024, 2048, "f16"), 1024, "f16")
    assert layout_refusal(layout_for(_scheme("w4a16-zp", 128), 1024, 2048, "bf16")) == ""


def test_token_tile_and_shared_memory():
    assert _plan(m=4096, n=8192).tiles.bm == 256
    # 256-token tiles would leave most SMs idle: 128, then fitted to M (two tiles of 100 rows -> 112 each)
    assert _plan(m=200, n=2048).tiles.bm == 112
    assert _plan(m=300, n=8192).tiles.bm == 160  # two 256-token tiles fitted: 2 x 160 rows for 300 tokens
    assert _plan(m=300, n=8192, tma=False).tiles.bm == 160  # the cp.async copies: whole passes of 32 rows
    assert _plan(m=270, n=8192, tma=False).tiles.bm == 160 and _plan(m=270, n=8192).tiles.bm == 144
    assert _plan(m=1100, n=8192).tiles.bm == 224  # 5 tiles of 220 rows -> 224 each (1120 rows, not 1280)
    assert _plan(m=4096, n=8192).tiles.bm == 256 and _plan(m=4100, n=8192).tiles.bm == 256  # 17 x 241.2 -> 256
    for bt in (128, 256):
        p = _plan(m=4096, n=8192, bt=bt)
        assert p.tiles.stages >= 4 and p.smem_bytes == smem_bytes(bt, p.tiles.stages) <= 227 * 1024
        assert bt * (128 + OUT_PAD) * 2 <= p.tiles.stages * bt * 128  # the staging tile fits the slots


# ----------------------------------------------------------------------------- emulation
def _check_kernel_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated kernel; change both together."""
    for text in (
        "const int lrow = tid >> 3, lch = tid & 7;", "const uint32_t lswz = swz128(lrow, lch);",
        "copy_16_async(base + lswz + i * 32 * 128, ok ? a_src + ((size_t)32 * i * K + kt * BK) : A, ok);",
        "const int slab = n0 / 64 + wg;",
        "const uint32_t* wsrc = B + (size_t)slab * ktiles * ATOM_WORDS + w * 128 + lane * 4;",
        "const uint32_t* p = wsrc + (size_t)(", "load_g128(wq[", "], p);",
        "const int tab = slab * 64 + g * 8 + 2 * w;",
        "const uint64_t desc0 = make_smem_desc(x0);",  # slot s's descriptor: desc0 + s * X_BYTES / 16 (no carry)
        "wgmma_k16_rs(acc, a[ks], desc_x + 2 * ks, 1);",
        "const int ch = wg * 64 + w * 16 + 8 * h + g;",
        "f32x2_to_act2(acc[4 * j + 2 * h] * cs + bs, acc[4 * j + 2 * h + 1] * cs + bs);",
        "const uint32_t o = x0 + ((8 * j + 2 * q) * OUT_LD + ch) * 2;",
        "sts_u16(o, (uint16_t)(v & 0xFFFFu));", "sts_u16(o + OUT_LD * 2, (uint16_t)(v >> 16));",
        "const int c = tid + THREADS * i, row = c >> 4, ch = c & 15;",
        "lds_128(r, x0 + (row * OUT_LD + ch * 8) * 2);",
        "store_g128(C + (size_t)(m0 + row) * N + n0 + ch * 8, r);",
    ):
        assert text in src, text
    # slot kt % STAGES: computed, or (a trip of U stages that is whole rounds of the slots, kb a multiple of U) the
    # unrolled stage's constant u % STAGES
    computed = "const uint64_t desc_x = desc0 + (uint64_t)(((unsigned)kt % STAGES) * (X_BYTES >> 4));"
    constant = "const uint64_t desc_x = desc0 + (uint64_t)((u % STAGES) * (X_BYTES >> 4));"
    if constant in src:
        stages = int(re.search(r"STAGES = (\d+);", src).group(1))
        ring = int(re.search(r"constexpr int PF = (\d+), R = PF \+ 1;", src).group(1)) + 1
        trip = int(re.search(r"constexpr int U = (\d+|2 \* R);", src).group(1).replace("2 * R", str(2 * ring)))
        assert trip % stages == 0 and "for (int kb = 0; kb < ktiles; kb += U) {" in src
    else:
        assert computed in src, computed
    if "dq_raw_x16(" in src:  # f16: one shift per word, the odd pair in place as magic + 16 code
        texts = ("const uint32_t wh = wq[s][ks] >> (8 * h);", "const uint32_t zz16 = act2_add(zz, x16_bias);",
                 "act2_add(dq_raw(wh, 0), zz)", "act2_fma(dq_raw_x16(wh), x16_scale, zz16)",  # (x ss where scales)
                 "x16_scale = f32x2_to_act2(0.0625f, 0.0625f);", "x16_bias = f32x2_to_act2(960.0f, 960.0f);")
    else:
        texts = ("uint32_t v = dq_raw(wq[s][ks], 2 * h + r);", "a[ks][r * 2 + h] = v;")
    for text in texts:
        assert text in src, text


def _x16_model():
    """dq_raw_x16 as the backend spells it: lop3 (a & mask) | magic, no shift (parsed from the helper text)."""
    m = re.search(r"lop3_and_or\(w, 0x([0-9A-F]+)u, 0x([0-9A-F]+)u\)", nv.DQ_RAW_X16)
    assert m, nv.DQ_RAW_X16
    mask, magic = int(m.group(1), 16), int(m.group(2), 16)
    return lambda words: (words & mask) | magic


def _act(bits: torch.Tensor, dtype) -> torch.Tensor:
    """int64 16-bit patterns -> values of the activation type."""
    b = torch.where(bits >= 32768, bits - 65536, bits)
    return b.to(torch.int16).view(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF


def _warpgroup_a(p, packed, slab: int, kt: int, ks: int) -> torch.Tensor:
    """The 64 x 16 A operand the warpgroup of 64-channel slab ``slab`` supplies for k16 step ks of stage kt, built
    lane by lane: the global words each lane loads, its table words, dq_raw and the act-typed arithmetic, placed by
    the m16n8k16 A-fragment layout of each warp (rows 16w.., a[0]: row g, k 2q..; a[1]: row g+8; a[2]: k+8)."""
    lay, dtype, n = p.layout, DT[p.act], p.n
    dq = _dq_raw_model(lay.decode)
    ktiles = p.k // 64
    words = packed.qweight.to(torch.int64) & 0xFFFFFFFF
    w_, lane = torch.meshgrid(torch.arange(4), torch.arange(32), indexing="ij")
    g, q = lane // 4, lane % 4
    word = words[(slab * ktiles + kt) * 512 + w_ * 128 + lane * 4 + ks]  # [4 warps, 32 lanes]: chunk w, word ks
    tab = slab * 64 + g * 8 + 2 * w_

    def table_pair(t, group):  # the 32-bit word at t + row * N + tab: (low half, high half)
        row = 0 if group < 0 else kt * 64 // group
        flat = _bits(t.reshape(-1))
        return flat[row * n + tab], flat[row * n + tab + 1]

    s_pair = table_pair(packed.scales, lay.scale_group) if lay.scale_group else None
    z_pair = table_pair(packed.zeros, lay.zero_group) if lay.zero_group else None
    a = torch.full((64, 16), float("nan"), dtype=torch.float64)
    x16 = p.act == "f16" and X16_DECODE and p.tiles.fold != 2
    for h, r in itertools.product(range(2), range(2)):
        # 32-bit: low half k 2q (+8r), high half k 2q + 1; f16: the odd pair unshifted as magic + 16 code
        v = _x16_model()(word >> (8 * h)) if x16 and r == 1 else dq(word, 2 * h + r)
        zz = _act(z_pair[h], dtype) if z_pair else torch.tensor(lay.zero_const, dtype=dtype)
        for half in range(2):
            x = _act((v >> (16 * half)) & 0xFFFF, dtype)
            if x16 and r == 1:  # act2_fma(v, 1/16, zz + 960): exact small integers
                x = (x.float() * 0.0625 + (zz.float() + 960.0).to(dtype).float()).to(dtype)
            else:
                x = (x.float() + zz.float()).to(dtype)  # act2_add: exact small integers
            if s_pair:
                x = (x.float() * _act(s_pair[h], dtype).float()).to(dtype)  # act2_mul: one rounding
            rows = 16 * w_ + g + 8 * h
            cols = 8 * r + 2 * q + half
            assert torch.isnan(a[rows, cols]).all(), "two registers claim one element"
            a[rows, cols] = x.double()
    assert not torch.isnan(a).any()
    return a


def _sts16(p):
    """The plan with the 16-bit staging stores the emulation models (HUMMING_WGMMA_RS_STSM=0)."""
    return replace(p, tiles=replace(p.tiles, stsm=0))


def _emulate(p, packed, x: torch.Tensor) -> torch.Tensor:
    bt, stages, dtype = p.tiles.bm, p.tiles.stages, DT[p.act]
    m, n, k = p.m, p.n, p.k
    x0, x_bytes, ld = 1024, bt * 128, 128 + OUT_PAD
    smem = torch.zeros(x0 + stages * x_bytes, dtype=torch.uint8)
    stores = {s: _store_map(bt, x0 + s * x_bytes) for s in range(stages)}
    reads = {(s, ks): _read_map(bt, x0 + s * x_bytes, ks) for s in range(stages) for ks in range(4)}
    a_cache = {}
    out = torch.full((m, n), float("nan"), dtype=torch.float64)
    for bx, by in itertools.product(range(-(-m // bt)), range(n // 128)):
        m0, n0 = bx * bt, by * 128
        acc = torch.zeros(2, 64, bt, dtype=torch.float64)  # [warpgroup, channel row, token column]
        for kt in range(k // 64):
            slot = kt % stages
            tile = torch.zeros(bt, 64, dtype=dtype)  # rows past M zero-filled
            rows = x[m0:m0 + bt, kt * 64:(kt + 1) * 64]
            tile[:rows.shape[0]] = rows
            smem[stores[slot].flatten()] = tile.contiguous().view(torch.uint8).flatten()
            for wg, ks in itertools.product(range(2), range(4)):
                key = (n0 // 64 + wg, kt, ks)
                if key not in a_cache:
                    a_cache[key] = _warpgroup_a(p, packed, *key)
                b = smem[reads[(slot, ks)]].contiguous().view(dtype).double()  # [bt tokens, 16 k]
                acc[wg] += a_cache[key] @ b.t()
        # epilogue, thread by thread: accumulator fragment -> staging bytes -> 16-byte rows of C
        stage = torch.full((bt * ld,), -1, dtype=torch.int64)  # 16-bit slots of the staging tile
        scale = torch.full((128,), packed.out_scale, dtype=torch.float64)
        if packed.channel_scale is not None:
            scale = scale * packed.channel_scale[n0:n0 + 128].double()
        bias = torch.zeros(128, dtype=torch.float64) if packed.bias is None else packed.bias[n0:n0 + 128].double()
        for wg, w, lane in itertools.product(range(2), range(4), range(32)):
            g, q = lane // 4, lane % 4
            for h in range(2):
                ch = wg * 64 + w * 16 + 8 * h + g
                for j in range(bt // 8):
                    for e in range(2):
                        i = 4 * j + 2 * h + e  # register of the m64nBT D fragment: row 16w + g + 8h, col 8j + 2q + e
                        row, col = 16 * w + g + 8 * ((i % 4) // 2), 8 * (i // 4) + 2 * q + (i % 2)
                        v = torch.tensor(float(acc[wg, row, col] * scale[ch] + bias[ch]), dtype=torch.float64).to(dtype)
                        o = (8 * j + 2 * q) * ld + ch + e * ld  # 16-bit slot (byte address / 2 - x0 / 2)
                        assert stage[o] == -1, "two stores to one staging value"
                        stage[o] = _bits(v.reshape(1))[0]
        for tid, i in itertools.product(range(256), range(bt * 16 // 256)):
            c = tid + 256 * i
            row, ch = c >> 4, c & 15
            vals = stage[row * ld + ch * 8: row * ld + ch * 8 + 8]
            assert (vals >= 0).all(), "the copy-out reads a staging value nobody wrote"
            if m0 + row < m:
                out[m0 + row, n0 + ch * 8: n0 + ch * 8 + 8] = _act(vals, dtype).double()
    return out


@pytest.mark.parametrize("act,name,group,bt", [("f16", "w4a16", 128, 128), ("bf16", "w4a16-zp", 128, 256),
                                               ("f16", "w4a16-zp", None, 128), ("bf16", "w4a16", None, 256),
                                               ("f16", "w4a16", 64, 256)])
def test_emulated_kernel_matches_reference(act, name, group, bt):
    torch.manual_seed(len(act) + bt + (group or 0))
    dtype = DT[act]
    m, n, k = 200, 256, 256 if group != 128 else 384
    bias = torch.randn(n).to(dtype)
    qw = humming.quantize(torch.randn(n, k) * 0.05, _scheme(name, group), bias=bias)
    packed = prepare(qw, dtype, _caps())  # the weights as the H200 gets them (tile-major pair order)
    assert packed.layout.tile_major
    # the emulation models the cp.async copies; a TMA copy writes the same 128-byte-swizzled slot (the map's swizzle
    # mode is this layout by definition, and the GPU tests run both)
    # (the epilogue's 16-bit staging stores: test_wgmma_rs_stsm_compile proves the default stmatrix staging puts every
    # value where they do)
    p = _sts16(replace(_plan(act, name, group, m=m, n=n, k=k, bt=bt, tma=False), layout=packed.layout))
    _check_kernel_indexing(api.source(p, _caps()))
    x = torch.randn(m, k).to(dtype)
    out = _emulate(p, packed, x)
    assert not torch.isnan(out).any()
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out - ref).norm() / ref.norm())
    assert err < (1e-3 if act == "f16" else 5e-3), err


@pytest.mark.parametrize("act,name,group,m,bt", [("f16", "w4a16", 128, 150, 160), ("bf16", "w4a16-zp", None, 90, 96)])
def test_emulated_kernel_with_fitted_tile_matches_reference(act, name, group, m, bt):
    """A token tile fitted to M (not 128 / 256; cp.async copies: whole 32-row passes) indexes its slots, staging tile
    and copy-out like the others: the emulated kernel matches the reference."""
    torch.manual_seed(m + bt)
    dtype = DT[act]
    n, k = 256, 256
    qw = humming.quantize(torch.randn(n, k) * 0.05, _scheme(name, group))
    packed = prepare(qw, dtype, _caps())
    p = _sts16(replace(_plan(act, name, group, m=m, n=n, k=k, bt=256 if m > 128 else 128, tma=False),
                       layout=packed.layout))
    assert p.tiles.bm == bt and any("token tile" in r for r in p.reasons), p.explain()
    _check_kernel_indexing(api.source(p, _caps()))
    x = torch.randn(m, k).to(dtype)
    out = _emulate(p, packed, x)
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32).double()
    assert float((out - ref).norm() / ref.norm()) < (1e-3 if act == "f16" else 5e-3)


def test_prefetch_ring_covers_every_stage():
    """The ring slot arithmetic of the main loop (stage kt in slot (kt % U) % R, atom kt + PF fetched into slot
    ((kt % U) + PF) % R after kt is decoded) never overwrites an atom before it is decoded, for any K."""
    from humming.core.families.register_a.planner import RING_2WG as PF  # noqa: N811 (the kernel's name for it)

    r, u = PF + 1, 2 * (PF + 1)
    for ktiles in range(1, 20):
        slots = {s: s for s in range(min(PF, ktiles))}  # slot -> atom held
        for kb in range(0, ktiles, u):
            for uu in range(u):
                kt = kb + uu
                if kt >= ktiles:
                    break
                s = uu % r
                assert slots.get(s) == kt, (ktiles, kt, slots)
                if kt + PF < ktiles:
                    slots[(s + PF) % r] = kt + PF


# ----------------------------------------------------------------------------- the small-M form
SMALL_CASES = [("f16", 16, 8, 1, "w4a16", 128), ("bf16", 32, 8, 1, "w4a16", 128), ("bf16", 32, 8, 0, "w4a16-zp", 128), ("f16", 64, 4, 0, "w4a16", None),
               ("f16", 128, 6, 0, "w4a16", 128), ("bf16", 16, 6, 2, "w4a16", 64), ("f16", 32, 4, 0, "w4a16-zp", 256)]


@pytest.mark.parametrize("act,bt,stages,fold,name,group", SMALL_CASES,
                         ids=[f"{a}-bt{b}-s{s}-f{f}-{n}-g{g}" for a, b, s, f, n, g in SMALL_CASES])
def test_small_form_compiles(act, bt, stages, fold, name, group):
    """One warpgroup per 64-channel slab, m64nBTk16 with A from registers, split-K fix-up in the kernel (a launch
    argument decides), no spills, no serialized wgmmas (ptxas C7511-C7515) for the configurations the tuner ships."""
    _need_sm90a()
    caps = _caps()
    lay = layout_for(_scheme(name, group), 2048, 4096, act)
    p = plan_wna16_wgmma_rs(caps, lay, bt, act, scheme=name, bt=bt, stages=stages, fold=fold, small=True)
    assert (p.tiles.bn, p.tiles.bm, p.threads, p.tiles.fold) == (64, bt, 128, fold) and p.splits >= 1
    assert p.grid == (1, 2048 // 64, p.splits)
    mod = compile_cuda(api.source(p, caps), [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    forms = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.f32\.(\w+)\.(\w+) \{", ptx))
    assert forms == {(f"m64n{bt}k16", act, act)}, forms
    rs = re.findall(r"m64n\d+k16\.f32\.\w+\.\w+ \{[^}]*\}, \{%r\d+, ?%r\d+, ?%r\d+, ?%r\d+\}, %rd\d+, p, 1, 1, 0;", ptx)
    assert rs  # register A
    for ins in ("atom.global.add.s32", "ld.global.cg.v4.f32", "st.global.v4.f32", "membar.gl", _copy_instruction(p),
                "fence.proxy.async.shared::cta", "st.global.v4.u32"):
        assert ins in ptx, ins  # the split-K fix-up, the activation copies and the staged copy-out
    log = mod.log
    assert max(int(s) for s in re.findall(r"(\d+) bytes spill stores", log)) == 0, log
    assert not re.search(r"C751\d", log), log


def test_small_form_default_rule():
    """small_default: M 9-1023 take the small form on the H200 profile
    (this machine has no GPU to say it runs elsewhere); fold=1 up to 32 tokens; 128-token tiles above 64; split-K
    fills the SMs; non-int4 layouts and profiles without wgmma keep the mma.sync kernels."""
    from humming.core.families.register_a.planner import SMALL_MAX_BT, small_default

    caps = _caps()
    narrow, wide = layout_for(_scheme(), 4096, 4096, "f16"), layout_for(_scheme(), 28672, 8192, "f16")
    assert small_default(caps, narrow, 8, "f16") is None  # below SMALL_MIN_M: the stream kernel
    p16 = small_default(caps, narrow, 16, "f16")
    assert p16 is not None and p16.tiles.bm == 16 and p16.tiles.fold == 1 and p16.splits == 8
    assert small_default(caps, wide, 16, "f16").tiles.bm == 16  # wide layers too (measured faster with TMA)
    p40 = small_default(caps, wide, 40, "f16")
    assert p40.tiles.bm == 48 and p40.tiles.fold == 0 and p40.tiles.stages == 4
    p700 = small_default(caps, narrow, 700, "f16")
    assert p700.tiles.bm == SMALL_MAX_BT and p700.grid[0] == 6 and p700.tiles.stages == 6
    assert small_default(caps, narrow, 1024, "f16") is None  # the two-warpgroup form's range
    zp = layout_for(_scheme("w4a16-zp", 128), 4096, 4096, "f16")
    assert small_default(caps, zp, 32, "f16").tiles.fold == 0  # fold=1 would spill there
    assert small_default(caps, zp, 16, "f16").tiles.fold == 1
    assert small_default(caps, layout_for(humming.schemes.get("w8a16"), 4096, 4096, "f16"), 40, "f16") is None
    assert small_default(_caps("nvidia-a100"), narrow, 40, "f16") is None


def test_small_form_defaults_do_not_spill():
    """Every configuration small_default picks for the layouts the kernel runs compiles without spills or serialized
    wgmmas (fold=1 is left out where it would spill)."""
    from humming.core.families.register_a.planner import small_default

    _need_sm90a()
    caps = _caps()
    names = ["w4a16", "w4a16-zp", "w4a16[group_size=-1]", "w4a16-zp[group_size=-1]", "w4a16[group_size=64]",
             "w4a16[group_size=256]", "w4a16-zp[group_size=256]"]
    for name, m in itertools.product(names, (16, 32, 64, 128)):
        p = small_default(caps, layout_for(humming.schemes.get(name), 4096, 4096, "f16"), m, "f16", name)
        mod = compile_cuda(api.source(p, caps), [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",))
        assert max(int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, (name, m, mod.log)
        assert not re.search(r"C751\d", mod.log), (name, m, mod.log)


def test_prefill_form_producer_warpgroup(monkeypatch):
    """The two-warpgroup form's default where the profile declares tma and setmaxnreg: a producer warpgroup (384
    threads) issues the tensor copies; no block barrier in the main loop (named barrier 1 for the consumers' epilogue);
    HUMMING_WGMMA_RS_WS=0 keeps thread 0's copies and the per-stage barrier. Both compile without spills at 256 tokens."""
    _need_sm90a()
    monkeypatch.setenv("HUMMING_WGMMA_RS_CLUSTER", "0")  # (the unpaired form; pairs: test_wgmma_rs_pair_cluster_compile)
    caps = _caps()
    lay = layout_for(_scheme("w4a16-zp", 128), 2048, 4096, "bf16")
    ws = plan_wna16_wgmma_rs(caps, lay, 4096, "bf16", scheme="w4a16-zp", bt=256, small=False)
    monkeypatch.setenv("HUMMING_WGMMA_RS_WS", "0")
    plain = plan_wna16_wgmma_rs(caps, lay, 4096, "bf16", scheme="w4a16-zp", bt=256, small=False)
    assert (ws.tiles.bulk, ws.threads, plain.tiles.bulk, plain.threads) == (2, 384, 1, 256)
    assert any("producer warpgroup" in r for r in ws.reasons)
    src = api.source(ws, caps)
    loop = src[src.index("for (int kb = 0"):src.index("wgmma_wait<0>();\n  wgmma_fence_operand(acc);")]
    assert "__syncthreads" not in loop and "mbar_arrive(" in loop and "load_stage" not in loop
    assert "consumer_sync();" in src and "setmaxnreg_inc<232>();" in src
    # the producer thread sleeps between polls of a slot's release (its polling took the consumers' issue slots)
    assert "mbar_wait_polite(xbar0 + 8 * (STAGES + s)" in src and "__nanosleep(64);" in src
    assert "mbar_wait_polite" not in api.source(plain, caps)
    for p in (ws, plain):
        mod = compile_cuda(api.source(p, caps), [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
        assert max(int(v) for v in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log
        assert not re.search(r"C75\d\d", mod.log), mod.log
    assert "bar.sync 1, 256" in compile_cuda(src, [ws.kernel_name], "sm_90a", cache=False).ptx


@pytest.mark.parametrize("stagger_env", ["", "0"])
def test_two_warpgroup_form_staggered_start(stagger_env, monkeypatch):
    """The two-warpgroup form with its producer warpgroup starts warpgroup 1 one wgmma group behind warpgroup 0
    (TileConfig.stagger, named barrier 2: bar.arrive by warpgroup 0 after its first commit, bar.sync by warpgroup 1
    before its loop); HUMMING_WGMMA_STAGGER=0 turns it off. It compiles without spills or serialized wgmmas; the small
    form never staggers."""
    if stagger_env:
        monkeypatch.setenv("HUMMING_WGMMA_STAGGER", stagger_env)
    else:
        monkeypatch.delenv("HUMMING_WGMMA_STAGGER", raising=False)
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    caps = api.resolve_profile(H200)
    lay = layout_for(humming.schemes.get("w4a16"), 8192, 8192, "f16")
    p = plan_wna16_wgmma_rs(caps, lay, 4096, "f16", scheme="w4a16")
    on = stagger_env != "0"
    assert p.tiles.bulk == 2 and p.tiles.stagger == int(on) and ("staggered start" in p.explain()) == on
    src = api.source(p, caps)
    assert ("if (wg == 1) consumer_turn_take();" in src) == on and ("consumer_turn_give();" in src) == on
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    assert ("bar.arrive 2, 256" in mod.ptx) == on and ("bar.sync 2, 256" in mod.ptx) == on
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
    assert spills and max(spills) == 0 and "serialized" not in mod.log, mod.log
    small = plan_wna16_wgmma_rs(caps, lay, 32, "f16", scheme="w4a16")
    assert small.tiles.stagger == 0


def test_two_warpgroup_form_rasterized(monkeypatch):
    """HUMMING_WGMMA_RS_RASTER: the two-warpgroup form takes its tiles in groups of token tiles (the block -> tile
    statements shared with the register-A W4A8 kernel, whose test evaluates them), compiles without spills; the
    small form (split-K over the grid's z) never rasterizes, and its generator refuses a plan that asks."""
    from humming.core.families.register_a.generator import TILE_IN_LAUNCH_ORDER, TILE_RASTERIZED

    _need_sm90a()
    monkeypatch.setenv("HUMMING_WGMMA_RS_CLUSTER", "0")  # (the unpaired form's block -> tile map; pairs map their own)
    monkeypatch.setenv("HUMMING_WGMMA_RS_RASTER", "3")
    p = _plan(m=4096, n=8192, k=4096)
    assert p.tiles.bn == 128 and p.tiles.raster == 3 and "rasterized in groups of 3" in p.explain()
    src = api.source(p, _caps())
    assert TILE_RASTERIZED in src and TILE_IN_LAUNCH_ORDER not in src and "constexpr int RASTER = 3;" in src
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
    assert spills and max(spills) == 0, mod.log
    small = _plan(m=64, n=8192, k=4096, bt=64)
    assert small.tiles.raster == 0
    with pytest.raises(ValueError, match="rasterization"):
        api.source(replace(small, tiles=replace(small.tiles, raster=3)), _caps())
    monkeypatch.setenv("HUMMING_WGMMA_RS_RASTER", "0")
    p0 = _plan(m=4096, n=8192, k=4096)
    assert p0.tiles.raster == 0 and TILE_IN_LAUNCH_ORDER in api.source(p0, _caps())
    monkeypatch.setenv("HUMMING_WGMMA_RS_RASTER", "x")
    with pytest.raises(ValueError, match="HUMMING_WGMMA_RS_RASTER"):
        _plan(m=4096, n=8192, k=4096)


def test_weight_ring_depth():
    """How many weight atoms each lane keeps in flight: the small form's ring follows its activation stages, and goes
    to DEEP_RING_PF atoms with registers for 2 blocks per SM where shared memory holds only 2 (128 tokens x 6
    stages); the two-warpgroup form keeps RING_2WG atoms at every M. The generated kernels say so and compile without
    spills."""
    from humming.core.families.register_a.planner import DEEP_RING_PF, RING_2WG, small_ring

    caps = _caps()
    assert small_ring(caps, 128, 6) == (DEEP_RING_PF, 2)  # 97 KiB of stages: 2 blocks per SM
    assert small_ring(caps, 128, 4) == (2, 3) and small_ring(caps, 64, 4) == (3, 4) and small_ring(caps, 16, 8) == (7, 4)
    assert small_ring(caps, 128, 6, cluster=2) == (4, 2) and small_ring(caps, 16, 8, cluster=4) == (7, 3)
    _need_sm90a()
    lay = layout_for(_scheme(), 8192, 8192, "f16")
    deep = plan_wna16_wgmma_rs(caps, lay, 128, "f16", scheme="w4a16", bt=128, stages=6, small=True)
    assert f"{DEEP_RING_PF} atoms ahead" in deep.explain()
    below = plan_wna16_wgmma_rs(caps, lay, 256, "f16", scheme="w4a16", bt=128, small=False)
    at = plan_wna16_wgmma_rs(caps, lay, 1024, "f16", scheme="w4a16", bt=128, small=False)
    assert below.tiles.prefetch == at.tiles.prefetch == RING_2WG and re.search(rf"p{RING_2WG}m?_", below.kernel_name)
    for p, pf, bounds in ((deep, DEEP_RING_PF, "THREADS, 2"), (below, RING_2WG, "BLOCK_THREADS, 1"),
                          (at, RING_2WG, "BLOCK_THREADS, 1")):
        src = api.source(p, caps)
        assert f"constexpr int PF = {pf}, R = PF + 1;" in src and f"__launch_bounds__(cfg::{bounds})" in src
        mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",))
        assert max(int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log
        assert not re.search(r"C751\d", mod.log), mod.log


def _smem_desc(addr: int) -> int:  # make_smem_desc of the nvidia backend, in Python
    return ((addr & 0x3FFFF) >> 4) | (1 << 16) | ((1024 >> 4) << 32) | (1 << 62)


@pytest.mark.parametrize("x_bytes,stages", [(16384, 6), (32768, 4), (32768, 5), (8192, 6), (2048, 4)])
def test_slot_descriptor_is_slot_zeros_plus_the_offset(x_bytes, stages):
    """The kernels add a slot's offset / 16 to slot 0's descriptor (desc0) instead of building each slot's: the same
    64-bit value wherever the slots lie in the 228 KB shared window (the start-address field has 14 bits: no carry)."""
    for x0 in range(0, 228 * 1024 - stages * x_bytes + 1, 1024):
        for s in range(stages):
            assert _smem_desc(x0) + s * (x_bytes >> 4) == _smem_desc(x0 + s * x_bytes), (x0, s)
