"""CPU: the register-A W4A8 family's arithmetic emulated in torch: the int4 widening tables (linear and prmt) and the
linear layout's scales, the lock-step kernel's packing, fragment addressing, swizzled activation reads, promotion and
epilogue against humming.reference_gemm, and the block -> tile rasterization statements of the generated source."""
import itertools
import re
from dataclasses import replace

import pytest
import torch
from test_wgmma_compile import _read_map, _store_map  # the validated descriptor / swizzle model
from test_widen_bit_tricks import _tables as _widen_tables  # the widening's tables and its bit-exact emulation
from test_widen_bit_tricks import linear_word as _linear_word
from test_widen_bit_tricks import per_word as _widen_word

import humming
from humming import api
from humming.core.common.layout import LINEAR_SCALE, e4m3_linear_label
from humming.core.families.register_a8.layout import WgmmaRs8Layout, e4m3_label, prepare_w4a8_rs
from humming.core.families.register_a8.planner import DIRECT_S8_KNOB, OUT_PAD, RASTER_KNOB, plan_w4a8_wgmma_rs
from humming.core.quant.quantize import quantize_activation

H200 = "nvidia-h200"
SCHEME = {"e4m3": "w4a8-fp8", "s8": "w4a8-int8"}


def _caps():
    return api.resolve_profile(H200)


def _scheme(a_type, group=128):
    sch = humming.schemes.get(SCHEME[a_type])
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


def _check_kernel_indexing(src: str) -> None:
    """The emulation below mirrors these statements of the generated kernel; change both together."""
    for text in (
        "const int slab = n0 / 64 + wg;",
        "const uint32_t* wsrc = Bw + (size_t)slab * ktiles * STAGE_WORDS + w * 256 + lane * 4;",
        "load_g128(wq[", "][0], p);", "][1], p + 128);",
        "const int tab = slab * 64 + 16 * w + g;",
        *(("int4n8_to_e4m3x8_x(wq[s][j >> 2][j & 3], la0, la1, lb0, lb1, a[j >> 1][2 * (j & 1)], "
           "a[j >> 1][2 * (j & 1) + 1]);",) if "int4n8_to_e4m3x8_x(wq" in src else
          ("int4_to_e4m3x8(wq[s][j >> 2][j & 3], a[j >> 1][2 * (j & 1)], a[j >> 1][2 * (j & 1) + 1]);",)
          if "int4_to_e4m3x8(wq" in src else ("a[j >> 1][2 * (j & 1)] = ", "a[j >> 1][2 * (j & 1) + 1] = ")),
        "copy_16_async(base + lswz + i * 32 * 128, ok ? a_src + ((size_t)32 * i * K + kt * BK) : A, ok);",
        "const uint64_t desc_x = make_smem_desc(x0 + (kt % STAGES) * X_BYTES);",
        # two 64-token halves into two partials (the default chain; per token the same sums as one 128-token partial)
        "wgmma_k32_rs(pa, a[ks], desc_x + 0 * (WT * BK / 16) + 2 * ks, ks > 0);",
        "wgmma_k32_rs(pb, a[ks], desc_x + 1 * (WT * BK / 16) + 2 * ks, ks > 0);",
        "facc[WG_ACC_REGS * 0 + 4 * j + 0] += ", "(pb[4 * j + 2]) * sc1;",
        "const int ch = wg * 64 + w * 16 + 8 * h + g;",
        "const uint32_t o = x0 + ((8 * j + 2 * q) * OUT_LD + ch) * 2;",
        "const int c = tid + THREADS * i, row = c >> 4, ch = c & 15;",
    ):
        assert text in src, text


def _lut_from_prmt() -> torch.Tensor:
    """label -> e4m3 byte of the backend's widening (emulated bit for bit in test_widen_bit_tricks)."""
    tables = _widen_tables()
    return torch.tensor([_widen_word(label, *tables)[0] & 0xFF for label in range(16)], dtype=torch.int64)


def _lut_linear() -> torch.Tensor:
    """label -> e4m3 byte of the backend's linear widening (emulated bit for bit in test_widen_bit_tricks)."""
    return torch.tensor([_linear_word(label)[0] & 0xFF for label in range(16)], dtype=torch.int64)


