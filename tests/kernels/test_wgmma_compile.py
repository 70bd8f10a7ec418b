"""CPU: the wgmma W8A8 kernel (sm_90a) is planned only where a profile declares wgmma, compiles with NVRTC for
nvidia-h200 with the intended instruction and sane register use, and its shared-memory addressing (copy loop
with the 128-byte swizzle vs the wgmma descriptor + the PTX canonical K-major layout) and accumulator fragment
are emulated in torch, end to end against the reference."""
import itertools
import re

import pytest
import torch

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core import registry
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout, prepare_w8a8_wgmma
from humming.core.families.wgmma_8bit.planner import WS_KNOB, plan_w8a8_wgmma
from humming.core.problem import Problem
from humming.core.tuning import knobs
from humming.devices.nvidia import convert, wgmma
from humming.errors import UnsupportedOnDevice


@pytest.fixture(autouse=True)
def _lock_step_w4a8(set_knobs):
    """These tests read the lock-step W4A8 kernel (256 threads, one block barrier per stage); the
    warp-specialised one, the default where mbarrier and setmaxnreg are declared, has test_wgmma_8bit_variants."""
    set_knobs({WS_KNOB: False})


H200 = "nvidia-h200"
ACC = {"e4m3": "f32", "s8": "s32"}
NATIVE = humming.GemmOptions(act_widen=False)  # the native 8-bit kernels (not the widened weight-only path)
WGMMA_KNOB = "wgmma_8bit.enabled"  # W8A8 / W4A8 from M 64 on the wgmma kernels (false: mma.sync)


def _caps(name=H200):
    return api.resolve_profile(name)


def _wgmma_takes(sch, m: int, n: int, k: int, profile=H200) -> bool:
    """Whether the wgmma 8-bit family takes the problem, asked as humming.plan asks it (registry.refusal)."""
    return registry.refusal("wgmma_8bit", Problem(sch, m, n, k, options=NATIVE), _caps(profile)) is None


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


# (M, N) that make the planner choose BN = 128 and BN = 256
BN_CASES = {128: (64, 1024), 256: (4096, 8192)}


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("bn", [128, 256])
@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
def test_compiles_with_wgmma(a_type, bn, act):
    _need_sm90a()
    caps = _caps()
    m, n = BN_CASES[bn]
    fast = a_type == "e4m3" and bn == 256  # promoted e4m3 (the default) runs BN=128 only (registers)
    p = plan_w8a8_wgmma(caps, WgmmaW8A8Layout(a_type, n, 4096, "channel", fast_accum=fast), m, act, scheme="w8a8", tma=False)
    assert p.family == "wgmma" and p.tiles.bn == bn and p.splits == 1 and p.threads == 256
    assert p.smem_bytes <= caps.limits.smem_per_block_kb * 1024
    assert "wgmma" in p.kernel_name and "wgmma" in p.explain()
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    t = a_type
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)", ptx))
    assert shapes == {(f"m64n{bn}k32", ACC[a_type], t, t)}
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0",
                "fence.proxy.async.shared::cta", "cp.async.cg.shared.global"):
        assert ins in ptx, ins
    assert "mma.sync" not in ptx and "tcgen05" not in ptx and "ldmatrix" not in ptx
    log = mod.log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 255, log
    assert spills and max(spills) <= 64, log  # BN=256 holds 128 accumulators per thread: at most a few words spill
    if bn == 128:
        assert max(spills) == 0, log
    src_promotes = "facc[i] += acc[i]" in src
    assert src_promotes == (a_type == "e4m3" and not fast)
    assert ("wgmma.wait_group.sync.aligned 1" in ptx) == (not src_promotes)
    assert "serialized" not in log, log  # ptxas would serialize the wgmmas (accumulators touched in flight)


WGMMA_PROFILES = [c.name for c in list_profiles(include_abstract=False) if c.find_mma(family="wgmma")]


def test_every_profile_declaring_wgmma_compiles_it():
    """Rule of the HAL: the kernel follows the declaration (H100, H200, H20), not a device name."""
    _need_sm90a()
    assert {"nvidia-h100", "nvidia-h200", "nvidia-h20"} <= set(WGMMA_PROFILES)
    for name in WGMMA_PROFILES:
        caps = _caps(name)
        for a_type in ("e4m3", "s8"):
            p = plan_w8a8_wgmma(caps, WgmmaW8A8Layout(a_type, 2048, 2048, "tensor"), 512, "bf16")
            _, mod = api.compile_plan(p, caps)
            assert f"wgmma.mma_async.sync.aligned.m64n{p.tiles.bn}k32.{ACC[a_type]}.{a_type}.{a_type}" in mod.ptx


def test_compiles_through_the_api_cache_and_names():
    _need_sm90a()
    caps = _caps()
    p = plan_w8a8_wgmma(caps, WgmmaW8A8Layout("e4m3", 1024, 2048, "channel"), 200, "f16", scheme="w8a8-fp8")
    kernel, mod = api.compile_plan(p, caps)
    assert mod.kernel_names == (p.kernel_name,) and p.kernel_name.startswith("hm_w8a8_wgmma_e4m3_f16_m128n128k128")
    q = plan_w8a8_wgmma(caps, WgmmaW8A8Layout("s8", 1024, 2048, "channel"), 200, "f16", scheme="w8a8-int8")
    assert q.kernel_name != p.kernel_name and q.kernel_key != p.kernel_key


