"""CPU: the wgmma WnA16 kernel (sm_90a; f16/bf16 activations x int4 weights dequantized into shared memory) is
planned only where a profile declares wgmma k16 forms and only when opted in, compiles with NVRTC for nvidia-h200
with the intended instruction and no spills, and its shared-memory traffic is emulated in torch: the dequant stage
(which thread reads which 16 bytes of codes, which nibble becomes which 16-bit value, which swizzled address it
writes) produces exactly dequantize(weights) at the addresses the validated wgmma descriptor model reads, and the
whole kernel (copies, dequant, k16 reads, epilogue) matches humming.reference_gemm."""
import functools
import itertools
import re
from dataclasses import replace

import pytest
import torch
from test_wgmma_compile import _read_map, _store_map, make_smem_desc, swz128, wgmma_address  # the W8A8 model

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core import registry
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.wgmma_dequant.layout import (
    pack_int4_k64,
    prepare_wgmma_wna16,
    unpack_int4_k64,
    wgmma_wna16_layout,
)
from humming.core.families.wgmma_dequant.planner import PATH, plan_wna16_wgmma, scale_rows, stage_bytes
from humming.core.problem import Problem
from humming.core.tuning import knobs
from humming.devices.nvidia.common import COMMON
from humming.devices.nvidia.mma_sync import _decode_helper
from humming.errors import ShapeError, UnsupportedOnDevice


@pytest.fixture(autouse=True)
def _dequant_smem_kernel(set_knobs):
    """These tests are about the dequant-smem wgmma kernel; from M = 513 the register-A kernel is the default
    (humming.core.families.register_a, its own compile and GPU tests), so it is switched off here (the knob
    register_a.min_m null)."""
    set_knobs({"register_a.min_m": None})


H200 = "nvidia-h200"
WNA16_KNOB = "wgmma_wna16.enabled"  # WnA16 from M 128 on the wgmma kernels (false: the mma.sync kernels)
DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def _caps(name=H200):
    return api.resolve_profile(name)


def _wgmma_takes(sch, m: int, n: int, k: int, act: str, profile=H200) -> bool:
    """Whether the wgmma WnA16 family takes the problem, asked as humming.plan asks it (registry.refusal)."""
    return registry.refusal("wgmma_dequant", Problem(sch, m, n, k, act), _caps(profile)) is None


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _scheme(group):
    sch = humming.schemes.get("w4a16")
    if group is None:
        return sch.with_(granularity="channel", group_size=None)
    return sch.with_(group_size=group)


def _plan(act="f16", group=128, m=1024, n=1024, k=4096, bn=None, profile=H200):
    lay = wgmma_wna16_layout(_scheme(group), n, k, act)
    return plan_wna16_wgmma(_caps(profile), lay, m, act, scheme="w4a16", bn=bn)


# ----------------------------------------------------------------------------- compile
@pytest.mark.parametrize("group", [128, 32, None], ids=["g128", "g32", "channel"])
@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_compiles_with_wgmma(act, bn, group):
    _need_sm90a()
    caps = _caps()
    p = _plan(act, group, bn=bn)
    assert p.family == "wgmma" and p.path == PATH and p.tiles.bn == bn and p.splits == 1 and p.threads == 256
    assert p.smem_bytes <= caps.limits.smem_per_block_kb * 1024
    assert p.kernel_name.startswith(f"hm_wna16_wgmma_int4_{act}_m128n{bn}k64")
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)", ptx))
    assert shapes == {(f"m64n{bn}k16", "f32", act, act)}
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 1",
                "wgmma.wait_group.sync.aligned 0", "fence.proxy.async.shared::cta", "cp.async.cg.shared.global",
                "lop3.b32", "st.shared.v4.u32"):
        assert ins in ptx, ins
    assert "mma.sync" not in ptx and "tcgen05" not in ptx and "ldmatrix" not in ptx
    assert ("mul.rn.f16x2" in ptx or "fma.rn.bf16x2" in ptx) == (group is not None) or act == "bf16"
    log = mod.log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 255, log
    assert spills and max(spills) == 0, log
    assert "serialized" not in log, log  # ptxas would serialize the wgmmas (accumulators touched in flight)


