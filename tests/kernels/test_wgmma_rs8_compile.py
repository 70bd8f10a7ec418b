"""CPU: the register-A wgmma W4A8 kernel (sm_90a, the default from M 128, HUMMING_WGMMA_W4A8_RS=0 never; int4 weights widened in
registers as wgmma's A operand, 8-bit activation codes the B operand in swizzled shared memory) is planned only when
opted in, compiles with NVRTC for sm_90a with the register-A 8-bit form, no ldmatrix, no spills and no serialized
wgmmas, and its packing, fragment addressing, promotion and epilogue are emulated in torch against
humming.reference_gemm."""
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
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.register_a8.layout import WgmmaRs8Layout, e4m3_label, prepare_w4a8_rs
from humming.core.families.register_a8.planner import ENV, OUT_PAD, PATH, plan_w4a8_wgmma_rs
from humming.core.quant.quantize import quantize_activation
from humming.errors import UnsupportedOnDevice

H200 = "nvidia-h200"
SCHEME = {"e4m3": "w4a8-fp8", "s8": "w4a8-int8"}


def _caps(name=H200):
    return api.resolve_profile(name)


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _scheme(a_type, group=128):
    sch = humming.schemes.get(SCHEME[a_type])
    return sch.with_(granularity="channel", group_size=None) if group is None else sch.with_(group_size=group)


CASES = list(itertools.product(("e4m3", "s8"), (128, None), ("f16", "bf16"), (True, False), (128, 64)))


@pytest.mark.parametrize("a_type,group,act,producer,chain", CASES,
                         ids=[f"{a}-g{g}-{c}-{'producer' if w else 'lockstep'}-n{n}" for a, g, c, w, n in CASES])
def test_compiles_with_register_a_wgmma(a_type, group, act, producer, chain, monkeypatch):
    """Both variants: the default producer warpgroup (TMA copies of the activation codes, mbarrier slots, 384
    threads) and the lock-step one (every thread's cp.async, a block barrier per stage); each with one m64n128k32
    chain per stage or two m64n64k32 halves into two partials (HUMMING_WGMMA_W4A8_RS_CHAIN=64, wait_group 1)."""
    _need_sm90a()
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CHAIN", str(chain))
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_DIRECT", "0")  # (s8 per channel: promoted, not the default int32 sums)
    caps = _caps()
    k = 4096
    p = plan_w4a8_wgmma_rs(caps, WgmmaRs8Layout(a_type, 1024, k, group or k), 1024, act, scheme=SCHEME[a_type],
                           producer=producer, tokens=128)
    assert p.path == PATH and p.threads == (384 if producer else 256) and p.tiles.bm == 128 and p.tiles.bn == 128
    assert p.tiles.bulk == (2 if producer else 0)
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx, log = mod.ptx, mod.log
    acc = "s32" if a_type == "s8" else "f32"
    tail = r"p;" if a_type == "s8" else r"p, 1, 1;"
    rs = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{chain}k32\.{acc}\.{a_type}\.{a_type} \{{[^}}]*\}}, "
                    rf"\{{%r\d+, ?%r\d+, ?%r\d+, ?%r\d+\}}, %rd\d+, {re.escape(tail)}", ptx)
    assert rs and len(rs) == ptx.count("wgmma.mma_async") and len(rs) % (4 * 128 // chain) == 0  # per unrolled stage
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx)
    assert sorted(set(waits)) == (["0"] if chain == 128 else ["0", "1"]), waits
    assert "C7517" not in log, log
    copy = "cp.async.bulk.tensor.2d" if producer else "cp.async.cg.shared.global"
    for ins in ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0",
                copy, "ld.global.nc.L1::no_allocate.v4.u32", "st.global.v4.u32",
                # the epilogue's staging: stmatrix where declared (the default), else 16-bit shared stores
                "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16" if p.tiles.stsm else "st.shared.u16"):
        assert ins in ptx, ins
    if producer:
        assert "cp.async.cg" not in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx and "bar.sync 1, 256" in ptx
        assert api.tma_boxes(p) == ((1024, k, 128, 128, 1), None)
    assert "ldmatrix" not in ptx and "mma.sync" not in ptx
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 255, log
    assert spills and max(spills) == 0, log
    assert "serialized" not in log, log


WIDE_CASES = list(itertools.product(("e4m3", "s8"), (128, None), ("f16", "bf16")))


