"""CPU: w8a8-fp8-block (e4m3 weights with fp32 scales per 128x128 block, e4m3 activations quantized per token
per 128 of K; the DeepSeek-V3 recipe) on the 8-bit kernels. The wgmma kernel (sm_90a, M >= 64) applies the two
block scales at its per-stage fp32 promotion; the mma.sync 8-bit kernel (every profile with e4m3 mma.sync: decode
on Hopper, Ada, Blackwell) after each 64-wide k atom. Both compile with NVRTC, hold the intended instructions,
and are emulated in torch with the kernels' own indexing, against the reference. Never run on a GPU here."""
import itertools
import re
from dataclasses import replace

import pytest
import torch
from test_wgmma_compile import _ptx_d_fragment, _read_map, _store_map  # the W8A8 wgmma model

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core.common.layout import block_scales_reason
from humming.core.common.paths import choose_path
from humming.core.common.quantized import runs_on_w8a8
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.mma_8bit.layout import W8A8Layout, prepare_w8a8
from humming.core.families.mma_8bit.planner import plan_w8a8
from humming.core.families.runnable import runnable_path
from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout, prepare_w8a8_wgmma
from humming.core.families.wgmma_8bit.planner import plan_w8a8_wgmma
from humming.devices import get_backend
from humming.errors import ShapeError, UnsupportedOnDevice

SCHEME = "w8a8-fp8-block"
H200 = "nvidia-h200"
HOPPER = ("nvidia-h100", "nvidia-h200", "nvidia-h20")
ACC = {"e4m3": "f32", "s8": "s32"}
INT8_BLOCK = humming.schemes.get("w8a8-int8").with_(block="128x128", act_scale="dynamic_group", act_group_size=128)


def _caps(name=H200):
    return api.resolve_profile(name)


