"""CPU: the register-A W4A16 kernel's addressing emulated in torch against humming.reference_gemm (which global and
table words each lane loads for its a[] registers under the m16n8k16 A-fragment semantics, which shared-memory bytes
the activation copies write and the B descriptor reads, the epilogue's (channel, token) mapping through the staging
tile), the stmatrix staging's lane addresses against stmatrix's documented semantics, the weight ring's slot
arithmetic and the slot descriptors."""
import itertools
import re
from dataclasses import replace

import pytest
import torch
from test_register_a_plans import STSM_KNOB, _caps, _plan, _scheme
from test_wgmma_compile import _read_map, _store_map  # the validated descriptor / swizzle model
from test_wgmma_wna16_compile import _dq_raw_model

import humming
from humming import api
from humming.core.families.mma_wna16.layout import prepare
from humming.core.families.register_a.generator import X16_DECODE
from humming.core.families.register_a.planner import OUT_PAD, RING_2WG
from humming.devices.nvidia import wgmma_rs as nv

H200 = "nvidia-h200"
DT = {"f16": torch.float16, "bf16": torch.bfloat16}


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
    """The plan with the 16-bit staging stores the emulation models (register_a.stmatrix false)."""
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


# (act, scheme, group, M, K, token tile asked, token tile fitted to M where the case checks it, bias, seed)
EMULATED = [(act, name, group, 200, 256 if group != 128 else 384, bt, None, True, len(act) + bt + (group or 0))
            for act, name, group, bt in [("f16", "w4a16", 128, 128), ("bf16", "w4a16-zp", 128, 256),
                                         ("f16", "w4a16-zp", None, 128), ("bf16", "w4a16", None, 256),
                                         ("f16", "w4a16", 64, 256)]]
EMULATED += [(act, name, group, m, 256, 256 if m > 128 else 128, fitted, False, m + fitted)
             for act, name, group, m, fitted in [("f16", "w4a16", 128, 150, 160), ("bf16", "w4a16-zp", None, 90, 96)]]


@pytest.mark.parametrize("act,name,group,m,k,bt,fitted,bias,seed", EMULATED,
                         ids=[f"{c[0]}-{c[1]}-g{c[2]}-m{c[3]}-bt{c[5]}" + (f"-fitted{c[6]}" if c[6] else "")
                              for c in EMULATED])
def test_emulated_kernel_matches_reference(act, name, group, m, k, bt, fitted, bias, seed):
    """The emulated two-warpgroup kernel (cp.async copies; 16-bit staging stores) matches the reference, also with a
    token tile fitted to M (not 128 / 256; the cp.async copies: whole 32-row passes), which indexes its slots,
    staging tile and copy-out like the others."""
    torch.manual_seed(seed)
    dtype = DT[act]
    n = 256
    bias = torch.randn(n).to(dtype) if bias else None
    qw = humming.quantize(torch.randn(n, k) * 0.05, _scheme(name, group), bias=bias)
    packed = prepare(qw, dtype, _caps())  # the weights as the H200 gets them (tile-major pair order)
    assert packed.layout.tile_major
    # the emulation models the cp.async copies; a TMA copy writes the same 128-byte-swizzled slot (the map's swizzle
    # mode is this layout by definition, and the GPU tests run both)
    # (the epilogue's 16-bit staging stores: test_stmatrix_lanes_put_every_value_where_the_stores_did proves the
    # default stmatrix staging puts every value where they do)
    p = _sts16(replace(_plan(m=m, n=n, k=k, act=act, name=name, group=group, bt=bt, tma=False),
                       layout=packed.layout))
    if fitted:
        assert p.tiles.bm == fitted and any("token tile" in r for r in p.reasons), p.explain()
    _check_kernel_indexing(api.source(p, _caps()))
    x = torch.randn(m, k).to(dtype)
    out = _emulate(p, packed, x)
    assert not torch.isnan(out).any()
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out - ref).norm() / ref.norm())
    assert err < (1e-3 if act == "f16" else 5e-3), err


def test_prefetch_ring_covers_every_stage():
    """The ring slot arithmetic of the main loop (stage kt in slot (kt % U) % R, atom kt + PF fetched into slot
    ((kt % U) + PF) % R after kt is decoded) never overwrites an atom before it is decoded, for any K."""
    pf = RING_2WG  # (the kernel's PF)
    r, u = pf + 1, 2 * (pf + 1)
    for ktiles in range(1, 20):
        slots = {s: s for s in range(min(pf, ktiles))}  # slot -> atom held
        for kb in range(0, ktiles, u):
            for uu in range(u):
                kt = kb + uu
                if kt >= ktiles:
                    break
                s = uu % r
                assert slots.get(s) == kt, (ktiles, kt, slots)
                if kt + pf < ktiles:
                    slots[(s + pf) % r] = kt + pf


