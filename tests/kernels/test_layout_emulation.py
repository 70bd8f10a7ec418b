"""CPU emulation of what the WnA16 kernels compute from a prepared weight: unpack the atom layout with the
kernel's own indexing, widen codes with the same bit placement, add zeros and multiply scales in the
activation type (round-to-nearest, as add.rn/mul.rn do), then accumulate in fp32 and apply the epilogue.
It must agree with humming.reference_gemm, and no dequantized weight may overflow or fall subnormal."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.mma_wna16.layout import prepare

ACT = {torch.float16: "f16", torch.bfloat16: "bf16"}
TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}
SCHEMES = ["w1a16", "w4a16", "w4a16-zp", "w8a16", "w8a16-zp", "w3a16", "w2a16", "w2a16-zp", "w1a16-ternary",
           "w4a16-fp4", "w8a16-fp8", "w4a16-nvfp4", "w4a16-mxfp4", "mxint4",
           "w2a16-zp[weight=uint1]", "w2a16-zp[weight=uint3]", "w4a16[weight=int5]", "w4a16[weight=int6]",
           "w4a16[weight=int7]", "w8a8-fp8-block[act=none]"]


def unpack_atoms(qweight: torch.Tensor, n: int, k: int, cb: int, tile_major: bool = False) -> torch.Tensor:
    """Kernel indexing: lane l, k16 step ks, n8 tile nt, register r, half h -> (n, k), in either pair order."""
    ppw = 16 // cb
    words = qweight.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    words = words.view(n // 64, k // 64, cb, 32, 4).permute(0, 1, 3, 2, 4).reshape(n // 64, k // 64, 32, 4 * cb)
    codes = torch.empty(n, k, dtype=torch.int64)
    for lane in range(32):
        g, q = lane // 4, lane % 4
        for ks in range(4):
            for nt in range(8):
                for r in range(2):
                    # humming.core.common.layout.pair_index_c
                    p = ((nt >> 1) * 4 + ks) * 4 + (nt & 1) * 2 + r if tile_major else (ks * 8 + nt) * 2 + r
                    w = words[:, :, lane, p // ppw]  # [na, ka]
                    for h in range(2):
                        code = (w >> ((p % ppw) * cb + 16 * h)) & ((1 << cb) - 1)
                        nn = torch.arange(n // 64) * 64 + nt * 8 + g
                        kk = torch.arange(k // 64) * 64 + ks * 16 + r * 8 + q * 2 + h
                        codes[nn[:, None], kk[None, :]] = code
    return codes


def unpermute(t: torch.Tensor) -> torch.Tensor:
    rows, n = t.shape
    return t.view(rows, n // 64, 8, 8).transpose(-1, -2).reshape(rows, n)


def widen(codes: torch.Tensor, dec, dtype) -> torch.Tensor:
    """The backend's dq_raw in torch: raw activation-typed values."""
    if dec.kind == "int":
        if dec.int_path == "magic":
            bits = (codes & dec.code_mask) | dec.magic_bits
            return bits.to(torch.int16).view(dtype) if bits.max() < 2**15 else bits.to(torch.int32).to(torch.int16).view(dtype)
        return (codes & 0xFF).to(torch.float32).to(dtype)
    man = 10 if dtype == torch.float16 else 7
    em_bits = dec.exp_bits + dec.man_bits
    em = (codes & ((1 << em_bits) - 1)) << (man - dec.man_bits)
    sign = ((codes >> em_bits) & 1) << 15
    bits = em | sign
    bits = torch.where(bits >= 2**15, bits - 2**16, bits)
    return bits.to(torch.int16).view(dtype)