def _toolchain_or_skip(arch, min_nvrtc=None):
    try:
        select_toolchain(arch, min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _block_data(n, k, m, seed, sch=SCHEME):
    """Weights and activations whose magnitudes differ from block to block (a wrong block index shows)."""
    g = torch.Generator().manual_seed(seed)
    wmag = torch.exp(torch.randn(-(-n // 128), k // 128, generator=g) * 1.5)
    w = torch.randn(n, k, generator=g) * wmag.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1) * 0.05
    xmag = torch.exp(torch.randn(m, k // 128, generator=g) * 1.5)
    x = torch.randn(m, k, generator=g) * xmag.repeat_interleave(128, 1)
    bias = torch.randn(n, generator=g).to(torch.float16)
    sch = humming.schemes.get(sch) if isinstance(sch, str) else sch
    return humming.quantize(w, sch, bias=bias), x, bias


# ----------------------------------------------------------------------------- the oracle for this scheme
def test_reference_is_the_block_recipe_written_out():
    """reference_gemm and quantize_activation for w8a8-fp8-block, against the recipe written out with torch's own
    float8 type: activation scale amax / 448 per token per 128 of K (1 for an all-zero group), codes x / scale
    rounded to e4m3; weight value code x scale[n // 128, k // 128] (N = 320: a part-filled last block)."""
    n, k, m = 320, 384, 5
    qw, x, _ = _block_data(n, k, m, 17)
    x[1, 128:256] = 0.0
    sch = humming.schemes.get(SCHEME)
    xg = x.float().view(m, k // 128, 128)
    amax = xg.abs().amax(-1)
    s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    codes = (xg / s[..., None]).to(torch.float8_e4m3fn)
    qa = humming.quantize_activation(x, sch)
    assert torch.equal(qa.scale_values(), s) and torch.equal(qa.codes.view(m, k // 128, 128), codes.view(torch.uint8))
    ws = qw.scale_values().float()
    assert ws.shape == (3, 3)
    # value x scale in fp32 (as the reference dequantizes), the product in fp64 rounded once to fp32
    wv = qw.codes().view(torch.float8_e4m3fn).float() * ws.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    xv = (codes.float() * s[..., None]).view(m, k)
    want = (xv.double() @ wv.double().t()).float()
    got = humming.reference_gemm(x, qw, bias=torch.zeros(n), out_dtype=torch.float32)
    assert torch.equal(got, want)


# ----------------------------------------------------------------------------- planning and selection
def test_scheme_is_what_the_kernels_apply():
    sch = humming.schemes.get(SCHEME)
    assert sch.weight_scale.block == (128, 128) and sch.act_scale.mode == "dynamic_group"
    assert sch.act_scale.group_size == 128 and block_scales_reason(sch) is None
    assert block_scales_reason(humming.schemes.get("w8a8-fp8").with_(block="128x128")) is not None  # per-token acts
    assert block_scales_reason(sch.with_(block="64x128")) is not None


@pytest.mark.parametrize("profile", HOPPER)
def test_hopper_plans_wgmma_for_prefill_and_mma_sync_for_decode(profile, set_knobs):
    for m in (64, 200, 1024):
        p = humming.plan(SCHEME, m, 4096, 7168, profile=profile)
        assert p.family == "wgmma" and p.tiles.bn == 128, p.explain()
        assert p.kernel_name.startswith("hm_w8a8blk_wgmma_e4m3_f16_m128n128k128")
        assert p.layout.weight_scale == "block" and not p.layout.fast_accum
        assert any("activation scale (row, k block) x weight scale (n block, k block)" in r for r in p.reasons)
    for m in (1, 16, 63):
        p = humming.plan(SCHEME, m, 4096, 7168, profile=profile)
        assert p.family == "mma_sync" and p.kernel_name.startswith("hm_w8a8blk_e4m3_"), p.explain()
    # N % 128 == 64: the block table's last block is half full; the mma.sync kernel (64-wide tiles) runs it
    p = humming.plan(SCHEME, 1024, 4160, 2048, profile=profile)
    assert p.family == "mma_sync" and p.tiles.bn == 64
    set_knobs({"wgmma_8bit.enabled": False})
    assert humming.plan(SCHEME, 1024, 4096, 2048, profile=profile).family == "mma_sync"


def test_fast_accumulation_never_applies_to_blocks():
    p = humming.plan(SCHEME, 4096, 8192, 2048, profile=H200, options=humming.GemmOptions(fast_accum=True))
    assert p.family == "wgmma" and not p.layout.fast_accum and p.tiles.bn == 128
    qw, _, _ = _block_data(256, 256, 1, 0)
    assert not prepare_w8a8_wgmma(qw, torch.float16, "e4m3", fast_accum=True).layout.fast_accum


def test_kernel_names_differ_from_the_per_channel_kernels():
    caps = _caps()
    for a_type in ("e4m3", "s8"):
        names = {plan_w8a8_wgmma(caps, WgmmaW8A8Layout(a_type, 1024, 2048, g), 256, "f16").kernel_name
                 for g in ("channel", "block")}
        assert len(names) == 2
    choice = runnable_path(caps, humming.schemes.get(SCHEME))
    names = {plan_w8a8(caps, W8A8Layout("e4m3", 1024, 2048, g), 16, "f16", choice).kernel_key for g in ("channel", "block")}
    assert len(names) == 2


def test_generator_refuses_a_256_wide_block_tile():  # (the lock-step kernel; the TMA one checks its tile too)
    caps = _caps()
    p = plan_w8a8_wgmma(caps, WgmmaW8A8Layout("e4m3", 8192, 2048, "block"), 4096, "f16", tma=False)
    assert p.tiles.bn == 128
    with pytest.raises(ValueError, match="BN = 128"):
        api.source(replace(p, tiles=replace(p.tiles, bn=256, stages=4)), caps)


def test_refusals_name_the_constraint():
    qw, _, _ = _block_data(320, 256, 1, 1)  # N % 128 != 0: not on the wgmma kernel
    with pytest.raises(ShapeError, match="multiples of 128"):
        prepare_w8a8_wgmma(qw, torch.float16, "e4m3")
    assert prepare_w8a8(qw, torch.float16, "e4m3").scales.shape == (3, 2)  # the mma.sync kernel takes N % 64
    other = humming.quantize(torch.randn(256, 256), humming.schemes.get("w8a8-fp8").with_(block="128x128"))
    with pytest.raises(UnsupportedOnDevice, match="per 128 of K"):
        prepare_w8a8(other, torch.float16, "e4m3")
    caps = _caps("nvidia-l40s")
    assert not runs_on_w8a8(choose_path(caps, other.scheme), other.scheme)
    with pytest.raises(UnsupportedOnDevice, match="not generated yet"):
        humming.plan(other.scheme, 16, 256, 256, profile=caps)


def test_path_table_rows():
    """humming.device.info(): Hopper runs the block scheme on wgmma for prefill and mma.sync for decode; Ada,
    Blackwell (until a tcgen05 block kernel exists) and sm_120 on the 8-bit mma.sync kernel; no fp8, no path."""
    for profile in HOPPER:
        row = next(r for r in api.path_table(_caps(profile)) if r["scheme"] == SCHEME)
        assert row["kernel"] == "mma_8bit" and row["prefill"] == "wgmma_8bit", row
        assert "M=16: mma_8bit; M=1024: wgmma_8bit" in row["reason"], row
        assert "not generated" not in row["reason"].split("[")[-1], row
        # the wgmma kernel from M = 64 (wgmma_8bit.MIN_M), the mma.sync one below
        assert next(r for r in api.path_table(_caps(profile), m=64) if r["scheme"] == SCHEME)["kernel"] == "wgmma_8bit"
        assert next(r for r in api.path_table(_caps(profile), m=63) if r["scheme"] == SCHEME)["kernel"] == "mma_8bit"
    for profile in ("nvidia-l40s", "nvidia-b200", "nvidia-b300", "nvidia-rtx-5090"):
        row = next(r for r in api.path_table(_caps(profile)) if r["scheme"] == SCHEME)
        assert row["family"] == "mma_sync" and row["kernel"] == row["prefill"] == "mma_8bit", row
        assert "[M=16: mma_8bit]" in row["reason"], row
    row = next(r for r in api.path_table(_caps("nvidia-a100")) if r["scheme"] == SCHEME)
    assert row["family"] is None and "e4m3" in row["reason"]


# ----------------------------------------------------------------------------- compilation
@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
def test_wgmma_block_kernel_compiles(a_type, act):
    _toolchain_or_skip("sm_90a")
    caps = _caps()
    p = plan_w8a8_wgmma(caps, WgmmaW8A8Layout(a_type, 4096, 7168, "block"), 1024, act, scheme=SCHEME, tma=False)
    assert p.tiles.bn == 128 and p.smem_bytes <= caps.limits.smem_per_block_kb * 1024
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)", ptx))
    assert shapes == {("m64n128k32", ACC[a_type], a_type, a_type)}
    assert "wgmma.wait_group.sync.aligned 0" in ptx and "wgmma.wait_group.sync.aligned 1" not in ptx
    assert "mma.sync" not in ptx and "tcgen05" not in ptx
    log = mod.log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 255 and spills and max(spills) == 0, log
    assert "serialized" not in log, log


def test_wgmma_block_kernel_compiles_for_every_profile_declaring_wgmma():
    _toolchain_or_skip("sm_90a")
    names = [c.name for c in list_profiles(include_abstract=False) if c.find_mma(family="wgmma")]
    assert set(HOPPER) <= set(names)
    for name in names:
        caps = _caps(name)
        p = humming.plan(SCHEME, 512, 2048, 2048, profile=caps, act="bf16")
        _, mod = api.compile_plan(p, caps)
        assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in mod.ptx


def _mma_cases():
    for caps in list_profiles(include_abstract=False):
        try:
            choice = runnable_path(caps, humming.schemes.get(SCHEME))
        except UnsupportedOnDevice:
            continue
        if runs_on_w8a8(choice, humming.schemes.get(SCHEME)):
            yield pytest.param(caps, choice, id=caps.name)


def test_mma_sync_cases_cover_hopper_ada_and_blackwell():
    names = {p.values[0].name for p in _mma_cases()}
    assert {"nvidia-h200", "nvidia-l40s", "nvidia-b200", "nvidia-b300", "nvidia-rtx-5090"} <= names
    assert not names & {"nvidia-a100", "nvidia-t4"}


@pytest.mark.parametrize("caps,choice", list(_mma_cases()))
def test_mma_sync_block_kernel_compiles(caps, choice):
    route = get_backend(caps).compile_route(caps)
    _toolchain_or_skip(route.arch, route.min_nvrtc)
    for m, n in ((1, 2048), (33, 2048), (200, 2048), (200, 2112)):
        p = humming.plan(SCHEME, m, n, 4096, profile=caps)
        assert p.family == "mma_sync" or (caps.find_mma(family="wgmma") and m >= 64 and n % 128 == 0)
        if p.family != "mma_sync":
            continue
        src = api.source(p, caps)
        mod = compile_cuda(src, [p.kernel_name], route.arch, options=("--ptxas-options=-v",),
                           min_nvrtc=route.min_nvrtc, cache=False)
        mma = set(re.findall(r"mma\.sync\.aligned\.(m\d+n\d+k\d+)\.row\.col\.(\w+)\.(\w+)", mod.ptx))
        assert mma == {("m16n8k32", "f32", "e4m3")}
        assert "wgmma" not in mod.ptx and "tcgen05" not in mod.ptx
        spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
        # sm_90a's ptxas fills all 255 registers at the 64x128 tile (the per-channel 8-bit kernels spill a few
        # words there too); elsewhere nothing spills
        assert spills and max(spills) <= (32 if route.arch == "sm_90a" else 0), mod.log


# ----------------------------------------------------------------------------- emulation: wgmma kernel
def _check_wgmma_block_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated kernel; change both together."""
    for text in ("const int arow = m0 + warp * 16 + (lane >> 2);",
                 "const float* ts_lo = TS + (size_t)min(arow, M - 1) * ktiles;",
                 "const float* ts_hi = TS + (size_t)min(arow + 8, M - 1) * ktiles;",
                 "const float* ws_blk = S + (size_t)(n0 / 128) * ktiles;",
                 "const float wsc = load_f32(ws_blk + kt);",
                 "const float bs_lo = load_f32(ts_lo + kt) * wsc, bs_hi = load_f32(ts_hi + kt) * wsc;",
                 "wgmma_k32(acc, desc_a + 2 * ks, desc_b + 2 * ks, ks > 0);",
                 "facc[i] += wg_acc_to_f32(acc[i]) * ((i & 2) ? bs_hi : bs_lo);",
                 "rs[h] = scale;", "facc[4 * j + 2 * h] * rs[h] * c0 + b0", "facc[4 * j + 2 * h + 1] * rs[h] * c1 + b1",
                 "const int col = n0 + 8 * j + 2 * (lane & 3);", "(kt % STAGES) * STAGE_BYTES + wg * 64 * 128"):
        assert text in src, text
    assert "load_f32(TS + row0" not in src  # no per-token scale in the epilogue


def test_promotion_register_rows():
    """acc[i] belongs to row arow + 8 exactly when i & 2 (the PTX wgmma D fragment)."""
    for warp, lane, i in itertools.product(range(4), range(32), range(64)):
        row, _ = _ptx_d_fragment(warp, lane, i)
        assert row == 16 * warp + lane // 4 + (8 if i & 2 else 0)


def _emulate_wgmma_block(p, packed, codes, ts_table, dec):
    """The block kernel in torch: tiles staged through the copy-loop addresses, each k32 step read back through the
    descriptor addresses, each stage's partial times the scales each thread loads, then the epilogue."""
    m, n, k = p.m, p.n, p.k
    stages, ktiles = p.tiles.stages, k // 128
    a_bytes, stage_bytes, smem0 = 128 * 128, 2 * 128 * 128, 1024
    smem = torch.zeros(smem0 + stages * stage_bytes, dtype=torch.uint8)
    maps = {}
    for s in range(stages):
        base = smem0 + s * stage_bytes
        maps[s] = (_store_map(128, base), _store_map(128, base + a_bytes),
                   [[_read_map(64, base + wg * 64 * 128, ks) for ks in range(4)] for wg in range(2)],
                   [_read_map(128, base + a_bytes, ks) for ks in range(4)])
    ts_flat, ws_flat = ts_table.reshape(-1).double(), packed.scales.reshape(-1).double()
    out = torch.empty(m, n, dtype=torch.float64)
    for bx, by in itertools.product(range(-(-m // 128)), range(n // 128)):
        m0 = bx * 128
        # arow of tile row r (threads: warp w, lane l -> rows 16w + l/4 and + 8), clamped as in the kernel
        rows = torch.arange(128)
        ts_index = torch.clamp(m0 + rows, max=m - 1) * ktiles
        facc = torch.zeros(128, 128, dtype=torch.float64)
        for kt in range(ktiles):
            a_st, b_st, a_rd, b_rd = maps[kt % stages]
            tile = torch.zeros(128, 128, dtype=torch.uint8)
            part = codes[m0:m0 + 128, kt * 128:(kt + 1) * 128]
            tile[:part.shape[0]] = part
            smem[a_st.flatten()] = tile.flatten()
            smem[b_st.flatten()] = packed.qweight[by * 128:(by + 1) * 128, kt * 128:(kt + 1) * 128].flatten()
            acc = torch.zeros(2, 64, 128, dtype=torch.float64)  # scale-d = 0 at ks == 0: a fresh partial
            for wg, ks in itertools.product(range(2), range(4)):
                acc[wg] += dec(smem[a_rd[wg][ks]]) @ dec(smem[b_rd[ks]]).t()
            wsc = ws_flat[by * ktiles + kt]  # ws_blk = S + (n0 / 128) * ktiles, n0 = 128 blockIdx.y
            facc += acc.reshape(128, 128) * (ts_flat[ts_index + kt] * wsc)[:, None]
        r = slice(m0, min(m, m0 + 128))
        v = facc[: r.stop - r.start] * packed.out_scale
        if packed.bias is not None:
            v = v + packed.bias[by * 128:(by + 1) * 128].double()
        out[r, by * 128:(by + 1) * 128] = v
    return out


@pytest.mark.parametrize("a_type", ["e4m3", "s8"])
def test_emulated_wgmma_block_kernel_matches_reference(a_type):
    sch = humming.schemes.get(SCHEME) if a_type == "e4m3" else INT8_BLOCK
    m, n, k = 200, 256, 384  # two row tiles (the second part-filled), two n blocks, three k blocks
    qw, x, bias = _block_data(n, k, m, 3 + len(a_type), sch)
    packed = prepare_w8a8_wgmma(qw, torch.float16, a_type)
    assert packed.scales.shape == (n // 128, k // 128) and packed.channel_scale is None
    caps = _caps()
    p = plan_w8a8_wgmma(caps, packed.layout, m, "f16", scheme=SCHEME, tma=False)
    _check_wgmma_block_indexing(api.source(p, caps))
    qa = humming.quantize_activation(x, sch)
    assert qa.scales.shape == (m, k // 128) and qa.scales.dtype == torch.float32
    fmt = humming.formats.get(sch.act)

    def dec(c):
        return c.view(torch.int8).double() if a_type == "s8" else fmt.decode(c).double()

    out = _emulate_wgmma_block(p, packed, qa.codes, qa.scale_values(), dec)
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out - ref).norm() / ref.norm())
    assert err < 1e-5, err


# ----------------------------------------------------------------------------- emulation: mma.sync kernel
def _check_mma_block_indexing(src: str) -> None:
    for text in ("static_assert(BK == 128,", "const int kb = (k_begin + kt * BK) / 128, kblocks = K / 128;",
                 "ra[tm][h] = load_f32(TS + (size_t)min(m0 + (wm * TM + tm) * 16 + (lane >> 2) + 8 * h, M - 1) * "
                 "kblocks + kb);",
                 "const float wsc = load_f32(S + (size_t)((n0 + (wn * TA + ta) * 64) >> 7) * kblocks + kb);",
                 "facc[tm][ta * 8 + t][e] += acc_to_f32(acc[tm][ta * 8 + t][e]) * (ra[tm][e >> 1] * wsc);",
                 "acc[tm][ta * 8 + t][e] = 0;"):
        assert text in src, text
    # once per stage (after the warp's atoms of the stage), not per atom
    assert src.index("const int kb = (k_begin") > src.rindex("mma_k32(")
    epilogue = src[src.index("const float scale = GS ?"):]
    assert "TS" not in epilogue and "if (CS)" in epilogue  # no per-token scale after the loop (CS is null)


def _unpack_k32(words: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """uint8 codes [N, K] from the k32 atom layout, with the kernel's lane mapping (test_w8a8_compile)."""
    w = words.view(n // 64, k // 64, 8, 32, 4).to(torch.int64) & 0xFFFFFFFF
    codes = torch.empty(n, k, dtype=torch.int64)
    for s, t, lane, r, e in itertools.product(range(2), range(8), range(32), range(2), range(4)):
        g, q = lane // 4, lane % 4
        nn = torch.arange(n // 64)[:, None] * 64 + t * 8 + g
        kk = torch.arange(k // 64)[None, :] * 64 + s * 32 + r * 16 + q * 4 + e
        codes[nn, kk] = (w[:, :, s * 4 + t // 2, lane, (t % 2) * 2 + r] >> (8 * e)) & 0xFF
    return codes.to(torch.uint8)


def _emulate_mma_block(p, packed, xa, ts_table):
    """The mma.sync block arithmetic: per stage (BK = 128 = one k block; the atoms a warp multiplies in it, one or
    two by WARPS_K, all lie in that block), the partial of every accumulator element times the scales its lane loads
    (rows lane/4 + 8h of m16 tile tm, the atom's n block), fp64."""
    m, n, k = p.m, p.n, p.k
    t = p.tiles
    tm_per_warp, ta_per_warp = t.bm // (16 * t.warps_m), t.bn // (64 * t.warps_n)
    kblocks = k // 128
    wq = humming.formats.get("e4m3").decode(_unpack_k32(packed.qweight, n, k)).double()
    ts_flat, ws_flat = ts_table.reshape(-1).double(), packed.scales.reshape(-1).double()
    # factor[row, col, kb] as read by the lane owning (row, col)
    m_pad = -(-m // t.bm) * t.bm
    factor = torch.full((m_pad, n, kblocks), float("nan"), dtype=torch.float64)
    for bx, by, wm, wn in itertools.product(range(m_pad // t.bm), range(n // t.bn), range(t.warps_m), range(t.warps_n)):
        m0, n0 = bx * t.bm, by * t.bn
        for tm, ta, lane, h, kb in itertools.product(range(tm_per_warp), range(ta_per_warp), range(32), range(2),
                                                     range(kblocks)):
            row = m0 + (wm * tm_per_warp + tm) * 16 + (lane >> 2) + 8 * h
            ra = ts_flat[min(row, m - 1) * kblocks + kb]
            atom0 = n0 + (wn * ta_per_warp + ta) * 64
            wsc = ws_flat[(atom0 >> 7) * kblocks + kb]
            cols = [atom0 + tt * 8 + 2 * (lane & 3) + e for tt in range(8) for e in range(2)]
            factor[row, cols, kb] = ra * wsc
    assert not factor.isnan().any()  # every accumulator element is scaled
    assert t.bk == 128
    out = torch.zeros(m, n, dtype=torch.float64)
    for kb in range(kblocks):  # kb = (k_begin + kt * BK) / 128
        sl = slice(kb * 128, (kb + 1) * 128)
        out += (xa[:, sl] @ wq[:, sl].t()) * factor[:m, :, kb]
    out = out * packed.out_scale
    if packed.bias is not None:
        out = out + packed.bias.double()
    return out


@pytest.mark.parametrize("profile,m,n", [("nvidia-l40s", 5, 192), ("nvidia-h200", 40, 320), ("nvidia-l40s", 70, 256)])
def test_emulated_mma_sync_block_kernel_matches_reference(profile, m, n):
    caps = _caps(profile)
    k = 384
    qw, x, bias = _block_data(n, k, m, m + n)
    packed = prepare_w8a8(qw, torch.float16, "e4m3")
    assert packed.scales.shape == (-(-n // 128), k // 128)
    choice = runnable_path(caps, qw.scheme)
    p = plan_w8a8(caps, packed.layout, m, "f16", choice, scheme=SCHEME)
    _check_mma_block_indexing(api.source(p, caps))
    qa = humming.quantize_activation(x, qw.scheme)
    xa = humming.formats.get("e4m3").decode(qa.codes).double()
    out = _emulate_mma_block(p, packed, xa, qa.scale_values())
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out - ref).norm() / ref.norm())
    assert err < 1e-5, err


# ----------------------------------------------------------------------------- checkpoints
def test_compressed_tensors_block_checkpoint_runs_as_w8a8_fp8_block():
    """A DeepSeek-V3-style float8 weight with a [N/128, K/128] weight_scale loads as a weight-only block scheme (the
    tensors carry no activation config); with dynamic per-128 activations it is exactly w8a8-fp8-block and plans the
    block kernels."""
    from humming.checkpoints import compressed_tensors

    g = torch.Generator().manual_seed(5)
    n, k = 256, 384
    wt = (torch.randn(n, k, generator=g) * 4).to(torch.float8_e4m3fn)
    ws = torch.rand(n // 128, k // 128, generator=g) * 0.01 + 0.001
    qw = compressed_tensors.load({"weight": wt, "weight_scale": ws})
    assert qw.scheme.weight_scale.granularity == "block" and qw.scheme.act is None
    w8a8 = qw.with_scheme(qw.scheme.with_(act="e4m3", act_scale="dynamic_group", act_group_size=128))
    assert block_scales_reason(w8a8.scheme) is None
    assert humming.plan(w8a8.scheme, 1024, n, k, profile=H200).kernel_name.startswith("hm_w8a8blk_wgmma_")
    packed = prepare_w8a8_wgmma(w8a8, torch.bfloat16, "e4m3")
    assert torch.equal(packed.scales, ws) and torch.equal(packed.qweight, wt.view(torch.uint8))
    x = torch.randn(3, k, generator=g)
    qa = humming.quantize_activation(x, SCHEME)  # per token per 128, as w8a8-fp8-block quantizes activations
    w = wt.double() * ws.double().repeat_interleave(128, 0).repeat_interleave(128, 1)
    want = qa.dequantize(torch.float64) @ w.t()
    got = humming.reference_gemm(x, w8a8, out_dtype=torch.float32).double()
    assert float((got - want).norm() / want.norm()) < 1e-6