def _widen(word: torch.Tensor, a_type: str, widen: str = "linear") -> tuple[torch.Tensor, torch.Tensor]:
    """(register of row g, register of row g + 8) as [..., 4] byte values (k order) of one 32-bit code word."""
    if a_type == "s8":
        lo = ((word << 4) & 0xF0F0F0F0)
        hi = word & 0xF0F0F0F0
        return ([(lo >> (8 * e)) & 0xFF for e in range(4)], [(hi >> (8 * e)) & 0xFF for e in range(4)])
    if widen == "linear":  # byte e: the label of row g in the low nibble, of row g + 8 in the high one
        lut = _lut_linear()
        return ([lut[(word >> (8 * e)) & 0xF] for e in range(4)], [lut[(word >> (8 * e + 4)) & 0xF] for e in range(4)])
    lut = _lut_from_prmt()
    return ([lut[(word >> (4 * e)) & 0xF] for e in range(4)], [lut[(word >> (16 + 4 * e)) & 0xF] for e in range(4)])


def _byte_value(b: torch.Tensor, a_type: str) -> torch.Tensor:
    b = b.to(torch.int64) & 0xFF
    if a_type == "s8":
        return torch.where(b >= 128, b - 256, b).double()
    return b.to(torch.uint8).view(torch.float8_e4m3fn).double()


def test_int4_to_e4m3_table_is_exact():
    lut = _lut_from_prmt()
    vals = _byte_value(lut[e4m3_label(torch.arange(16))], "e4m3")  # code -> its label -> the widened byte
    assert vals.tolist() == [float(c - 16 if c >= 8 else c) for c in range(16)]
    lut = _lut_linear()
    vals = _byte_value(lut[e4m3_linear_label(torch.arange(16))], "e4m3") * LINEAR_SCALE
    assert vals.tolist() == [float(c - 16 if c >= 8 else c) for c in range(16)]


def _warpgroup_a(packed, a_type: str, slab: int, kt: int, ks: int) -> torch.Tensor:
    """The 64 x 32 A operand the warpgroup of ``slab`` supplies for k32 step ks of stage kt, built lane by lane from
    the words each lane loads and the m16n8k32 A-fragment layout of each warp."""
    ktiles = packed.layout.k // 128
    words = packed.qweight.to(torch.int64) & 0xFFFFFFFF
    w_, lane = torch.meshgrid(torch.arange(4), torch.arange(32), indexing="ij")
    g, q = lane // 4, lane % 4
    a = torch.full((64, 32), float("nan"), dtype=torch.float64)
    for sub in range(2):
        j = 2 * ks + sub
        word = words[slab * ktiles * 1024 + kt * 1024 + w_ * 256 + (j >> 2) * 128 + lane * 4 + (j & 3)]
        lo, hi = _widen(word, a_type, packed.layout.widen)
        for h, regs in ((0, lo), (1, hi)):  # a[ks][2 sub + h]: row g + 8h, k 16 sub + 4q + e
            for e in range(4):
                rows, cols = 16 * w_ + g + 8 * h, 16 * sub + 4 * q + e
                assert torch.isnan(a[rows, cols]).all(), "two registers claim one element"
                a[rows, cols] = _byte_value(regs[e], a_type)
    assert not torch.isnan(a).any()
    return a