WGMMA_PROFILES = [c.name for c in list_profiles(include_abstract=False) if c.find_mma(family="wgmma", a_type="f16")]


def test_every_profile_declaring_wgmma_compiles_it():
    """Rule of the HAL: the kernel follows the declaration (H100, H200, H20), not a device name."""
    _need_sm90a()
    assert {"nvidia-h100", "nvidia-h200", "nvidia-h20"} <= set(WGMMA_PROFILES)
    for name in WGMMA_PROFILES:
        for act in ("f16", "bf16"):
            p = _plan(act, 128, m=512, n=2048, k=2048, profile=name)
            _, mod = api.compile_plan(p, _caps(name))
            assert f"wgmma.mma_async.sync.aligned.m64n{p.tiles.bn}k16.f32.{act}.{act}" in mod.ptx


def test_names_and_keys_are_distinct():
    p16, pb = _plan("f16", 128), _plan("bf16", 128)
    p32 = _plan("f16", 32)
    assert len({p16.kernel_name, pb.kernel_name, p32.kernel_name}) == 3
    with knobs.override({WNA16_KNOB: False}):
        tile = humming.plan("w4a16", 1024, 1024, 4096, profile=H200)
    assert tile.family == "mma_sync" and tile.kernel_name != p16.kernel_name and tile.kernel_key != p16.kernel_key
    assert "wgmma" in p16.explain() and PATH in p16.explain()


@pytest.mark.parametrize("profile", ["nvidia-l40s", "nvidia-b300", "nvidia-a100", "nvidia-rtx-5090"])
def test_profiles_without_wgmma_get_no_wgmma_plan(profile, set_knobs):
    lay = wgmma_wna16_layout(_scheme(128), 1024, 2048, "f16")
    with pytest.raises(UnsupportedOnDevice, match="declares no wgmma"):
        plan_wna16_wgmma(_caps(profile), lay, 1024, "f16")
    set_knobs({WNA16_KNOB: True})
    for act in ("f16", "bf16"):
        assert humming.plan("w4a16", 1024, 1024, 2048, profile=profile, act=act).family == "mma_sync"


def test_selection_is_opt_in_and_gated(set_knobs):
    caps = _caps()
    sch = humming.schemes.get("w4a16")
    with knobs.override({WNA16_KNOB: False}):
        assert not _wgmma_takes(sch, 1024, 1024, 2048, "f16")
        assert humming.plan("w4a16", 1024, 1024, 2048, profile=H200).family == "mma_sync"
    assert knobs.value(WNA16_KNOB, caps) is True  # on by default
    set_knobs({WNA16_KNOB: True})
    assert _wgmma_takes(sch, 1024, 1024, 2048, "f16")
    assert _wgmma_takes(sch, 128, 1024, 2048, "bf16")
    assert not _wgmma_takes(sch, 127, 1024, 2048, "f16")  # below one 128-row tile
    assert not _wgmma_takes(sch, 1024, 1088, 2048, "f16")  # N % 128
    assert not _wgmma_takes(sch, 1024, 1024, 2080, "f16")  # K % 64
    for act in ("f16", "bf16"):
        for group in (128, 32, 64, 256, None):
            p = humming.plan(_scheme(group), 1024, 1024, 2048, profile=H200, act=act)
            assert p.family == "wgmma" and p.path == PATH, p.explain()
    assert humming.plan("w4a16", 64, 1024, 2048, profile=H200).family == "mma_sync"
    for other in ("w4a16-zp", "w8a16", "w4a16-fp4", "w2a16"):  # other WnA16 schemes keep the mma.sync kernel
        assert humming.plan(other, 1024, 1024, 2048, profile=H200).family == "mma_sync", other
    assert humming.plan(_scheme(16), 1024, 1024, 2048, profile=H200).family == "mma_sync"  # group 16


def test_plan_refuses_bad_shapes():
    with pytest.raises(ShapeError, match="multiple of 128"):
        _plan(n=1088)
    with pytest.raises(ShapeError, match="multiples of 64"):
        wgmma_wna16_layout(_scheme(32), 1024, 2080, "f16")
    with pytest.raises(UnsupportedOnDevice, match="signed int4"):
        wgmma_wna16_layout(humming.schemes.get("w4a16-zp"), 1024, 2048, "f16")