@pytest.mark.parametrize("profile", [None, "nvidia-h200"], ids=["no-profile", "h200"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_emulated_kernel_matches_reference(scheme, dtype, profile):
    torch.manual_seed(sum(map(ord, scheme)))
    n, k = (320, 384) if "block" in scheme else (128, 256)  # 128x128 blocks: three along N, the last partial
    qw = humming.quantize(torch.randn(n, k) * 0.05, scheme)
    pk = prepare(qw, dtype, None if profile is None else api.resolve_profile(profile))
    lay, dec = pk.layout, pk.layout.decode
    # the H200 gets the tile-major pair order where its register-A wgmma kernels take the weights by default (int4
    # with groups of 64-256 or per channel: not mxint4's groups of 32); everything else step-major
    assert lay.tile_major == (profile is not None and scheme in ("w4a16", "w4a16-zp"))
    codes = unpack_atoms(pk.qweight, n, k, dec.container, lay.tile_major)
    expect = qw.codes().to(torch.int64)
    if dec.kind == "int" and humming.formats.get(qw.scheme.weight).signed:
        expect = expect ^ (1 << (dec.bits - 1))
    if pk.perm is not None:
        expect = expect[:, pk.perm]
    assert torch.equal(codes, expect), "atom layout does not round-trip through the kernel's indexing"

    w = widen(codes, dec, dtype)
    if lay.zero_float:  # exact q, then one fma with -z * s from the zero table
        if dec.zero_bias:
            w = w + torch.tensor(-dec.zero_bias).to(dtype)
        s = unpermute(pk.scales.float()).to(dtype).t().repeat_interleave(lay.scale_group, dim=1)
        z = unpermute(pk.zeros.float()).to(dtype).t().repeat_interleave(lay.zero_group, dim=1)
        w = (w.float() * s.float() + z.float()).to(dtype)  # one rounding, as fma does
    elif dec.kind == "int":
        if lay.zero_group:
            z = unpermute(pk.zeros.float()).to(dtype)  # [rows, N] of -(magic + zero)
            zk = z.t().repeat_interleave(k // z.shape[0], dim=1) if lay.zero_group > 0 else z.t().expand(n, k)
        else:
            zk = torch.full((n, k), lay.zero_const).to(dtype)
        w = w + zk
    if lay.scale_group and not lay.zero_float:
        s = unpermute(pk.scales.float()).to(dtype)
        w = w * s.t().repeat_interleave(lay.scale_group, dim=1)
    finfo = torch.finfo(dtype)
    nz = w.float().abs()[w.float() != 0]
    assert torch.isfinite(w.float()).all(), "a dequantized weight overflowed"
    if lay.scale_group:  # products rounded in the activation type must stay normal (raw codes are exact anyway)
        assert (nz >= finfo.tiny).all(), f"dequantized weights fall subnormal (min {float(nz.min()):.3g})"
    x = torch.randn(5, k).to(dtype)
    xk = x if pk.perm is None else x[:, pk.perm]
    y = (xk.double() @ w.double().t()) * pk.out_scale
    if pk.channel_scale is not None:
        y = y * pk.channel_scale.double()
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32).double()
    err = float((y - ref).norm() / ref.norm())
    assert err <= TOL[dtype], f"relative error {err:.2e}"


def test_tile_kernel_reads_the_tile_major_order():
    """The mma.sync tile kernel runs tile-major weights where the register-A kernels do not (e.g. the knob
    register_a.min_m null, or a tuned tile entry): one 4-byte shared load per tile and step. At the 254-255-register
    limit of the M=128 tile ptxas may spill up to 8 bytes (since the 16-byte split-K partials, 2026-11-30: the
    step-major kernel 8 bytes, in the split-K fix-up after the main loop, nvdisasm; the tile-major one none), which
    this bounds; other containers never get that order and the generator refuses it for them.
    tests/gpu/test_pair_order_gpu.py checks the results."""
    import dataclasses
    import re

    from humming.core.compile.compiler import compile_cuda
    from humming.core.compile.nvrtc import select_toolchain
    from humming.core.families.mma_wna16.layout import layout_for
    from humming.core.families.mma_wna16.planner import plan_wna16
    from humming.errors import UnsupportedOnDevice

    caps = api.resolve_profile("nvidia-h200")
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    regs = {}
    for tile_major in (False, True):
        lay = dataclasses.replace(layout_for(humming.schemes.get("w4a16"), 4096, 4096, "f16", caps=caps),
                                  tile_major=tile_major)
        p = plan_wna16(caps, lay, 128, "f16", scheme="w4a16", path="tile")
        src = api.source(p, caps)
        assert ("lds_32(base + A_BYTES" in src) == tile_major
        mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
        spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
        assert spills and max(spills) <= 8, mod.log
        regs[tile_major] = max(int(r) for r in re.findall(r"Used (\d+) registers", mod.log))
    assert regs[True] <= 255 and abs(regs[True] - regs[False]) <= 8, regs
    w8 = dataclasses.replace(layout_for(humming.schemes.get("w8a16"), 4096, 4096, "f16", caps=caps), tile_major=True)
    with pytest.raises(ValueError, match="4-bit containers only"):
        api.source(plan_wna16(caps, w8, 128, "f16", scheme="w8a16", path="tile"), caps)