@pytest.mark.parametrize("chain", [128, 64], ids=["halves", "quarters"])
@pytest.mark.parametrize("a_type,group,act", WIDE_CASES, ids=[f"{a}-g{g}-{c}" for a, g, c in WIDE_CASES])
def test_wide_form_compiles(a_type, group, act, chain, monkeypatch):
    """The wide form (256 tokens, the default from M 1024): two m64n128k32 register-A chains per stage sharing one
    widened fragment (or four m64n64k32 chains into two partials, HUMMING_WGMMA_W4A8_RS_CHAIN=64: each chain issued
    before the previous one is waited for with wait_group 1), the codes and group scales by bulk copy into the slot
    (no global weight loads in the main loop), the activations by one 256-row tensor copy; no spills (the consumers'
    128 + 64 accumulators fit under setmaxnreg 232), no wait that ptxas had to inject and no serialized wgmma."""
    _need_sm90a()
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CHAIN", str(chain))
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_DIRECT", "0")  # (s8 per channel: promoted, not the default int32 sums)
    caps = _caps()
    k = 4096
    p = plan_w4a8_wgmma_rs(caps, WgmmaRs8Layout(a_type, 1024, k, group or k), 4096, act, scheme=SCHEME[a_type])
    assert (p.tiles.bm, p.tiles.bn, p.threads, p.tiles.bulk, p.instruction.shape) == (256, 128, 384, 2, (64, chain, 32))
    assert p.smem_bytes <= caps.limits.smem_per_block_kb * 1024 and "wide form" in p.explain()
    assert api.tma_boxes(p) == ((4096, k, 256, 128, 1), None)
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx, log = mod.ptx, mod.log
    acc = "s32" if a_type == "s8" else "f32"
    rs = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{chain}k32\.{acc}\.{a_type}\.{a_type} ", ptx)
    assert len(rs) == 4 * 256 // chain == ptx.count("wgmma.mma_async")  # 4 k32 steps x 2 token halves / 4 quarters
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+);", ptx)
    assert sorted(set(waits)) == (["0"] if chain == 128 else ["0", "1"]), waits
    assert "C7517" not in log and "injected" not in log and "C7514" not in log, log
    bulk = ptx.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes")
    # two slabs of codes (+ the group scales), in the producer loop and (PDL) in the loop of the first stages
    assert bulk == (3 if group else 2) * (2 if p.pdl else 1), bulk
    assert "st.shared.f32" in ptx and "ld.shared.f32" in ptx  # the token scales through shared memory (+ group scales)
    if a_type == "e4m3":  # the linear widening (the default): no tables (the prmt widening loads them once)
        assert "int4_to_e4m3x8(wq[j >> 2][j & 3], a[j >> 1][2 * (j & 1)], a[j >> 1][2 * (j & 1) + 1]);" in src
        assert "int4n8_to_e4m3x8_x(" not in src.split("__global__")[1] and "la0 = lds_32" not in src
    # the lane's slot addresses carry a loaded zero, so ptxas keeps them in registers instead of recomputing them
    assert "zero = lds_32(held0 + 16);" in src and "lane * 16 + zero;" in src
    assert ("lds_f32(slane + s * S_BYTES + 32)" in src) == bool(group)  # the group scales (per channel: loaded once)
    for ins in ("cp.async.bulk.tensor.2d", "setmaxnreg.inc.sync.aligned.u32 232", "bar.sync 1, 256",
                "ld.shared.v4.u32", "fence.proxy.async.shared::cta", "st.global.v4.u32"):
        assert ins in ptx, ins
    assert "ld.global.nc.L1::no_allocate.v4.u32" not in ptx and "ldmatrix" not in ptx and "cp.async.cg" not in ptx
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and max(spills) == 0, log
    assert "serialized" not in log, log