@pytest.mark.parametrize("profile", ["nvidia-l40s", "nvidia-b300", "nvidia-a100", "nvidia-rtx-5090"])
def test_profiles_without_wgmma_get_no_wgmma_plan(profile, set_knobs):
    caps = _caps(profile)
    with pytest.raises(UnsupportedOnDevice, match="declares no wgmma"):
        plan_w8a8_wgmma(caps, WgmmaW8A8Layout("e4m3", 1024, 2048, "channel"), 1024, "f16")
    set_knobs({WGMMA_KNOB: True})
    for scheme in ("w8a8-int8", "w8a8-fp8"):
        try:
            p = humming.plan(scheme, 1024, 1024, 2048, profile=profile)
        except UnsupportedOnDevice:
            continue
        assert p.family in ("mma_sync", "tcgen05")  # B300 W8A8-FP8 plans the (gated) tcgen05 kernel; never wgmma


def test_selection_is_opt_in_and_gated(set_knobs):
    caps = _caps()
    sch = humming.schemes.get("w8a8-fp8")
    with knobs.override({WGMMA_KNOB: False}):
        assert not _wgmma_takes(sch, 1024, 1024, 2048)
        assert humming.plan("w8a8-fp8", 1024, 1024, 2048, profile=H200).family == "mma_sync"
    assert knobs.value(WGMMA_KNOB, caps) is True  # on by default
    set_knobs({WGMMA_KNOB: True})
    assert _wgmma_takes(sch, 1024, 1024, 2048)
    assert not _wgmma_takes(sch, 63, 1024, 2048)  # decode-sized M stays on mma.sync
    assert not _wgmma_takes(sch, 1024, 1088, 2048)  # N % 128
    assert not _wgmma_takes(sch, 1024, 1024, 2112)  # K % 128
    for scheme in ("w8a8-fp8", "w8a8-int8", "w8a8-fp8-tensor"):
        p = humming.plan(scheme, 1024, 1024, 2048, profile=H200)
        assert p.family == "wgmma", p.explain()
    assert humming.plan("w8a8-fp8", 16, 1024, 2048, profile=H200).family == "mma_sync"
    w4 = humming.schemes.get("w4a8-int8")  # W4A8 runs on the wgmma kernel too (packed int4 widened in smem)
    assert _wgmma_takes(w4, 1024, 1024, 2048)


def test_plan_refuses_bad_shapes():
    caps = _caps()
    with pytest.raises(humming.ShapeError, match="multiple of 128"):
        plan_w8a8_wgmma(caps, WgmmaW8A8Layout("s8", 1024, 2112, "channel"), 128, "f16")
    with pytest.raises(humming.ShapeError, match="multiple of 128"):
        plan_w8a8_wgmma(caps, WgmmaW8A8Layout("s8", 1088, 2048, "channel"), 128, "f16")


# ----------------------------------------------------------------------------- emulation of the addressing
def _c_expr(helper: str, fn: str) -> str:
    """The return expression of a one-line C helper of the backend, as Python (casts and suffixes removed)."""
    m = re.search(fn + r"\([^)]*\)\s*\{\s*return (.*?);\s*\}", helper, re.S)
    assert m, fn
    expr = re.sub(r"\((uint64_t|uint32_t)\)", "", m.group(1))
    return re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)u\b", r"\1", expr)


def swz128(r: int, ch: int) -> int:
    return eval(_c_expr(wgmma.WGMMA_COMMON, "swz128"), {"r": r, "ch": ch})  # noqa: S307 (our own helper text)


def make_smem_desc(addr: int) -> int:
    return eval(_c_expr(wgmma.WGMMA_COMMON, "make_smem_desc"), {"addr": addr})  # noqa: S307


