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
from humming.core.compiler import compile_cuda
from humming.core.layout_wgmma import WgmmaW8A8Layout, prepare_w8a8_wgmma
from humming.core.nvrtc import select_toolchain
from humming.core.paths import runnable_path
from humming.core.planner_wgmma import plan_w8a8_wgmma
from humming.devices.nvidia import backend as nv
from humming.errors import UnsupportedOnDevice

H200 = "nvidia-h200"
ACC = {"e4m3": "f32", "s8": "s32"}


def _caps(name=H200):
    return api.resolve_profile(name)


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
    p = plan_w8a8_wgmma(caps, WgmmaW8A8Layout(a_type, n, 4096, "channel", fast_accum=fast), m, act, scheme="w8a8")
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
def test_profiles_without_wgmma_get_no_wgmma_plan(profile, monkeypatch):
    caps = _caps(profile)
    with pytest.raises(UnsupportedOnDevice, match="declares no wgmma"):
        plan_w8a8_wgmma(caps, WgmmaW8A8Layout("e4m3", 1024, 2048, "channel"), 1024, "f16")
    monkeypatch.setenv(api.WGMMA_ENV, "1")
    for scheme in ("w8a8-int8", "w8a8-fp8"):
        try:
            p = humming.plan(scheme, 1024, 1024, 2048, profile=profile)
        except UnsupportedOnDevice:
            continue
        assert p.family == "mma_sync"


def test_selection_is_opt_in_and_gated(monkeypatch):
    caps = _caps()
    sch = humming.schemes.get("w8a8-fp8")
    choice = runnable_path(caps, sch)
    monkeypatch.delenv(api.WGMMA_ENV, raising=False)
    assert not api._wgmma_eligible(caps, choice, sch, 1024, 1024, 2048)
    assert humming.plan("w8a8-fp8", 1024, 1024, 2048, profile=H200).family == "mma_sync"
    monkeypatch.setenv(api.WGMMA_ENV, "1")
    assert api._wgmma_eligible(caps, choice, sch, 1024, 1024, 2048)
    assert not api._wgmma_eligible(caps, choice, sch, 63, 1024, 2048)  # decode-sized M stays on mma.sync
    assert not api._wgmma_eligible(caps, choice, sch, 1024, 1088, 2048)  # N % 128
    assert not api._wgmma_eligible(caps, choice, sch, 1024, 1024, 2112)  # K % 128
    for scheme in ("w8a8-fp8", "w8a8-int8", "w8a8-fp8-tensor"):
        p = humming.plan(scheme, 1024, 1024, 2048, profile=H200)
        assert p.family == "wgmma", p.explain()
    assert humming.plan("w8a8-fp8", 16, 1024, 2048, profile=H200).family == "mma_sync"
    w4 = humming.schemes.get("w4a8-int8")
    assert not api._wgmma_eligible(caps, runnable_path(caps, w4), w4, 1024, 1024, 2048)


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
    return eval(_c_expr(nv.WGMMA_COMMON, "swz128"), {"r": r, "ch": ch})  # noqa: S307 (our own helper text)


def make_smem_desc(addr: int) -> int:
    return eval(_c_expr(nv.WGMMA_COMMON, "make_smem_desc"), {"addr": addr})  # noqa: S307


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
    p = plan_w8a8_wgmma(caps, packed.layout, m, "f16", scheme=scheme)
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
