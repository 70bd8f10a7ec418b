"""CPU: the 8-bit mma.sync kernel (W8A8 int8 / fp8) is planned from capabilities, compiles with NVRTC for
every profile whose path it executes, and its PTX holds the intended instruction (never tcgen05 kind::i8
on B300/Rubin, whose INT8 takes the legacy mma.sync path)."""
import itertools
import re

import pytest
import torch
from test_widen_bit_tricks import linear_word  # the linear widening emulated bit for bit

import humming
from humming import api
from humming.capabilities import list_profiles
from humming.core.common.layout import pack_codes_k32, pack_codes_k32_int4
from humming.core.common.paths import choose_path
from humming.core.common.quantized import runs_on_w8a8
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.mma_8bit.layout import W4A8Layout, W8A8Layout, prepare_w4a8
from humming.core.families.mma_8bit.planner import plan_w8a8
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

SCHEMES = ["w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor", "w4a8-int8", "w4a8-fp8", "w4a8-mxfp4"]
CASES = []
for caps in list_profiles(include_abstract=False):
    for name in SCHEMES:
        try:
            choice = choose_path(caps, humming.schemes.get(name))
        except UnsupportedOnDevice:
            continue
        if runs_on_w8a8(choice, humming.schemes.get(name)):
            CASES.append((caps, name, choice))


def test_the_cases_cover_the_legacy_int8_devices():
    names = {(c.name, s) for c, s, _ in CASES}
    assert {("nvidia-b300", "w8a8-int8"), ("nvidia-rubin", "w8a8-int8"), ("nvidia-t4", "w8a8-int8"),
            ("nvidia-l40s", "w8a8-fp8"), ("thead-zhenwu-810e", "w8a8-int8")} <= names
    assert ("nvidia-b300", "w4a8-int8") in names and ("nvidia-a100", "w4a8-int8") in names
    assert not any(c.name in ("nvidia-h200", "nvidia-b200") for c, _, _ in CASES)  # wgmma / tcgen05 planned there


@pytest.mark.parametrize("caps,scheme,choice", CASES, ids=[f"{c.name}-{s}" for c, s, _ in CASES])
def test_compiles_with_the_intended_mma(caps, scheme, choice):
    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    sch = humming.schemes.get(scheme)
    int4 = sch.weight in ("int4", "e2m1")
    layout = (W4A8Layout(choice.a_type, 1024, 2048, sch.weight_scale.group_size, weight_format=sch.weight) if int4
              else W8A8Layout(choice.a_type, 1024, 2048, "channel"))
    for m in (1, 200):
        p = plan_w8a8(caps, layout, m, "f16", choice, scheme=scheme)
        _, mod = api.compile_plan(p, caps)
        mma = set(re.findall(r"mma\.sync\.aligned\.(m\d+n\d+k\d+)\.row\.col\.(\w+)\.(\w+)", mod.ptx))
        if choice.a_type == "s8":
            k16 = caps.find_mma(family="mma_sync", a_type="s8", shape=(16, 8, 32))
            assert mma == ({("m16n8k32", "s32", "s8")} if k16 else {("m8n8k16", "s32", "s8")})
        else:
            assert mma == {("m16n8k32", "f32", "e4m3")}
        assert "tcgen05" not in mod.ptx and "kind::i8" not in mod.ptx and "wgmma" not in mod.ptx
        if int4 and choice.a_type == "s8":
            assert "mul.lo.s32" in mod.ptx or "mul.lo.u32" in mod.ptx or "mad.lo" in mod.ptx  # the sign extension
        if int4 and choice.a_type == "e4m3":
            if sch.weight == "int4":  # the linear widening (the default): its lop3 table, no byte permutes
                assert "lop3.b32" in mod.ptx and ", 0x88888888, 0x46;" in api.source(p, caps)
                assert "prmt.b32" not in mod.ptx
            else:
                assert "prmt.b32" in mod.ptx  # e2m1: the table widening
        if caps.name in ("nvidia-b300", "nvidia-rubin"):
            assert p.path == "legacy" and "kind::i8 not available" in p.explain()