def wgmma_address(desc: int, row: int, kb: int) -> int:
    """Shared-memory byte that wgmma reads for (row, k byte kb) of a K-major 8-bit operand, from the descriptor
    (PTX ISA: start address, stride byte offset between 8-row groups, 128-byte swizzle mode, base offset 0):
    canonical layout row -> (row // 8) * SBO + (row % 8) * 128, k contiguous inside the 128-byte row, then the
    128-byte swizzle on the address (16-byte chunk bits 4-6 XOR row-in-pattern bits 7-9, 1024-byte period)."""
    start = (desc & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    assert desc >> 62 == 1, "128-byte swizzle"
    assert (desc >> 49) & 7 == 0, "base offset 0: the pattern starts at a 1024-byte boundary"
    assert 0 <= kb < 32 and (start % 128) + kb < 128, "a k32 step stays inside its 128-byte row"
    logical = start + (row // 8) * sbo + (row % 8) * 128 + kb
    return logical ^ (((logical >> 7) & 7) << 4)


def _check_kernel_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated kernel; change both together."""
    for text in ("const int lrow = tid >> 3, lch = tid & 7;", "const uint32_t lswz = swz128(lrow, lch);",
                 "copy_16_async(a_tile + i * 32 * 128,", "copy_16_async(b_tile + i * 32 * 128,",
                 "smem0 + stage * STAGE_BYTES + lswz, b_tile = a_tile + A_BYTES",
                 "(kt % STAGES) * STAGE_BYTES + wg * 64 * 128", "(kt % STAGES) * STAGE_BYTES + A_BYTES",
                 "desc_a = make_smem_desc(a_tile), desc_b = make_smem_desc(b_tile)",
                 "wgmma_k32(acc, desc_a + 2 * ks, desc_b + 2 * ks, ", "(smem_u32(smem) + 1023u) & ~1023u",
                 "const int row0 = m0 + warp * 16 + (lane >> 2);", "acc[4 * j + 2 * h]", "acc[4 * j + 2 * h + 1]",
                 "const int col = n0 + 8 * j + 2 * (lane & 3);"):
        assert text in src, text


def _store_map(rows: int, tile_base: int) -> torch.Tensor:
    """[rows, 128] shared-memory address written for byte (row, k) of a tile by the kernel's copy loop."""
    out = torch.full((rows, 128), -1, dtype=torch.int64)
    for tid in range(256):
        lrow, lch = tid >> 3, tid & 7
        lswz = swz128(lrow, lch)
        for i in range(rows // 32):
            for b in range(16):
                assert out[lrow + 32 * i, lch * 16 + b] == -1
                out[lrow + 32 * i, lch * 16 + b] = tile_base + lswz + i * 32 * 128 + b
    assert (out >= 0).all()
    return out


def _read_map(rows: int, tile_base: int, ks: int) -> torch.Tensor:
    """[rows, 32] address wgmma reads for (row, k byte) of k32 step ks (descriptor + 2 * ks, as the kernel)."""
    desc = make_smem_desc(tile_base) + 2 * ks
    return torch.tensor([[wgmma_address(desc, r, kb) for kb in range(32)] for r in range(rows)], dtype=torch.int64)


def test_descriptor_helper_bits():
    d = make_smem_desc(0x12400)
    assert d & 0x3FFF == 0x12400 >> 4
    assert (d >> 16) & 0x3FFF == 1  # leading byte offset: unused for swizzled K-major, 1 by convention
    assert (d >> 32) & 0x3FFF == 1024 >> 4
    assert (d >> 49) & 7 == 0 and d >> 62 == 1
    assert d & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (7 << 49) | (3 << 62)) == 0
    assert make_smem_desc(0x12400) + 2 == make_smem_desc(0x12400 + 32)  # the k32 advance


@pytest.mark.parametrize("bn,stages", [(128, 6), (256, 4)])
def test_copy_loop_and_wgmma_descriptor_address_the_same_bytes(bn, stages):
    """For every (row, k byte) of the A and B tiles of every stage and k32 step: the byte the copy loop wrote is
    the byte the wgmma descriptor makes the tensor core read; and no two bytes collide."""
    caps = _caps()
    m, n = BN_CASES[bn]
    p = plan_w8a8_wgmma(caps, WgmmaW8A8Layout("s8", n, 4096, "channel"), m, "f16")
    assert (p.tiles.bn, p.tiles.stages) == (bn, stages)
    _check_kernel_indexing(api.source(p, caps))
    a_bytes, stage_bytes = 128 * 128, 128 * 128 + bn * 128
    smem0 = 5 * 1024  # any 1024-byte aligned base (the kernel rounds the dynamic shared memory up)
    seen = set()
    for stage in range(stages):
        base = smem0 + stage * stage_bytes
        a_store, b_store = _store_map(128, base), _store_map(bn, base + a_bytes)
        addrs = set(a_store.flatten().tolist()) | set(b_store.flatten().tolist())
        assert len(addrs) == (128 + bn) * 128 and not (addrs & seen)
        assert min(addrs) == base and max(addrs) == base + stage_bytes - 1
        seen |= addrs
        for ks in range(4):
            for wg in range(2):
                a_read = _read_map(64, base + wg * 64 * 128, ks)
                assert torch.equal(a_read, a_store[wg * 64:(wg + 1) * 64, ks * 32:(ks + 1) * 32])
            b_read = _read_map(bn, base + a_bytes, ks)
            assert torch.equal(b_read, b_store[:, ks * 32:(ks + 1) * 32])
    assert max(seen) < smem0 + p.smem_bytes - 1024 + 1


def _ptx_d_fragment(warp: int, lane: int, i: int) -> tuple[int, int]:
    """(row, col) in the m64nN tile of accumulator register d[i] of a thread (PTX ISA, wgmma D fragment):
    warp w of the warpgroup holds rows 16w..16w+15; register i: n8 chunk i // 4, row +8 when (i // 2) % 2."""
    return 16 * warp + lane // 4 + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * (lane % 4) + (i & 1)


@pytest.mark.parametrize("bn", [128, 256])
def test_epilogue_reads_the_accumulator_fragment(bn):
    """The epilogue's (row, col) of acc[4j + 2h + e] is the PTX fragment's, and the 256 threads cover the
    128 x BN tile exactly once."""
    cover = torch.zeros(128, bn, dtype=torch.int64)
    for warp, lane, j, h, e in itertools.product(range(8), range(32), range(bn // 8), range(2), range(2)):
        row = warp * 16 + (lane >> 2) + 8 * h  # kernel: row0 + 8h (m0 = 0); warp 4..7 = rows 64.. (warpgroup 1)
        col = 8 * j + 2 * (lane & 3) + e
        r, c = _ptx_d_fragment(warp % 4, lane, 4 * j + 2 * h + e)
        assert (row, col) == (64 * (warp // 4) + r, c)
        cover[row, col] += 1
    assert (cover == 1).all()


def _emulate(p, packed, codes: torch.Tensor, ts, gs, dec) -> torch.Tensor:
    """The kernel in torch: tiles staged into a byte array through the copy-loop addresses, each k32 step read
    back through the descriptor addresses, fp64 products, then the epilogue arithmetic."""
    bn, stages = p.tiles.bn, p.tiles.stages
    m, n, k = p.m, p.n, p.k
    a_bytes, stage_bytes = 128 * 128, 128 * 128 + bn * 128
    smem0 = 1024
    smem = torch.zeros(smem0 + stages * stage_bytes, dtype=torch.uint8)
    maps = {}
    for s in range(stages):
        base = smem0 + s * stage_bytes
        maps[s] = (_store_map(128, base), _store_map(bn, base + a_bytes),
                   [[_read_map(64, base + wg * 64 * 128, ks) for ks in range(4)] for wg in range(2)],
                   [_read_map(bn, base + a_bytes, ks) for ks in range(4)])
    w = packed.qweight
    out = torch.empty(m, n, dtype=torch.float64)
    for bx, by in itertools.product(range(-(-m // 128)), range(n // bn)):
        acc = torch.zeros(2, 64, bn, dtype=torch.float64)
        for kt in range(k // 128):
            a_st, b_st, a_rd, b_rd = maps[kt % stages]
            tile = torch.zeros(128, 128, dtype=torch.uint8)  # rows past M zero-filled
            rows = codes[bx * 128:(bx + 1) * 128, kt * 128:(kt + 1) * 128]
            tile[:rows.shape[0]] = rows
            smem[a_st.flatten()] = tile.flatten()
            smem[b_st.flatten()] = w[by * bn:(by + 1) * bn, kt * 128:(kt + 1) * 128].flatten()
            for wg, ks in itertools.product(range(2), range(4)):
                a = dec(smem[a_rd[wg][ks]])
                b = dec(smem[b_rd[ks]])
                acc[wg] += a @ b.t()
        full = acc.reshape(128, bn)
        rows = slice(bx * 128, min(m, (bx + 1) * 128))
        cols = slice(by * bn, (by + 1) * bn)
        scale = p_out_scale = packed.out_scale * (float(gs) if gs is not None else 1.0)
        v = full[: rows.stop - rows.start] * (scale if ts is None else ts[rows, None].double() * p_out_scale)
        if packed.channel_scale is not None:
            v = v * packed.channel_scale[cols].double()
        if packed.bias is not None:
            v = v + packed.bias[cols].double()
        out[rows, cols] = v
    return out


@pytest.mark.parametrize("scheme,bn", [("w8a8-fp8", 128), ("w8a8-int8", 128), ("w8a8-int8", 256),
                                       ("w8a8-fp8-tensor", 128)])
def test_emulated_kernel_matches_reference(scheme, bn):
    sch = humming.schemes.get(scheme)
    torch.manual_seed(bn + len(scheme))
    m, n, k = 200, 512, 256
    bias = torch.randn(n).to(torch.float16)
    qw = humming.quantize(torch.randn(n, k) * 0.05, sch, bias=bias)
    a_type = "s8" if sch.act == "int8" else "e4m3"
    packed = prepare_w8a8_wgmma(qw, torch.float16, a_type)
    assert packed.qweight.shape == (n, k) and packed.qweight.dtype == torch.uint8
    caps = _caps()
    p = plan_w8a8_wgmma(caps, packed.layout, m, "f16", scheme=scheme, tma=False)
    if p.tiles.bn != bn:  # the heuristic picks 128 for this small problem; emulate the 256-wide tile too
        from dataclasses import replace

        p = replace(p, tiles=replace(p.tiles, bn=bn, stages=4))
    x = torch.randn(m, k)
    qa = humming.quantize_activation(x, sch)
    ts = gs = None
    if qa.mode == "dynamic_token":
        ts = qa.scale_values().reshape(-1).float()
    else:
        gs = qa.scale_values().reshape(())
    fmt = humming.formats.get(sch.act)

    def dec(c):
        return c.view(torch.int8).double() if a_type == "s8" else fmt.decode(c).double()

    out = _emulate(p, packed, qa.codes, ts, gs, dec)
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out - ref).norm() / ref.norm())
    assert err < 1e-5, err


# ----------------------------------------------------------------------------- W4A8 (4-bit weights widened in smem)
from humming.core.families.wgmma_8bit.layout import (  # noqa: E402
    WgmmaW4A8Layout,
    pack_int4_kmajor,
    permute_columns_wgmma,
    prepare_w4a8_wgmma,
)
from humming.core.families.wgmma_8bit.planner import plan_w4a8_wgmma  # noqa: E402

# (scheme preset or variant, a_type, weight format, group)
W4A8_CASES = [("w4a8-int8", "s8", "int4", 128), ("w4a8-fp8", "e4m3", "int4", 128), ("w4a8-mxfp4", "e4m3", "e2m1", 32),
              ("w4a8-int8[group_size=32]", "s8", "int4", 32), ("w4a8-fp8[group_size=64]", "e4m3", "int4", 64),
              ("w4a8-int8[channel]", "s8", "int4", 0)]


def _w4a8_scheme(name: str):
    base, _, variant = name.partition("[")
    sch = humming.schemes.get(base)
    if variant.startswith("group_size="):
        sch = sch.with_(group_size=int(variant[len("group_size="):-1]))
    elif variant == "channel]":
        from dataclasses import replace

        sch = replace(sch, weight_scale=replace(sch.weight_scale, granularity="channel", group_size=None))
    return sch


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("a_type,fmt,group", [("s8", "int4", 128), ("e4m3", "int4", 128), ("e4m3", "e2m1", 32),
                                              ("s8", "int4", 32), ("e4m3", "int4", 64), ("s8", "int4", 4096)])
def test_w4a8_compiles_with_wgmma(a_type, fmt, group, act):
    _need_sm90a()
    caps = _caps()
    p = plan_w4a8_wgmma(caps, WgmmaW4A8Layout(a_type, 4096, 4096, group, fmt), 1024, act, scheme="w4a8")
    assert p.family == "wgmma" and p.tiles.bn == 128 and p.splits == 1 and p.threads == 256
    assert p.smem_bytes <= caps.limits.smem_per_block_kb * 1024 and p.tiles.stages >= 4
    assert p.kernel_name.startswith(f"hm_w4a8_wgmma_{a_type}_{act}_m128n128k128") and "W4A8" in p.explain()
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)", ptx))
    assert shapes == {("m64n128k32", ACC[a_type], a_type, a_type)}
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0",
                "fence.proxy.async.shared::cta", "cp.async.cg.shared.global", "st.shared.v4.u32", "ld.shared.v4.u32"):
        assert ins in ptx, ins
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx and "wgmma.wait_group.sync.aligned 1" not in ptx
    assert ("prmt.b32" in ptx) == (a_type == "e4m3")  # s8 widens with shifts and masks only
    assert ("n4_to_e4m3x4(q[0])" in src) == (a_type == "e4m3")
    log = mod.log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 255 and spills and max(spills) == 0, log
    assert "serialized" not in log, log


def test_w4a8_compiles_for_every_profile_declaring_wgmma():
    _need_sm90a()
    for name in WGMMA_PROFILES:
        caps = _caps(name)
        for a_type, fmt in (("e4m3", "int4"), ("s8", "int4"), ("e4m3", "e2m1")):
            p = plan_w4a8_wgmma(caps, WgmmaW4A8Layout(a_type, 2048, 2048, 128, fmt), 512, "bf16")
            _, mod = api.compile_plan(p, caps)
            assert f"wgmma.mma_async.sync.aligned.m64n128k32.{ACC[a_type]}.{a_type}.{a_type}" in mod.ptx


def test_w4a8_kernel_names_differ_by_weight_format():
    caps = _caps()
    names = {plan_w4a8_wgmma(caps, WgmmaW4A8Layout(a, 1024, 1024, 128, f), 256, "f16").kernel_name
             for a, f in (("e4m3", "int4"), ("e4m3", "e2m1"), ("s8", "int4"))}
    assert len(names) == 3


def test_w4a8_selection_is_opt_in_and_gated(set_knobs):
    with knobs.override({WGMMA_KNOB: False}):
        for scheme in ("w4a8-int8", "w4a8-fp8", "w4a8-mxfp4"):
            assert humming.plan(scheme, 1024, 1024, 2048, profile=H200, options=NATIVE).family == "mma_sync"
    set_knobs({WGMMA_KNOB: True})
    for scheme in ("w4a8-int8", "w4a8-fp8", "w4a8-mxfp4"):
        p = humming.plan(scheme, 1024, 1024, 2048, profile=H200, options=NATIVE)
        assert p.family == "wgmma" and p.kernel_name.startswith("hm_w4a8_wgmma_"), p.explain()
        # the reasons name the W4A8 kernel: "W4A8: ..." (the shared-memory kernel) or, for the register-A W4A8 kernel
        # (int4 in groups of 128), its knob register_a8.min_m (the reason named HUMMING_WGMMA_W4A8_RS before)
        assert any("W4A8" in r or "register_a8.min_m" in r for r in p.reasons), p.explain()
        assert any("group" in r for r in p.reasons)
        assert humming.plan(scheme, 32, 1024, 2048, profile=H200, options=NATIVE).family == "mma_sync"  # decode M
        sch = humming.schemes.get(scheme)
        assert not _wgmma_takes(sch, 1024, 1088, 2048)  # N % 128
    p = humming.plan("w4a8-int8", 1024, 1024, 2048, profile=H200, group_size=32, options=NATIVE)
    assert p.family == "wgmma" and p.layout.group == 32
    for profile in ("nvidia-a100", "nvidia-l40s"):
        try:
            assert humming.plan("w4a8-fp8", 1024, 1024, 2048, profile=profile, options=NATIVE).family == "mma_sync"
        except UnsupportedOnDevice:
            pass


def test_w4a8_refuses_groups_it_cannot_promote():
    caps = _caps()
    with pytest.raises(UnsupportedOnDevice, match="group"):
        plan_w4a8_wgmma(caps, WgmmaW4A8Layout("s8", 1024, 2048, 96, "int4"), 256, "f16")
    sch = humming.schemes.get("w4a8-int8").with_(group_size=16)
    qw = humming.quantize(torch.randn(128, 256) * 0.05, sch)
    with pytest.raises(UnsupportedOnDevice, match="group"):
        prepare_w4a8_wgmma(qw, torch.float16, "s8")


# --- the widening helpers, in torch, mirroring the C text of the backend (tables and constants parsed from it)
def _helper_body(fn: str) -> str:
    return re.search(fn + r"\(uint32_t w\) \{(.*?)\n\}", convert.WGMMA_W4A8, re.S).group(1)


def _prmt_t(a, b, sel: torch.Tensor) -> torch.Tensor:
    """PTX prmt.b32 in the default mode, vectorized: output byte i = byte sel[i] of {b, a}. The helpers never use
    the sign-replicate mode (selector nibble bit 3), which is asserted."""
    a = torch.as_tensor(a, dtype=torch.int64)
    b = torch.as_tensor(b, dtype=torch.int64)
    assert not ((sel & 0x8888) != 0).any(), "selector nibble with bit 3 (sign mode)"
    pool = torch.stack([(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)], -1)
    pool = pool.expand(*sel.shape, 8)
    return sum(pool.gather(-1, ((sel >> (4 * i)) & 7).unsqueeze(-1)).squeeze(-1) << (8 * i) for i in range(4))


def _widen4(w: torch.Tensor, helper: str) -> torch.Tensor:
    """The backend helper ``helper`` on int64 words w (four codes in the nibbles of the low 16 bits)."""
    body = _helper_body(helper)
    consts = [(int(x, 16), int(y, 16)) for x, y in re.findall(r"prmt_b32\(0x([0-9A-F]{8})u, 0x([0-9A-F]{8})u", body)]
    final = "prmt_b32(pos, neg, ((w >> 1) & 0x4444u) | 0x3210u)" if helper.startswith("int4") else \
        "prmt_b32(mag, mag | 0x80808080u, ((w >> 1) & 0x4444u) | 0x3210u)"
    assert final in body and "w & 0x7777u" in body
    sel = w & 0x7777
    fsel = ((w >> 1) & 0x4444) | 0x3210
    if helper == "int4n4_to_e4m3x4":
        (pa, pb), (na, nb) = consts
        return _prmt_t(_prmt_t(pa, pb, sel), _prmt_t(na, nb, sel), fsel)
    assert helper == "e2m1n4_to_e4m3x4"
    ((ma, mb),) = consts
    mag = _prmt_t(ma, mb, sel)
    return _prmt_t(mag, mag | 0x80808080, fsel)


def _widen_word(w: torch.Tensor, fmt: str, a_type: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(lo, hi) words of the generated widening of word(s) w (the kernel's _W4A8_WIDEN and the backend helpers)."""
    from humming.core.families.wgmma_8bit.pieces import _W4A8_WIDEN

    lo, hi = _W4A8_WIDEN[(fmt, a_type)]
    if a_type == "s8":
        assert (lo, hi) == ("s8x16_lo(WORD)", "s8x16_hi(WORD)")
        assert _c_expr(convert.WGMMA_W4A8, "s8x16_lo") == "(w << 4) & 0xF0F0F0F0"
        assert _c_expr(convert.WGMMA_W4A8, "s8x16_hi") == "w & 0xF0F0F0F0"
        return (w << 4) & 0xF0F0F0F0, w & 0xF0F0F0F0
    helper = lo.split("(")[0]
    assert lo == f"{helper}(WORD)" and hi == f"{helper}(WORD >> 16)"
    return _widen4(w, helper), _widen4(w >> 16, helper)


def _bytes_to_words(b: torch.Tensor) -> torch.Tensor:
    b = b.to(torch.int64).reshape(*b.shape[:-1], -1, 4)
    return b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)


def _words_to_bytes(w: torch.Tensor) -> torch.Tensor:
    return torch.stack([(w >> (8 * i)) & 0xFF for i in range(4)], -1).reshape(*w.shape[:-1], -1).to(torch.uint8)


def _code_values(fmt: str, a_type: str, b: torch.Tensor) -> torch.Tensor:
    """What the tensor core multiplies for widened byte(s) b."""
    if a_type == "s8":
        return b.view(torch.int8).double()
    return humming.formats.get("e4m3").decode(b).double()


@pytest.mark.parametrize("a_type,fmt", [("s8", "int4"), ("e4m3", "int4"), ("e4m3", "e2m1")])
def test_widening_of_every_code_is_exact(a_type, fmt):
    """Every 4-bit code in every position of a packed word widens to the same value (s8: 16 x code)."""
    codes = torch.arange(16, dtype=torch.int64)
    words = []
    for pos in range(8):  # code c at position pos, the other positions cycling through the other codes
        ks = torch.stack([(codes + 3 * j) % 16 if j != pos else codes for j in range(8)], 1)  # [16, 8] k order
        words.append(ks)
    ks = torch.cat(words)  # [128, 8] codes in k order
    packed = pack_int4_kmajor(ks, a_type)  # [128, 4] bytes = one word per row
    w = _bytes_to_words(packed)[:, 0]
    lo, hi = _widen_word(w, fmt, a_type)
    out = _words_to_bytes(torch.stack([lo, hi], -1))  # [128, 8] bytes, k order
    want = humming.formats.get(fmt).decode(ks.to(torch.uint8)).double() * (16 if a_type == "s8" else 1)
    assert torch.equal(_code_values(fmt, a_type, out.flatten()).view(128, 8), want)


def _check_w4a8_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated W4A8 kernel; change both together."""
    for text in ("const int lrow = tid >> 3, lch = tid & 7;", "const uint32_t lswz = swz128(lrow, lch);",
                 "const uint32_t base = smem0 + slot * SLOT_BYTES;", "copy_16_async(base + lswz + i * 32 * 128,",
                 "const int brow = tid >> 2, bch = tid & 3;",
                 "b_src = B + (size_t)(n0 + brow) * (K / 2) + bch * 16;",
                 "raw = smem0 + slot * SLOT_BYTES + A_BYTES + tid * 16;",
                 "copy_16_async(raw + i * THREADS * 16, b_src + ((size_t)64 * i * (K / 2) + k0 / 2), true);",
                 "const uint32_t wswz0 = swz128(brow, 2 * bch), wswz1 = swz128(brow, 2 * bch + 1);",
                 "lds_128(q, raw + i * THREADS * 16);", "o[0] = ", "o[7] = ",
                 "st_shared_128(wb + i * 64 * 128 + wswz0, o[0], o[1], o[2], o[3]);",
                 "st_shared_128(wb + i * 64 * 128 + wswz1, o[4], o[5], o[6], o[7]);",
                 "const uint32_t wb = smem0 + WB_OFFSET + buf * B_BYTES;",
                 "widen_stage((kt + 1) % STAGES, (kt + 1) % WBUFS);", "widen_stage(0, 0);", "WBUFS = 3;",
                 "(kt % STAGES) * SLOT_BYTES + wg * 64 * 128", "b_tile = smem0 + WB_OFFSET + (kt % WBUFS) * B_BYTES;",
                 "LOOKAHEAD = STAGES - 2;", "if (next < ktiles) load_stage(next % STAGES, next);",
                 "desc_a = make_smem_desc(a_tile), desc_b = make_smem_desc(b_tile)",
                 "wgmma_k32(acc, desc_a + 2 * (gi * GSTEPS + s), desc_b + 2 * (gi * GSTEPS + s), s > 0);",
                 "const float* s_col = S + n0 + (lane & 3) * (BN / 4);",
                 "srow = s_col + (size_t)((kt * BK + gi * GSTEPS * 32) / GROUP) * N;",
                 "load_g128_cached(s4[v], srow + 4 * v);",
                 "(acc[4 * j + 2 * h + e]) * u32_as_f32(s4[j / 2][(j % 2) * 2 + e]);",
                 "const int row0 = m0 + warp * 16 + (lane >> 2);", "const int col = n0 + 8 * j + 2 * (lane & 3);",
                 "facc[4 * j + 2 * h] * rs[h] * c0 + b0", "facc[4 * j + 2 * h + 1] * rs[h] * c1 + b1"):
        assert text in src, text
    for w in range(4):
        assert f"o[{2 * w}] = " in src and f"q[{w}]" in src


def _w4a8_raw_copy_and_widen(smem: torch.Tensor, packed_rows: torch.Tensor, raw: int, wb: int, fmt: str,
                             a_type: str) -> None:
    """One stage of B for a 128-row tile: the cp.async of the packed rows [128, 64] bytes to the raw slot (each
    thread's chunks), then each thread's widening of exactly those bytes into the swizzled tile at wb."""
    threads = 256
    written = torch.zeros(smem.numel(), dtype=torch.int64)
    for tid, i in itertools.product(range(threads), range(2)):
        brow, bch = tid >> 2, tid & 3
        src = packed_rows[brow + 64 * i, bch * 16:(bch + 1) * 16]  # b_src + 64 i rows (K/2 bytes each)
        smem[raw + i * threads * 16 + tid * 16:][:16] = src
    for tid, i in itertools.product(range(threads), range(2)):
        brow, bch = tid >> 2, tid & 3
        q = _bytes_to_words(smem[raw + i * threads * 16 + tid * 16:][:16])  # lds_128: the thread's own bytes
        lo, hi = _widen_word(q, fmt, a_type)
        o = torch.stack([lo, hi], -1).reshape(8)  # o[2w] = lo(q[w]), o[2w + 1] = hi(q[w])
        ob = _words_to_bytes(o)
        for half, ch in ((0, 2 * bch), (1, 2 * bch + 1)):
            addr = wb + i * 64 * 128 + swz128(brow, ch)
            assert (written[addr:addr + 16] == 0).all()
            written[addr:addr + 16] = 1
            smem[addr:addr + 16] = ob[16 * half:16 * (half + 1)]
    assert int(written.sum()) == 128 * 128  # the widened tile is written exactly once


@pytest.mark.parametrize("a_type,fmt", [("s8", "int4"), ("e4m3", "int4"), ("e4m3", "e2m1")])
def test_w4a8_widened_tile_is_what_the_descriptor_reads(a_type, fmt):
    """From the packed weights: the raw copy, each thread's widening and its swizzled stores put, at every byte
    the B descriptor makes wgmma read for (row n, k) of each k32 step, the widened code of W[n, k]."""
    caps = _caps()
    p = plan_w4a8_wgmma(caps, WgmmaW4A8Layout(a_type, 1024, 1024, 128, fmt), 256, "f16")
    _check_w4a8_indexing(api.source(p, caps))
    torch.manual_seed(7)
    codes = torch.randint(0, 16, (128, 384), dtype=torch.int64)
    packed = pack_int4_kmajor(codes, a_type)
    want = humming.formats.get(fmt).decode(codes.to(torch.uint8)).double() * (16 if a_type == "s8" else 1)
    stages = p.tiles.stages
    slot_bytes = 128 * 128 + 128 * 64
    wb_offset = stages * slot_bytes
    smem0 = 2048
    smem = torch.zeros(smem0 + wb_offset + 3 * 128 * 128, dtype=torch.uint8)
    for kt in range(3):  # three stages, into the three widened tiles, from different slots
        slot, buf = (kt + 3) % stages, kt % 3
        raw = smem0 + slot * slot_bytes + 128 * 128
        wb = smem0 + wb_offset + buf * 128 * 128
        _w4a8_raw_copy_and_widen(smem, packed[:, kt * 64:(kt + 1) * 64], raw, wb, fmt, a_type)
        for ks in range(4):
            got = _code_values(fmt, a_type, smem[_read_map(128, wb, ks).flatten()]).view(128, 32)
            assert torch.equal(got, want[:, kt * 128 + ks * 32:kt * 128 + (ks + 1) * 32]), (kt, ks)


def _emulate_w4a8(p, packed, codes: torch.Tensor, ts: torch.Tensor) -> torch.Tensor:
    """The W4A8 kernel in torch: A through the copy-loop addresses, B through the raw copy + widening, every k32
    step read back through the descriptors, fp64 group partials times the scales each thread reads, epilogue."""
    lay = packed.layout
    m, n, k = p.m, p.n, p.k
    stages, group = p.tiles.stages, lay.group
    gsteps = min(group, 128) // 32
    slot_bytes, wb_offset, smem0 = 128 * 128 + 128 * 64, stages * (128 * 128 + 128 * 64), 1024
    smem = torch.zeros(smem0 + wb_offset + 3 * 128 * 128, dtype=torch.uint8)
    a_maps = {s: _store_map(128, smem0 + s * slot_bytes) for s in range(stages)}
    dec_a = (lambda c: c.view(torch.int8).double()) if lay.a_type == "s8" else humming.formats.get("e4m3").decode
    # the table columns a thread reads for its accumulator column 8j + 2*(lane%4) + e: n0 + (lane%4)*32 + 2j + e
    col_of = torch.tensor([(c % 8) // 2 * 32 + 2 * (c // 8) + c % 2 for c in range(128)])
    out = torch.empty(m, n, dtype=torch.float64)
    for bx, by in itertools.product(range(-(-m // 128)), range(n // 128)):
        facc = torch.zeros(128, 128, dtype=torch.float64)
        for kt in range(k // 128):
            slot, buf = kt % stages, kt % 3
            base, wb = smem0 + slot * slot_bytes, smem0 + wb_offset + buf * 128 * 128
            tile = torch.zeros(128, 128, dtype=torch.uint8)
            rows = codes[bx * 128:(bx + 1) * 128, kt * 128:(kt + 1) * 128]
            tile[:rows.shape[0]] = rows
            smem[a_maps[slot].flatten()] = tile.flatten()
            _w4a8_raw_copy_and_widen(smem, packed.qweight[by * 128:(by + 1) * 128, kt * 64:(kt + 1) * 64],
                                     base + 128 * 128, wb, lay.weight_format, lay.a_type)
            for gi in range(4 // gsteps):
                acc = torch.zeros(128, 128, dtype=torch.float64)
                for wg, s in itertools.product(range(2), range(gsteps)):
                    ks = gi * gsteps + s
                    a = dec_a(smem[_read_map(64, base + wg * 64 * 128, ks)]).double()
                    b = _code_values(lay.weight_format, lay.a_type, smem[_read_map(128, wb, ks)])
                    acc[wg * 64:(wg + 1) * 64] += a @ b.t()
                g = (kt * 128 + gi * gsteps * 32) // group
                facc += acc * packed.scales[g, by * 128 + col_of].double()
        rows = slice(bx * 128, min(m, (bx + 1) * 128))
        cols = slice(by * 128, (by + 1) * 128)
        v = facc[: rows.stop - rows.start] * (ts[rows, None].double() * packed.out_scale)
        if packed.bias is not None:
            v = v + packed.bias[cols].double()
        out[rows, cols] = v
    return out


@pytest.mark.parametrize("scheme", ["w4a8-int8", "w4a8-fp8", "w4a8-mxfp4", "w4a8-int8[group_size=32]",
                                    "w4a8-fp8[group_size=64]", "w4a8-int8[channel]"])
def test_w4a8_emulated_kernel_matches_reference(scheme):
    sch = _w4a8_scheme(scheme)
    torch.manual_seed(len(scheme))
    m, n, k = 136, 256, 384  # three stages: all three widened tiles
    bias = torch.randn(n).to(torch.float16)
    qw = humming.quantize(torch.randn(n, k) * 0.05, sch, bias=bias)
    a_type = "s8" if sch.act == "int8" else "e4m3"
    packed = prepare_w4a8_wgmma(qw, torch.float16, a_type)
    assert packed.qweight.shape == (n, k // 2) and packed.qweight.dtype == torch.uint8
    assert packed.scales.shape == (k // packed.layout.group, n)
    caps = _caps()
    p = plan_w4a8_wgmma(caps, packed.layout, m, "f16", scheme=scheme)
    x = torch.randn(m, k)
    qa = humming.quantize_activation(x, sch)
    ts = qa.scale_values().reshape(-1).float()
    out = _emulate_w4a8(p, packed, qa.codes, ts)
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out - ref).norm() / ref.norm())
    assert err < 1e-5, err


def test_w4a8_scale_table_order():
    t = torch.arange(2 * 256, dtype=torch.float32).view(2, 256)
    p = permute_columns_wgmma(t)
    for block, q, j, e in itertools.product(range(2), range(4), range(16), range(2)):
        assert p[1, block * 128 + q * 32 + 2 * j + e] == t[1, block * 128 + 8 * j + 2 * q + e]


def test_w4a8_s8_partials_convert_exactly():
    """s8 partials (<= 128 k of s8 x 16 * int4) go to fp32 through 1.5 * 2^23 + v: exact for |v| < 2^22, which
    bounds them; the kernel uses it for s8 only (e4m3 partials are fp32 already)."""
    import struct

    body = re.search(r"small_s32_to_f32\(int v\) \{ return (.*?); \}", convert.WGMMA_W4A8).group(1)
    assert body == "u32_as_f32(0x4B400000u + (uint32_t)v) - 12582912.0f"
    bound = 128 * 128 * 128  # |a| <= 128, |16 * code| <= 128, 128 k per promotion at most
    assert bound < 2**22
    for v in [0, 1, -1, 12345, -bound, bound, 2**22 - 1, -(2**22) + 1] + list(range(-300, 300, 7)):
        f = struct.unpack("<f", struct.pack("<I", (0x4B400000 + v) & 0xFFFFFFFF))[0]
        assert float(torch.tensor(f, dtype=torch.float32) - torch.tensor(12582912.0, dtype=torch.float32)) == v
    caps = _caps()
    for a_type, fmt in (("s8", "int4"), ("e4m3", "int4")):
        src = api.source(plan_w4a8_wgmma(caps, WgmmaW4A8Layout(a_type, 1024, 1024, 128, fmt), 256, "f16"), caps)
        assert ("+= small_s32_to_f32(acc[" in src) == (a_type == "s8")