def _emulate(p, packed, codes: torch.Tensor, token_scale: torch.Tensor, dtype) -> torch.Tensor:
    a_type, stages = packed.layout.a_type, p.tiles.stages
    m, n, k = p.m, p.n, p.k
    bt, x0, x_bytes, ld = 128, 1024, 128 * 128, 128 + OUT_PAD
    smem = torch.zeros(x0 + stages * x_bytes, dtype=torch.uint8)
    stores = {s: _store_map(bt, x0 + s * x_bytes) for s in range(stages)}
    reads = {(s, ks): _read_map(bt, x0 + s * x_bytes, ks) for s in range(stages) for ks in range(4)}
    per_channel = packed.layout.group != 128
    table = packed.scales.double()
    out = torch.full((m, n), float("nan"), dtype=torch.float64)
    a_cache = {}
    for bx, by in itertools.product(range(-(-m // bt)), range(n // 128)):
        m0, n0 = bx * bt, by * 128
        facc = torch.zeros(2, 64, bt, dtype=torch.float64)
        for kt in range(k // 128):
            slot = kt % stages
            tile = torch.zeros(bt, 128, dtype=torch.uint8)
            rows = codes[m0:m0 + bt, kt * 128:(kt + 1) * 128]
            tile[:rows.shape[0]] = rows
            smem[stores[slot].flatten()] = tile.flatten()
            for wg in range(2):
                slab = n0 // 64 + wg
                part = torch.zeros(64, bt, dtype=torch.float64)
                for ks in range(4):
                    key = (slab, kt, ks)
                    if key not in a_cache:
                        a_cache[key] = _warpgroup_a(packed, a_type, *key)
                    b = _byte_value(smem[reads[(slot, ks)]], a_type)  # [bt tokens, 32 k]
                    part += a_cache[key] @ b.t()
                # promotion: the lane's channels tab = 64 slab + 16 w + g and tab + 8 (rows of the fragment)
                srow = 0 if per_channel else kt
                sc = table[srow, slab * 64: slab * 64 + 64]
                if a_type == "e4m3":
                    part = part.float().double()  # the partial is an fp32 accumulator
                facc[wg] += (part.float() * sc.float()[:, None]).double()
        stage = torch.full((bt * ld,), -1, dtype=torch.int64)
        bias = torch.zeros(128, dtype=torch.float64) if packed.bias is None else packed.bias[n0:n0 + 128].double()
        for wg, w, lane in itertools.product(range(2), range(4), range(32)):
            g, q = lane // 4, lane % 4
            for j, h, e in itertools.product(range(bt // 8), range(2), range(2)):
                ch = wg * 64 + w * 16 + 8 * h + g
                tok = 8 * j + 2 * q + e
                ts = float(token_scale[m0 + tok]) * packed.out_scale if m0 + tok < m else packed.out_scale
                v = torch.tensor(float(facc[wg, 16 * w + g + 8 * h, tok]) * ts + float(bias[ch])).to(dtype)
                o = (8 * j + 2 * q) * ld + ch + e * ld
                assert stage[o] == -1, "two stores to one staging value"
                stage[o] = int(v.reshape(1).view(torch.int16).to(torch.int64)[0]) & 0xFFFF
        for tid, i in itertools.product(range(256), range(bt * 16 // 256)):
            c = tid + 256 * i
            row, ch = c >> 4, c & 15
            vals = stage[row * ld + ch * 8: row * ld + ch * 8 + 8]
            assert (vals >= 0).all(), "the copy-out reads a staging value nobody wrote"
            if m0 + row < m:
                b = torch.where(vals >= 32768, vals - 65536, vals).to(torch.int16).view(dtype)
                out[m0 + row, n0 + ch * 8: n0 + ch * 8 + 8] = b.double()
    return out


@pytest.mark.parametrize("a_type,group,act,widen", [("e4m3", 128, "f16", "linear"), ("e4m3", 128, "f16", "prmt"),
                                                    ("s8", 128, "bf16", "linear"), ("e4m3", None, "bf16", "linear"),
                                                    ("s8", None, "f16", "linear")])
def test_emulated_kernel_matches_reference(a_type, group, act, widen, set_knobs):
    # the emulation models the promoted loop (s8 per channel: its int32 sums across stages are GPU-tested,
    # tests/gpu/test_register_a8_gpu.py)
    set_knobs({DIRECT_S8_KNOB: False})
    torch.manual_seed(7 + (group or 0))
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16}[act]
    m, n, k = 200, 256, 384
    sch = _scheme(a_type, group)
    bias = torch.randn(n).to(dtype)
    qw = humming.quantize(torch.randn(n, k) * 0.05, sch, bias=bias)
    packed = prepare_w4a8_rs(qw, dtype, a_type, widen=widen)
    assert packed.layout.widen == widen
    # the emulation models the lock-step kernel's copies; the producer variant computes the same way (GPU-tested)
    p = plan_w4a8_wgmma_rs(_caps(), packed.layout, m, act, scheme=sch.name, producer=False)
    # (the epilogue's 16-bit staging stores: test_wgmma_rs_stsm_compile proves the default stmatrix staging puts every
    # value where they do)
    p = replace(p, tiles=replace(p.tiles, stsm=0))
    _check_kernel_indexing(api.source(p, _caps()))
    x = torch.randn(m, k).to(dtype)
    qa = quantize_activation(x, sch)
    assert qa.mode == "dynamic_token"
    codes = qa.codes.contiguous().view(torch.uint8) if qa.codes.dtype != torch.uint8 else qa.codes
    token_scale = qa.scale_values().reshape(-1).to(torch.float32)
    out = _emulate(p, packed, codes, token_scale, dtype)
    assert not torch.isnan(out).any()
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32).double()
    err = float((out - ref).norm() / ref.norm())
    assert err < 5e-3, err


@pytest.mark.parametrize("raster", [0, 1, 3, 4])
def test_block_rasterization_covers_every_tile_once(raster, set_knobs):
    """register_a8.raster: the generated kernel's block -> tile statements (read from the source and evaluated here
    with the same integer arithmetic) give every (token tile, channel tile) of the grid exactly once, for grids whose
    token tiles are and are not a multiple of the group; blocks in a group run its token tiles for one channel tile
    after another."""
    set_knobs({RASTER_KNOB: raster})
    caps = _caps()
    p = plan_w4a8_wgmma_rs(caps, WgmmaRs8Layout("e4m3", 1024, 4096, 128), 4096, "f16", scheme="w4a8-fp8")
    assert p.tiles.raster == raster and ("rasterized" in p.explain()) == bool(raster)
    src = api.source(p, caps)
    assert f"constexpr int RASTER = {raster};" in src
    head = src[src.index("  const int g = lane >> 2, q = lane & 3;\n"):src.index("  const int ktiles = K / BK;")]
    stmts = [ln.split("//")[0].strip().removeprefix("const int ").rstrip(";") for ln in head.splitlines()[1:]]
    for gx, gy in ((16, 8), (7, 5), (1, 3), (5, 1)):
        seen = []
        for by, bx in itertools.product(range(gy), range(gx)):  # launch order: x fastest
            env = {"blockIdx": type("B", (), {"x": bx, "y": by}), "gridDim": type("G", (), {"x": gx, "y": gy}),
                   "RASTER": raster, "BT": 1, "BC": 1, "min": min, "int": int}
            for stmt in stmts:
                for part in re.split(r", (?=\w+ = )", stmt):
                    name, expr = part.split(" = ", 1)
                    env[name] = eval(expr.replace("(int)", "").replace("/", "//"), env)  # non-negative ints only
            seen.append((env["m0"], env["n0"]))
        assert sorted(seen) == sorted(itertools.product(range(gx), range(gy))), (raster, gx, gy)
        if raster and gx > raster and gy > 1:  # the first blocks: the first group's token tiles on channel tile 0, then 1
            assert seen[:2 * min(raster, gx)] == [(m, n) for n in (0, 1) for m in range(min(raster, gx))]


def test_linear_layout_scales_carry_two_to_the_ninth():
    """The linear widening's bytes are the codes' values times 2^-9: its packed scales are the table widening's times
    2^9 (exactly), its words differ, and the s8 layout ignores the choice."""
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(128, 256) * 0.05, _scheme("e4m3", 128))
    lin, tab = prepare_w4a8_rs(qw, torch.float16, "e4m3"), prepare_w4a8_rs(qw, torch.float16, "e4m3", widen="prmt")
    assert (lin.layout.widen, tab.layout.widen) == ("linear", "prmt")
    assert torch.equal(lin.scales, tab.scales * LINEAR_SCALE) and not torch.equal(lin.qweight, tab.qweight)
    with pytest.raises(ValueError, match="not 'lut'"):
        prepare_w4a8_rs(qw, torch.float16, "e4m3", widen="lut")