def test_wide_form_selection(monkeypatch):
    """The wide form (256 tokens, fitted to M: 128 / 192 from WIDE_MIN_M) with the producer warpgroup where its blocks
    fill 3/4 of the SMs, the narrow form of 128 below or without it; the environment forces either; asking for the wide form without the producer warpgroup is refused
    with the reason."""
    from humming.core.families.register_a8 import planner as rs8

    caps = _caps()
    sms = caps.limits.sms
    big, small = WgmmaRs8Layout("e4m3", 28672, 4096, 128), WgmmaRs8Layout("e4m3", 8192, 4096, 128)
    monkeypatch.delenv(rs8.WIDE_ENV, raising=False)
    assert rs8.WIDE_MIN_M == 128 and not plan_w4a8_wgmma_rs(caps, big, 127, "f16").tiles.wide
    wide128 = plan_w4a8_wgmma_rs(caps, big, 128, "f16").tiles  # 224 blocks: the wide form at 128 tokens
    assert (wide128.bm, wide128.wide, wide128.prefetch) == (128, 1, 0)
    assert plan_w4a8_wgmma_rs(caps, big, 192, "f16").tiles.bm == 192 and plan_w4a8_wgmma_rs(caps, big, 256, "f16").tiles.bm == 256
    assert plan_w4a8_wgmma_rs(caps, small, 128, "f16").tiles.wide == 0  # 64 blocks: the narrow form
    assert plan_w4a8_wgmma_rs(caps, small, 256, "f16").tiles.bm == 128  # 64 blocks: fewer than 3/4 of the SMs
    assert plan_w4a8_wgmma_rs(caps, small, 512, "f16").tiles.bm == (256 if 128 >= 0.75 * sms else 128)
    assert plan_w4a8_wgmma_rs(caps, small, 4096, "f16").tiles.bm == 256
    assert plan_w4a8_wgmma_rs(caps, big, 4096, "f16", producer=False).tiles.bm == 128
    with pytest.raises(UnsupportedOnDevice, match="producer warpgroup"):
        plan_w4a8_wgmma_rs(caps, big, 4096, "f16", producer=False, tokens=256)
    monkeypatch.setenv(rs8.WIDE_ENV, "128")
    assert plan_w4a8_wgmma_rs(caps, big, 4096, "f16").tiles.bm == 128
    monkeypatch.setenv(rs8.WIDE_ENV, "256")
    assert plan_w4a8_wgmma_rs(caps, small, 128, "f16").tiles.bm == 256
    monkeypatch.setenv(rs8.WIDE_ENV, "192")
    with pytest.raises(ValueError, match="HUMMING_WGMMA_W4A8_RS_BT"):
        plan_w4a8_wgmma_rs(caps, big, 4096, "f16")
    monkeypatch.delenv(rs8.WIDE_ENV)
    for chain in (64, 128):  # the chain width of both forms
        monkeypatch.setenv(rs8.CHAIN_ENV, str(chain))
        assert plan_w4a8_wgmma_rs(caps, big, 4096, "f16").instruction.shape == (64, chain, 32)
        assert plan_w4a8_wgmma_rs(caps, big, 128, "f16").instruction.shape == (64, chain, 32)
    monkeypatch.setenv(rs8.CHAIN_ENV, "32")
    with pytest.raises(ValueError, match="HUMMING_WGMMA_W4A8_RS_CHAIN"):
        plan_w4a8_wgmma_rs(caps, big, 4096, "f16")


def test_selection_default_from_m_128(monkeypatch):
    monkeypatch.setenv("HUMMING_ACT_WIDEN", "0")  # the native 8-bit kernels (not widened)
    """Default: M >= 128 (measured faster than the warp-specialised kernel at M 128-4096); =0: never."""
    monkeypatch.delenv(ENV, raising=False)
    for name in ("w4a8-fp8", "w4a8-int8"):
        assert humming.plan(name, 128, 1024, 4096, profile=H200).path == PATH
        assert humming.plan(name, 127, 1024, 4096, profile=H200).path != PATH
    monkeypatch.setenv(ENV, "0")
    for name in ("w4a8-fp8", "w4a8-int8"):
        assert humming.plan(name, 4096, 1024, 4096, profile=H200).path != PATH
    monkeypatch.setenv(ENV, "1")
    assert humming.plan("w4a8-fp8", 128, 1024, 4096, profile=H200).path == PATH
    for a_type, group in itertools.product(("e4m3", "s8"), (128, None)):
        p = humming.plan(_scheme(a_type, group), 1024, 1024, 4096, profile=H200)
        assert p.path == PATH and ENV in p.explain(), p.explain()
    assert humming.plan("w4a8-fp8", 127, 1024, 4096, profile=H200).path != PATH
    assert humming.plan(_scheme("e4m3", 64), 1024, 1024, 4096, profile=H200).path != PATH
    assert humming.plan("w4a8-int8", 1024, 1024, 4096, profile="nvidia-a100").path != PATH
    assert humming.plan("w8a8-fp8", 1024, 1024, 4096, profile=H200).path != PATH


# ----------------------------------------------------------------------------- emulation
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
def test_emulated_kernel_matches_reference(a_type, group, act, widen, monkeypatch):
    # the emulation models the promoted loop (s8 per channel: its int32 sums across stages are GPU-tested,
    # tests/gpu/test_wgmma_rs8_direct_gpu.py)
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_DIRECT", "0")
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
def test_block_rasterization_covers_every_tile_once(raster, monkeypatch):
    """HUMMING_WGMMA_W4A8_RS_RASTER: the generated kernel's block -> tile statements (read from the source and
    evaluated here with the same integer arithmetic) give every (token tile, channel tile) of the grid exactly once,
    for grids whose token tiles are and are not a multiple of the group; blocks in a group run its token tiles
    for one channel tile after another."""
    from humming.core.families.register_a8 import planner as rs8

    monkeypatch.setenv(rs8.RASTER_ENV, str(raster))
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