def _smem_desc(addr: int) -> int:  # make_smem_desc of the nvidia backend, in Python
    return ((addr & 0x3FFFF) >> 4) | (1 << 16) | ((1024 >> 4) << 32) | (1 << 62)


@pytest.mark.parametrize("x_bytes,stages", [(16384, 6), (32768, 4), (32768, 5), (8192, 6), (2048, 4)])
def test_slot_descriptor_is_slot_zeros_plus_the_offset(x_bytes, stages):
    """The kernels add a slot's offset / 16 to slot 0's descriptor (desc0) instead of building each slot's: the same
    64-bit value wherever the slots lie in the 228 KB shared window (the start-address field has 14 bits: no carry)."""
    for x0 in range(0, 228 * 1024 - stages * x_bytes + 1, 1024):
        for s in range(stages):
            assert _smem_desc(x0) + s * (x_bytes >> 4) == _smem_desc(x0 + s * x_bytes), (x0, s)


# ----------------------------------------------------------------------------- the stmatrix staging's lanes
STSM_CASES = [(1024, 4096, 14336), (128, 28672, 8192), (16, 8192, 8192), (600, 8192, 8192), (64, 8192, 8192),
              (128, 8192, 8192)]


def _c_int(expr: str, **names) -> int:
    """A C integer expression of the generated source (shifts, masks, + - *) evaluated with ``names``."""
    py = re.sub(r"\b([A-Za-z_]\w*)\b", lambda m: str(names[m.group(1)]), expr)
    return int(eval(py, {"__builtins__": {}}))  # noqa: S307 (digits and operators only)


@pytest.mark.parametrize("m, n, k", STSM_CASES)
def test_stmatrix_lanes_put_every_value_where_the_stores_did(m, n, k, set_knobs):
    """Both forms stage their output tile with stmatrix .trans where the profile declares stmatrix (the default). The
    lane addresses of the generated source evaluated against stmatrix's documented semantics (PTX ISA: register i of
    lane t holds row t / 4, columns 2 (t % 4), +1 of matrix i; lane 8 i + r gives the address of row r of matrix i;
    .trans stores column c of the matrix into row c) put every value where the 16-bit stores put it."""
    set_knobs({STSM_KNOB: True})
    p = humming.plan("w4a16", m, n, k, profile=H200)
    assert p.path == "wgmma-rs" and p.tiles.stsm and re.search(r"m(_ts)?(_pdl)?(_cs)?_[0-9a-f]{10}$", p.kernel_name), p.explain()
    src = api.source(p)
    assert "sts_u16(o, " not in src and "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in src
    row_expr = re.search(r"const uint32_t stsm_row = (.*?);", src).group(1)
    step_expr = re.search(r"stmatrix_x4_trans\(stsm_row \+ (.*?), v4\[0\]", src).group(1)
    bt, out_ld = p.tiles.bm, p.tiles.bn + 8
    assert "OUT_LD = BC + 8;" in src
    base = re.search(r"stsm_row = (\w+) \+", src).group(1)  # the staging tile (x0, or stream-K's stg0)
    warpgroups = 2 if p.tiles.bn == 128 else 1
    placed = {}
    for wg in range(warpgroups):
        for w in range(4):
            for jp in range(0, bt // 8, 2):
                rows = [_c_int(row_expr, **{base: 0, "lane": lane, "OUT_LD": out_ld, "wg": wg, "w": w})
                        + _c_int(step_expr, jp=jp, OUT_LD=out_ld) for lane in range(32)]
                for i in range(4):  # matrix i: token block jp + i / 2, channels 8 (i % 2) + g
                    j, h = jp + i // 2, i % 2
                    for t in range(32):
                        g, q = t // 4, t % 4
                        for e in range(2):
                            r, c = g, 2 * q + e  # the fragment element register i of lane t holds
                            addr = rows[8 * i + c] + 2 * r  # .trans: column c goes to the row lane 8 i + c gave
                            channel, token = wg * 64 + w * 16 + 8 * h + g, 8 * j + 2 * q + e
                            assert addr == (token * out_ld + channel) * 2, (wg, w, jp, i, t, e)
                            placed[addr] = (token, channel)
    assert len(placed) == bt * 64 * warpgroups  # every value of the tile once
    for lane in range(32):  # 16-byte aligned rows (stmatrix's requirement)
        assert _c_int(row_expr, **{base: 0, "lane": lane, "OUT_LD": out_ld, "wg": 1, "w": 3}) % 16 == 0
    api.compile_plan(p, H200)