def test_stage_and_shared_memory_budget():
    for bn, group in itertools.product((128, 256), (32, 128, 0)):
        assert stage_bytes(bn, group) % 1024 == 0
        assert stage_bytes(bn, group) >= 128 * 128 + bn * 32 + scale_rows(group) * bn * 2
    p = _plan("f16", 128, m=4096, n=8192, bn=256)
    assert p.tiles.stages >= 4 and p.smem_bytes <= 227 * 1024


# ----------------------------------------------------------------------------- packing and dequant emulation
def test_packing_round_trip_and_block_order():
    torch.manual_seed(0)
    n, k = 128, 192
    u = torch.randint(0, 16, (n, k))
    words = pack_int4_k64(u)
    assert words.dtype == torch.int32 and words.numel() == n * k // 8
    assert torch.equal(unpack_int4_k64(words, n, k), u)
    # block (na, ka) = 2048 contiguous bytes; row r word w holds k 8w .. 8w+7 (pairs 2J, 2J+1 at bits 4J, 16+4J)
    raw = words.view(torch.uint8).view(-1)
    na, ka, r, w = 1, 2, 37, 5
    word = int(raw[((na * (k // 64) + ka) * 64 + r) * 32 + w * 4:][:4].view(torch.int32)) & 0xFFFFFFFF
    for j, e in itertools.product(range(4), range(2)):
        assert (word >> (4 * j + 16 * e)) & 0xF == u[na * 64 + r, ka * 64 + 8 * w + 2 * j + e]


def _check_kernel_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated kernel; change both together."""
    for text in (
        "const int lrow = tid >> 3, lch = tid & 7;", "const uint32_t lswz = swz128(lrow, lch);",
        "copy_16_async(slot_base + lswz + i * 32 * 128,",
        "copy_16_async(slot_base + A_BYTES + c * 16, b_src + ((size_t)(c >> 7) * (K / 64) + kt) * 2048 + (c & 127) * 16",
        "b_src = reinterpret_cast<const unsigned char*>(B) + (size_t)(n0 / 64) * (K / 64) * 2048",
        "const int c = tid + 256 * i;", "const int n = c >> 1, h = c & 1;", "lds_128(q, raw + c * 16);",
        "uint32_t v = dq_raw(q[j], J);", "v = act2_add(v, zz);", "o[J] = v;",
        "sts_128(bq + swz128(n, 4 * h + j), o[0], o[1], o[2], o[3]);",
        "const uint32_t bq0 = (smem_u32(smem) + 1023u) & ~1023u;", "const uint32_t slot0 = bq0 + BQ * BQ_BYTES;",
        "const uint32_t raw = slot0 + slot * STAGE_BYTES + A_BYTES;", "const uint32_t bq = bq0 + (kt % BQ) * BQ_BYTES;",
        "const uint32_t a_tile = slot0 + (kt % STAGES) * STAGE_BYTES + wg * 64 * 128;",
        "const uint32_t b_tile = bq0 + (kt % BQ) * BQ_BYTES;",
        "desc_a = make_smem_desc(a_tile), desc_b = make_smem_desc(b_tile);",
        "wgmma_k16(acc, desc_a + 2 * ks, desc_b + 2 * ks, 1);",
        "const int row0 = m0 + warp * 16 + (lane >> 2), col0 = n0 + 2 * (lane & 3);",
        "f32x2_to_act2(acc[4 * j] * c0 + b0, acc[4 * j + 1] * c1 + b1)",
        "f32x2_to_act2(acc[4 * j + 2] * c0 + b0, acc[4 * j + 3] * c1 + b1)",
        "uint16_t* const c_row1 = c_row0 + (size_t)8 * N;",
    ):
        assert text in src, text
    if "S_ROWS = 0" not in src:
        for text in ("v = act2_mul(v, ss);", "const uint32_t ss = dup_lo((uint32_t)s16);",
                     "copy_16_async(slot_base + S_OFF + (r * BN + ch * 8) * 2, S + (size_t)"):
            assert text in src, text


@functools.cache
def _swz(r: int, ch: int) -> int:
    return swz128(r, ch)


def _dq_raw_model(decode):
    """dq_raw as the backend spells it: lop3 (a & mask) | magic on the word shifted by J * 4 (parsed from the
    helper text, so a change of the spelling changes the model)."""
    helper = _decode_helper(decode)
    m = re.search(r"lop3_and_or\(w >> \(J \* (\d+)\), 0x([0-9A-F]+)u, 0x([0-9A-F]+)u\)", helper)
    assert m, helper
    assert "lop3.b32 %0, %1, %2, %3, 0xEA" in COMMON  # 0xEA: (a & b) | c
    step, mask, magic = int(m.group(1)), int(m.group(2), 16), int(m.group(3), 16)

    def dq(words: torch.Tensor, j: int) -> torch.Tensor:  # int64 words -> int64 32-bit results
        return ((words >> (j * step)) & mask) | magic

    return dq


def _halves(words: torch.Tensor, dtype) -> torch.Tensor:
    """int64 32-bit words [..., 4] -> the 8 16-bit values of the 16 bytes (little-endian: low half first)."""
    lo, hi = words & 0xFFFF, (words >> 16) & 0xFFFF
    bits = torch.stack([lo, hi], dim=-1).reshape(*words.shape[:-1], 8)
    bits = torch.where(bits >= 32768, bits - 65536, bits)
    return bits.to(torch.int16).view(dtype)


class _Smem:
    """Shared memory as a byte array; every write records its address so that overlaps are errors."""

    def __init__(self, size: int):
        self.data = torch.zeros(size, dtype=torch.uint8)

    def write(self, addr: torch.Tensor, data: torch.Tensor) -> None:  # addr: start of 16-byte pieces
        idx = (addr.reshape(-1, 1) + torch.arange(16)).reshape(-1)
        assert idx.unique().numel() == idx.numel(), "two threads write the same byte"
        self.data[idx] = data.contiguous().view(torch.uint8).reshape(-1)

    def read(self, addr: torch.Tensor, nbytes: int = 16) -> torch.Tensor:  # pieces -> [..., nbytes] bytes
        return self.data[addr.unsqueeze(-1) + torch.arange(nbytes)]


def _dequant_stage(p, packed, smem: _Smem, slot_base: int, bq: int, n0: int, kt: int) -> None:
    """The kernel's load_stage (codes and scales) and dequant_stage for one stage, thread by thread
    (vectorized over raw chunk c = tid + 256 i)."""
    bn, k, act = p.tiles.bn, p.k, p.act
    dtype = DT[act]
    a_bytes, raw_bytes = 128 * 128, bn * 32
    s_off = a_bytes + raw_bytes
    group = p.layout.scale_group
    s_rows = scale_rows(group)
    gbytes = packed.qweight.contiguous().view(torch.uint8).view(-1)
    c = torch.arange(2 * bn)  # tid + 256 * i for i < BN / 128
    # load_stage: cp.async of 16 bytes from b_src + ((c >> 7) * (K/64) + kt) * 2048 + (c & 127) * 16
    src = (n0 // 64) * (k // 64) * 2048 + ((c >> 7) * (k // 64) + kt) * 2048 + (c & 127) * 16
    smem.write(slot_base + a_bytes + c * 16, gbytes[src.unsqueeze(-1) + torch.arange(16)])
    if s_rows:
        table = packed.scales  # [K/group, N]
        sc = torch.arange(s_rows * (bn // 8))
        r, ch = sc // (bn // 8), sc % (bn // 8)
        row = (kt * 64) // group + r if s_rows > 1 else torch.full_like(r, (kt * 64) // group)
        vals = table[row.unsqueeze(-1), n0 + ch.unsqueeze(-1) * 8 + torch.arange(8)]
        smem.write(slot_base + s_off + (r * bn + ch * 8) * 2, vals)
    # dequant_stage
    n, h = c >> 1, c & 1
    q = smem.read(slot_base + a_bytes + c * 16).view(torch.int32).to(torch.int64) & 0xFFFFFFFF  # [2BN, 4]
    dq = _dq_raw_model(p.layout.decode)
    zz = torch.tensor(p.layout.zero_const, dtype=dtype)
    if s_rows:
        srow = h if s_rows == 2 else torch.zeros_like(h)
        s16 = smem.read(slot_base + s_off + (srow * bn + n) * 2, 2).contiguous().view(dtype).reshape(-1)
    for j in range(4):
        raw = torch.stack([dq(q[:, j], jj) for jj in range(4)], dim=-1)  # o[J] before the arithmetic
        v = _halves(raw, dtype)  # [2BN, 8]: 16-bit values in memory order
        v = v + zz  # act2_add: one rounding (exact here)
        if s_rows:
            v = v * s16.unsqueeze(-1)  # act2_mul with dup_lo(s): one rounding to the act type
        smem.write(bq + torch.tensor([_swz(int(nn), int(4 * hh + j)) for nn, hh in zip(n, h)]), v)


def _read_b_tile(smem: _Smem, bq: int, bn: int, dtype) -> torch.Tensor:
    """The [BN, 64] values wgmma reads from dequantized tile bq: 4 k16 steps x 32 bytes per row, through the
    descriptor model of the W8A8 test (rows K-major, 128-byte swizzle)."""
    out = torch.empty(bn, 64, dtype=dtype)
    for ks in range(4):
        addr = _read_map(bn, bq, ks)  # [bn, 32] byte addresses
        out[:, ks * 16:(ks + 1) * 16] = smem.data[addr].contiguous().view(dtype)
    return out


def _expected_tile(packed, n0: int, bn: int, kt: int, dtype) -> torch.Tensor:
    """dequantize(weights) for channels n0 .. n0+BN, k 64kt .. +64, as the kernel computes it: (u - 8) exact, times
    the (prepared) group scale with one rounding to the activation type."""
    n, k = packed.layout.n, packed.layout.k
    u = unpack_int4_k64(packed.qweight, n, k)[n0:n0 + bn, kt * 64:(kt + 1) * 64]
    vals = (u - 8).double()
    group = packed.layout.scale_group
    if group:
        kk = torch.arange(kt * 64, kt * 64 + 64) // group
        vals = vals * packed.scales[kk][:, n0:n0 + bn].t().double()
    return vals.to(dtype)


@pytest.mark.parametrize("group", [128, 32, 256, None], ids=["g128", "g32", "g256", "channel"])
@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_dequant_stage_writes_dequantized_weights_where_wgmma_reads(act, bn, group):
    torch.manual_seed(bn + (group or 7))
    dtype = DT[act]
    n, k = 512, 512
    qw = humming.quantize(torch.randn(n, k) * 0.05, _scheme(group))
    packed = prepare_wgmma_wna16(qw, dtype)
    p = replace(_plan(act, group, m=256, n=n, k=k, bn=bn), layout=packed.layout)
    _check_kernel_indexing(api.source(p, _caps()))
    stages = p.tiles.stages
    bq0, bq_bytes = 1024, bn * 128
    slot0 = bq0 + 3 * bq_bytes
    smem = _Smem(slot0 + stages * stage_bytes(bn, group or 0))
    # reference: the weights as the reference dequantizes them, with the prepared power-of-two shift
    w_ref = qw.dequantize(torch.float64)
    for n0, kt in itertools.product(range(0, n, bn), range(k // 64)):
        slot, bq = kt % stages, bq0 + (kt % 3) * bq_bytes
        smem.data.zero_()
        _dequant_stage(p, packed, smem, slot0 + slot * stage_bytes(bn, group or 0), bq, n0, kt)
        tile = _read_b_tile(smem, bq, bn, dtype)
        want = _expected_tile(packed, n0, bn, kt, dtype)
        assert torch.equal(tile.view(torch.int16), want.view(torch.int16)), (n0, kt)
        # ... and that is the reference's dequantization (up to one 16-bit rounding), the prepared power of two
        # and per-channel scales being applied by the epilogue
        ref = w_ref[n0:n0 + bn, kt * 64:(kt + 1) * 64]
        got = tile.double() * packed.out_scale
        if packed.channel_scale is not None:
            got = got * packed.channel_scale[n0:n0 + bn, None].double()
        tol = 2.0 ** (-10 if act == "f16" else -7)
        assert ((got - ref).abs() <= tol * ref.abs() + 1e-12).all()


def test_dequant_stage_is_bank_conflict_free():
    """Each quarter-warp (8 threads) of a 16-byte shared store writes 8 distinct 16-byte bank groups."""
    for tid0, j in itertools.product(range(0, 256, 8), range(4)):
        groups = set()
        for tid in range(tid0, tid0 + 8):
            n, h = tid >> 1, tid & 1
            groups.add((swz128(n, 4 * h + j) // 16) % 8)
        assert len(groups) == 8


# ----------------------------------------------------------------------------- end-to-end emulation
def _emulate(p, packed, x: torch.Tensor, bias) -> torch.Tensor:
    """The kernel in torch: A tiles staged through the copy-loop addresses, B tiles through the dequant stage,
    every k16 step read back through the descriptor addresses, fp64 products, then the epilogue arithmetic."""
    bn, stages, dtype = p.tiles.bn, p.tiles.stages, DT[p.act]
    m, n, k = p.m, p.n, p.k
    group = p.layout.scale_group
    sb = stage_bytes(bn, group)
    bq0, bq_bytes = 1024, bn * 128
    slot0 = bq0 + 3 * bq_bytes
    smem = _Smem(slot0 + stages * sb)
    a_maps = {s: _store_map(128, slot0 + s * sb) for s in range(stages)}  # [128, 128] byte addresses
    a_reads = {(s, wg, ks): _read_map(64, slot0 + s * sb + wg * 64 * 128, ks)
               for s in range(stages) for wg in range(2) for ks in range(4)}
    out = torch.empty(m, n, dtype=torch.float64)
    for bx, by in itertools.product(range(-(-m // 128)), range(n // bn)):
        m0, n0 = bx * 128, by * bn
        acc = torch.zeros(2, 64, bn, dtype=torch.float64)
        for kt in range(k // 64):
            slot = kt % stages
            tile = torch.zeros(128, 64, dtype=dtype)  # rows past M zero-filled
            rows = x[m0:m0 + 128, kt * 64:(kt + 1) * 64]
            tile[:rows.shape[0]] = rows
            smem.data[a_maps[slot].flatten()] = tile.contiguous().view(torch.uint8).flatten()
            bq = bq0 + (kt % 3) * bq_bytes
            _dequant_stage(p, packed, smem, slot0 + slot * sb, bq, n0, kt)
            for wg, ks in itertools.product(range(2), range(4)):
                a = smem.data[a_reads[(slot, wg, ks)]].contiguous().view(dtype).double()  # [64, 16]
                b = smem.data[_read_map(bn, bq, ks)].contiguous().view(dtype).double()  # [bn, 16]
                acc[wg] += a @ b.t()
        full = acc.reshape(128, bn)[: min(m, m0 + 128) - m0]
        scale = torch.full((bn,), packed.out_scale, dtype=torch.float64)
        if packed.channel_scale is not None:
            scale = scale * packed.channel_scale[n0:n0 + bn].double()
        v = full * scale
        if bias is not None:
            v = v + bias[n0:n0 + bn].double()
        out[m0:m0 + full.shape[0], n0:n0 + bn] = v
    return out


@pytest.mark.parametrize("act,group,bn", [("f16", 128, 128), ("bf16", 32, 256), ("f16", None, 256),
                                          ("bf16", 64, 128)])
def test_emulated_kernel_matches_reference(act, group, bn):
    torch.manual_seed(len(act) + bn)
    dtype = DT[act]
    m, n, k = 200, 256, 256
    bias = torch.randn(n).to(dtype)
    qw = humming.quantize(torch.randn(n, k) * 0.05, _scheme(group), bias=bias)
    packed = prepare_wgmma_wna16(qw, dtype)
    p = replace(_plan(act, group, m=m, n=n, k=k, bn=bn), layout=packed.layout)
    x = torch.randn(m, k).to(dtype)
    out = _emulate(p, packed, x, packed.bias).to(dtype)
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out.double() - ref).norm() / ref.norm())
    assert err < (1e-3 if act == "f16" else 5e-3), err


def test_descriptor_model_is_the_validated_one():
    """The helpers reused from the W8A8 test evaluate the backend's own swz128 / make_smem_desc text."""
    assert swz128(9, 3) == 9 * 128 + ((3 ^ 1) << 4)
    d = make_smem_desc(2048)
    assert wgmma_address(d, 0, 0) == 2048 and wgmma_address(d + 2, 1, 0) == 2048 + 128 + ((2 ^ 1) << 4)