def test_k32_atom_layout_matches_the_kernel_indexing():
    n, k = 128, 128
    codes = torch.randint(0, 256, (n, k), dtype=torch.uint8)
    words = pack_codes_k32(codes).view(n // 64, k // 64, 8, 32, 4)
    for na, ka, s, t, lane, r in itertools.product(range(2), range(2), range(2), range(8), (0, 5, 31), range(2)):
        word = int(words[na, ka, s * 4 + t // 2, lane, (t % 2) * 2 + r]) & 0xFFFFFFFF
        g, q = lane // 4, lane % 4
        for e in range(4):  # register byte e = k 4q + e (+16 for b1) of column t*8 + g
            assert (word >> (8 * e)) & 0xFF == int(codes[na * 64 + t * 8 + g, ka * 64 + s * 32 + r * 16 + q * 4 + e])


def test_w8a8_refuses_what_it_does_not_run():
    caps = api.resolve_profile("nvidia-l40s")
    blk = humming.schemes.get("w8a8-fp8-block")
    assert runs_on_w8a8(choose_path(caps, blk), blk)  # 128x128 blocks: test_w8a8_block_compile.py
    per_token = humming.schemes.get("w8a8-fp8").with_(block="128x128")  # block weights, per-token activations
    assert not runs_on_w8a8(choose_path(caps, per_token), per_token)
    with pytest.raises(humming.ShapeError, match="multiple of 128"):
        plan_w8a8(caps, W8A8Layout("s8", 1024, 1088, "channel"), 1, "f16",
                  choose_path(caps, humming.schemes.get("w8a8-int8")))


def test_k32_nibble_layout_matches_the_kernel_indexing():
    n, k = 128, 128
    codes = torch.randint(0, 16, (n, k), dtype=torch.uint8)
    words = pack_codes_k32_int4(codes).view(n // 64, k // 64, 4, 32, 4)
    for na, ka, s, t, lane in itertools.product(range(2), range(2), range(2), range(8), (0, 13, 31)):
        word = int(words[na, ka, s * 2 + t // 4, lane, t % 4]) & 0xFFFFFFFF
        g, q = lane // 4, lane % 4
        for e in range(4):
            kk, nn = ka * 64 + s * 32 + 4 * q + e, na * 64 + t * 8 + g
            assert (word >> (8 * e)) & 0xF == int(codes[nn, kk])
            assert (word >> (8 * e + 4)) & 0xF == int(codes[nn, kk + 16])


@pytest.mark.parametrize("scheme,widen", [("w4a8-int8", "linear"), ("w4a8-int8[group_size=32]", "linear"),
                                          ("w4a8-fp8", "linear"), ("w4a8-fp8", "prmt"), ("w4a8-mxfp4", "linear"),
                                          ("w4a8-int8[act_order=true]", "linear")])
def test_w4a8_emulated_arithmetic_matches_reference(scheme, widen):
    """What the W4A8 kernel computes, in torch: codes from the packed nibble layout, widened (int4 sign
    extension; int4/e2m1 -> e4m3 are exact, so their values; int4 -> e4m3 by the linear widening: its labels through
    the backend's e4m3x4_of_labels, emulated bit for bit, bytes of the values times 2^-9 against scales times 2^9),
    partial sums per group times the fp32 group scales, per-token activation scales; must equal the reference."""
    sch = humming.schemes.get(scheme)
    torch.manual_seed(len(scheme))
    n, k, m = 128, 256, 5
    group = sch.weight_scale.group_size
    qw = humming.quantize(torch.randn(n, k) * 0.05, sch)
    a_type = "s8" if sch.act == "int8" else "e4m3"
    pk = prepare_w4a8(qw, torch.float16, a_type, widen=widen)
    linear = (sch.weight, a_type) == ("int4", "e4m3") and widen == "linear"
    assert pk.layout.widen == ("prmt" if (sch.weight, a_type, widen) == ("int4", "e4m3", "prmt") else "linear")
    assert (pk.perm is not None) == sch.act_order
    words = pk.qweight.view(n // 64, k // 64, 4, 32, 4).to(torch.int64) & 0xFFFFFFFF
    codes = torch.empty(n, k, dtype=torch.int64)
    for s, t, lane, e in itertools.product(range(2), range(8), range(32), range(4)):
        w = words[:, :, s * 2 + t // 4, lane, t % 4]
        g, q = lane // 4, lane % 4
        nn = torch.arange(n // 64)[:, None] * 64 + t * 8 + g
        kk = torch.arange(k // 64)[None, :] * 64 + s * 32 + 4 * q + e
        codes[nn, kk] = (w >> (8 * e)) & 0xF
        codes[nn, kk + 16] = (w >> (8 * e + 4)) & 0xF
    if linear:  # label -> the e4m3 byte the kernel makes of it (a word of one label in every byte's low nibble)
        byte = torch.tensor([linear_word(label * 0x01010101)[0] & 0xFF for label in range(16)], dtype=torch.uint8)
        wq = byte[codes].view(torch.float8_e4m3fn).double()
    else:
        wq = humming.formats.get(sch.weight).decode(codes.to(torch.uint8)).double()
    # the kernel's scale read: accumulator column t*8 + 2*(lane % 4) + j of atom a takes the table entry at
    # a*64 + (lane % 4)*16 + t*2 + j
    scales = torch.empty(k // group, n, dtype=pk.scales.dtype)
    for a, lane, t, j in itertools.product(range(n // 64), range(4), range(8), range(2)):
        scales[:, a * 64 + t * 8 + 2 * lane + j] = pk.scales[:, a * 64 + lane * 16 + t * 2 + j]
    x = torch.randn(m, k)
    qa = humming.quantize_activation(x if pk.perm is None else x[:, pk.perm], qw.scheme)
    xa = humming.formats.get(sch.act).decode(qa.codes).double()
    out = torch.zeros(m, n, dtype=torch.float64)
    for gi in range(k // group):
        sl = slice(gi * group, (gi + 1) * group)
        out += (xa[:, sl] @ wq[:, sl].t()) * scales[gi].double()
    out *= qa.scale_values().reshape(m, 1).double() * pk.out_scale
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32).double()
    assert float((out - ref).norm() / ref.norm()) < 1e-5


def _prmt(a: int, b: int, sel: int) -> int:
    """PTX prmt.b32 (default mode, selector nibbles < 8): output byte i = byte sel[i] of {b, a}."""
    pool = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(pool[(sel >> (4 * i)) & 7] << (8 * i) for i in range(4))


def test_widening_tables_are_exact():
    """The byte-permute tables of the int4 -> e4m3 and e2m1 -> e4m3 helpers, simulated bit for bit."""
    from humming.core.families.mma_8bit.generator import _INT4_HELPERS

    tables = [int(h, 16) for h in re.findall(r"prmt_b32\(0x([0-9A-F]{8})u, 0x[0-9A-F]{8}u", _INT4_HELPERS)]
    highs = [int(h, 16) for h in re.findall(r"prmt_b32\(0x[0-9A-F]{8}u, 0x([0-9A-F]{8})u", _INT4_HELPERS)]
    (pos_a, neg_a, mag_a), (pos_b, neg_b, mag_b) = tables, highs
    e4m3, e2m1, int4 = (humming.formats.get(f) for f in ("e4m3", "e2m1", "int4"))
    for codes in itertools.product(range(16), repeat=2):
        codes = codes + (codes[0] ^ 8, codes[1] ^ 15)
        t = sum(c << (8 * i) for i, c in enumerate(codes))
        u = t | (t >> 4)
        sel = ((u & 0xFF) | ((u >> 8) & 0xFF00)) & 0x7777
        mask = ((t >> 3) & 0x01010101) * 0xFF
        as_int4 = (_prmt(neg_a, neg_b, sel) & mask) | (_prmt(pos_a, pos_b, sel) & ~mask & 0xFFFFFFFF)
        as_e2m1 = _prmt(mag_a, mag_b, sel) | ((t & 0x08080808) << 4)
        for i, c in enumerate(codes):
            code = torch.tensor([c], dtype=torch.uint8)
            assert e4m3.decode(torch.tensor([(as_int4 >> (8 * i)) & 0xFF], dtype=torch.uint8)) == int4.decode(code)
            assert e4m3.decode(torch.tensor([(as_e2m1 >> (8 * i)) & 0xFF], dtype=torch.uint8)) == e2m1.decode(code)


def test_w4a8_widening_option_on_the_mma_sync_kernel():
    """GemmOptions.w4a8_widen picks the int4 -> e4m3 widening of the mma.sync W4A8 kernel too: by default the linear
    one (labels, scales times 2^9, e4m3x4_of_labels); "prmt", the byte-permute tables on the codes as stored, a kernel
    of its own name; the plan says which."""
    linear = humming.plan("w4a8-fp8", 1024, 1024, 2048, profile="nvidia-l40s")
    assert linear.layout.widen == "linear" and "int4 -> e4m3, linear" in linear.explain()
    src = api.source(linear)
    assert "WIDEN(" not in src and "e4m3x4_of_labels(q[e] & 0x0F0F0F0Fu)" in src
    prmt = humming.GemmOptions(w4a8_widen="prmt")
    table = humming.plan("w4a8-fp8", 1024, 1024, 2048, profile="nvidia-l40s", options=prmt)
    assert table.layout.widen == "prmt" and table.kernel_name != linear.kernel_name
    assert "int4x4_to_e4m3x4(q[e] & 0x0F0F0F0Fu)" in api.source(table) and "by tables" in table.explain()
    assert humming.plan("w4a8-mxfp4", 1024, 1024, 2048, profile="nvidia-l40s",
                        options=prmt).layout.widen == "linear"  # e2m1: one
    with pytest.raises(ValueError, match="w4a8_widen"):
        humming.GemmOptions(w4a8_widen="tables")
    torch.manual_seed(5)
    qw = humming.quantize(torch.randn(128, 256) * 0.05, humming.schemes.get("w4a8-fp8"))
    lin, tab = prepare_w4a8(qw, torch.float16, "e4m3"), prepare_w4a8(qw, torch.float16, "e4m3", widen="prmt")
    assert torch.equal(lin.scales, tab.scales * 512.0) and not torch.equal(lin.qweight, tab.qweight)