@pytest.mark.parametrize("a_type,group", [("e4m3", 128), ("s8", None)])
def test_wide_form_programmatic_dependent_launch(a_type, group, monkeypatch, compiled_without_spills):
    """HUMMING_WGMMA_W4A8_RS_PDL=1 (off by default: measured slower): the wide form is launched with PDL behind the
    activation quantizer where the profile declares griddepcontrol:
    its producer copies the first STAGES stages' codes and scales, then griddepcontrol.wait, then every activation
    tensor copy; the token-scale warp waits before reading them, the consumers before their loop. HUMMING_PDL=0
    gives back the kernel without PDL (another name); stream-K and cluster plans are never PDL-launched."""
    caps = _caps()
    lay = WgmmaRs8Layout(a_type, 1024, 4096, group or 4096)
    monkeypatch.delenv("HUMMING_PDL", raising=False)
    monkeypatch.delenv("HUMMING_WGMMA_W4A8_RS_PDL", raising=False)
    assert not plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type]).pdl  # the default
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_PDL", "1")
    p = plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type])
    assert p.pdl and "_pdl_" in p.kernel_name and "griddepcontrol.wait" in p.explain()
    src = api.source(p, caps)
    producer = src[src.index("// programmatic dependent launch: the first stages' weights"):src.index("} else if (warp")]
    wait = producer.index("pdl_wait();")
    assert "mbar_expect_tx(full, STAGE_TX);" in producer[:wait] and "bulk_copy_g2s(w0" in producer[:wait]
    assert "tma_load_2d" not in producer[:wait] and "tma_load_2d" in producer[wait:]
    tokens = src[src.index("} else if (warp == THREADS / 32 + 1)"):src.index("return;")]
    assert tokens.index("pdl_wait();") < tokens.index("load_f32(TS")
    consumers = src[src.index("setmaxnreg_inc<232>();"):]
    assert consumers.count("pdl_wait();") == 1 and consumers.index("pdl_wait();") < consumers.index("for (int kt")
    mod = compiled_without_spills(p, caps)
    assert "griddepcontrol.wait" in mod.ptx and "C75" not in mod.log
    monkeypatch.setenv("HUMMING_PDL", "0")
    off = plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type])
    assert not off.pdl and off.kernel_name != p.kernel_name and "pdl_wait" not in api.source(off, caps)
    monkeypatch.delenv("HUMMING_PDL")
    sk = plan_w4a8_wgmma_rs(caps, WgmmaRs8Layout(a_type, 8192, 8192, group or 8192), 768, "f16",
                            scheme=SCHEME[a_type])
    assert sk.tiles.streamk and not sk.pdl
    monkeypatch.setenv("HUMMING_WGMMA_W4A8_RS_CLUSTER", "2")
    cl = plan_w4a8_wgmma_rs(caps, lay, 4096, "f16", scheme=SCHEME[a_type])
    assert cl.tiles.cluster and not cl.pdl


def test_widening_switch_picks_layout_and_kernel(monkeypatch):
    """HUMMING_W4A8_WIDEN: unset, the linear widening (no tables, scales times 2^9); "prmt", the table widening
    (its four tables held in registers), a kernel of its own name; anything else is refused with the choices. The
    table form compiles for sm_90a without spills."""
    _need_sm90a()
    monkeypatch.delenv("HUMMING_W4A8_WIDEN", raising=False)
    linear = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile=H200)
    assert linear.layout.widen == "linear" and "int4 -> e4m3, linear" in linear.explain()
    src = api.source(linear, _caps())
    body = src.split("__global__")[1]
    assert "int4_to_e4m3x8(" in body and "int4n8_to_e4m3x8_x(" not in body and "la0" not in body
    monkeypatch.setenv("HUMMING_W4A8_WIDEN", "prmt")
    table = humming.plan("w4a8-fp8", 4096, 8192, 8192, profile=H200)
    assert table.layout.widen == "prmt" and table.kernel_name != linear.kernel_name
    assert "int4 -> e4m3 by tables (HUMMING_W4A8_WIDEN=prmt)" in table.explain()
    src = api.source(table, _caps())
    body = src.split("__global__")[1]
    assert "int4n8_to_e4m3x8_x(" in body and "const uint32_t la0 = lds_32(held0), la1 = lds_32(held0 + 4);" in body
    log = compile_cuda(src, [table.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False).log
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert spills and max(spills) == 0, log
    assert humming.plan("w4a8-int8", 4096, 8192, 8192, profile=H200).layout.widen == "linear"  # s8: one widening
    monkeypatch.setenv("HUMMING_W4A8_WIDEN", "lut")
    with pytest.raises(ValueError, match="linear, prmt"):
        humming.plan("w4a8-fp8", 4096, 8192, 8192, profile=H200)


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
