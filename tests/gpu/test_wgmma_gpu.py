"""W8A8 and W4A8 on the wgmma kernel (sm_90a, the default on sm_90a; the tuning knob wgmma_8bit.enabled false turns it
off), against the reference (activation quantization included), on a GPU whose profile declares wgmma
(H100/H200/H20). Outputs are NaN-poisoned before each launch (conftest), and every case checks that the wgmma kernel
really ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.registry import family_of
from humming.core.tuning import knobs

from .conftest import biased_weight, fresh_gemm, layers_of, ran_plan, rel_error

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened
WGMMA_KNOB = "wgmma_8bit.enabled"  # W8A8 / W4A8 from M 64 on the wgmma kernels (false: mma.sync)

SCHEMES = ["w8a8-fp8", "w8a8-int8", "w8a8-fp8-tensor"]
SHAPES = [(512, 2048), (1024, 4096)]
MS = (64, 128, 200, 1024)


def _require_wgmma():
    caps = api.resolve_profile(None)
    if not caps.find_mma(family="wgmma"):
        pytest.skip(f"{caps.name} declares no wgmma (the wgmma kernel needs an sm_90a device)")
    return caps


def _wgmma_plan(qw, dtype, m):
    """The plan that ran M on ``qw`` (``dtype`` activations), checked to be the wgmma 8-bit family's."""
    p = ran_plan(qw, m, dtype)
    assert family_of(p).name == "wgmma_8bit", p.explain()
    return p


def _ran_family(qw, m: int, dtype=None) -> str:
    """The kernel family whose plan ran M on ``qw``."""
    return family_of(ran_plan(qw, m, dtype)).name


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_wgmma_w8a8(scheme, dtype, n, k, set_knobs):
    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    qw = biased_weight(scheme, n, k, dtype, n + k + len(scheme))
    for m in MS:
        x, out = fresh_gemm(qw, m, k, dtype)
        p = _wgmma_plan(qw, dtype, m)
        assert p.family == "wgmma" and p.kernel_name.startswith("hm_w8a8_wgmma_"), p.explain()
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= 5e-3, f"{scheme} {dtype} M={m} N={n} K={k} BN={p.tiles.bn}: relative error {err:.2e}"


@pytest.mark.parametrize("scheme", ["w8a8-fp8", "w8a8-int8"])
def test_wgmma_matches_mma_sync_kernel(scheme, set_knobs):
    """Same weights and activations through both 8-bit kernels: the results agree closely (both accumulate
    the same products in fp32 / int32; int8 is exact up to the epilogue)."""
    _require_wgmma()
    n, k, m = 1024, 2048, 256
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get(scheme))
    qw_legacy = qw.with_scheme(qw.scheme)  # the same tensors as a second weight: a layer keeps what ran each M
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    with knobs.override({WGMMA_KNOB: False}):
        legacy = humming.gemm(x, qw_legacy)
    set_knobs({WGMMA_KNOB: True})
    new = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert _ran_family(qw_legacy, m) == "mma_8bit" and _ran_family(qw, m) == "wgmma_8bit"
    assert not torch.isnan(new).any()
    assert rel_error(new, legacy) <= 2e-3


def test_small_m_stays_on_mma_sync(set_knobs):
    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    n, k = 512, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get("w8a8-fp8"))
    x = torch.randn(16, k, device="cuda", dtype=torch.float16)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    assert _ran_family(qw, 16) == "mma_8bit"


def test_wgmma_fp8_fast_accumulation(set_knobs):
    """GemmOptions(fast_accum=True): e4m3 partial sums stay in the tensor core's accumulator (BN may be 256);
    the error is the hardware's, so this only checks it stays small at K=2048."""
    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    n, k, m = 1024, 2048, 1024
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get("w8a8-fp8"))
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    out = humming.gemm(x, qw, options=humming.GemmOptions(fast_accum=True, act_widen=False))
    torch.cuda.synchronize()
    assert all(lay.options.fast_accum for lay in layers_of(qw, x.dtype))  # prepared for these options
    p = _wgmma_plan(qw, x.dtype, m)
    assert p.family == "wgmma" and p.layout.fast_accum
    assert not torch.isnan(out).any()
    err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
    assert err <= 5e-3, f"fast accumulation BN={p.tiles.bn}: relative error {err:.2e}"


# ----------------------------------------------------------------------------- W4A8 on the wgmma kernel
W4A8_SCHEMES = ["w4a8-int8", "w4a8-fp8", "w4a8-mxfp4", "w4a8-int8[group_size=32]"]
W4A8_MS = (64, 200, 1024)


def _w4a8_scheme(name: str):
    base, _, variant = name.partition("[")
    sch = humming.schemes.get(base)
    if variant:
        sch = sch.with_(group_size=int(variant[len("group_size="):-1]))
    return sch


@pytest.fixture(autouse=True)
def _shared_memory_w4a8_kernels(set_knobs):
    """These tests cover the wgmma W4A8 kernels that widen in shared memory; the register-A one (the default from
    M 128 for int4 with groups of 128 / per channel) has its own tests: it is switched off here (the knob
    register_a8.min_m null)."""
    set_knobs({"register_a8.min_m": None})


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", W4A8_SCHEMES)
def test_wgmma_w4a8(scheme, dtype, n, k, set_knobs):
    """Packed int4 / e2m1 weights widened in shared memory (int4 -> 16 x s8, int4 -> e4m3, e2m1 -> e4m3), group
    scales on fp32 partials, per-token activation scales and bias in the epilogue."""
    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    qw = biased_weight(_w4a8_scheme(scheme), n, k, dtype, n + k + len(scheme))
    for m in W4A8_MS:
        x, out = fresh_gemm(qw, m, k, dtype)
        p = _wgmma_plan(qw, dtype, m)
        assert p.family == "wgmma" and p.kernel_name.startswith("hm_w4a8_wgmma_"), p.explain()
        assert p.layout.group == qw.scheme.weight_scale.group_size
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= 5e-3, f"{scheme} {dtype} M={m} N={n} K={k}: relative error {err:.2e}"


@pytest.mark.parametrize("scheme", W4A8_SCHEMES)
def test_wgmma_w4a8_matches_mma_sync_kernel(scheme, set_knobs):
    """Same weights and activations through the mma.sync W4A8 kernel and the wgmma one: both multiply the same
    exactly widened codes (int8: exact integer partials; fp8: fp32 partials per group)."""
    _require_wgmma()
    n, k, m = 1024, 2048, 256
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _w4a8_scheme(scheme))
    qw_legacy = qw.with_scheme(qw.scheme)  # the same tensors as a second weight: a layer keeps what ran each M
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    with knobs.override({WGMMA_KNOB: False}):
        legacy = humming.gemm(x, qw_legacy)
    set_knobs({WGMMA_KNOB: True})
    new = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert _ran_family(qw_legacy, m) == "mma_8bit" and _ran_family(qw, m) == "wgmma_8bit"
    assert not torch.isnan(new).any()
    assert rel_error(new, legacy) <= (1e-3 if "int8" in scheme else 2e-3)


def test_w4a8_small_m_stays_on_mma_sync(set_knobs):
    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    qw = humming.quantize(torch.randn(512, 2048, device="cuda") * 0.05, humming.schemes.get("w4a8-fp8"))
    out = humming.gemm(torch.randn(16, 2048, device="cuda", dtype=torch.float16), qw)
    torch.cuda.synchronize()
    assert not torch.isnan(out).any()
    assert _ran_family(qw, 16) == "mma_8bit"


@pytest.mark.parametrize("scheme", ["w8a8-fp8", "w4a8-fp8"])
def test_wgmma_bias_not_4_byte_aligned(scheme, set_knobs):
    """The epilogue reads two 16-bit biases as one 32-bit load: a bias view at an odd 16-bit offset is copied."""
    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    n, k, m = 512, 2048, 128
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get(scheme))
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    bias = torch.randn(n + 1, device="cuda", dtype=torch.float16)[1:]
    assert bias.data_ptr() % 4 == 2
    out = humming.gemm(x, qw, bias=bias)
    torch.cuda.synchronize()
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
    assert rel_error(out, ref) <= 5e-3


# ----------------------------------------------------------------------------- w8a8-fp8-block (128x128 weight blocks)
BLOCK = "w8a8-fp8-block"
BLOCK_SHAPES = [(512, 2048), (1024, 4096), (576, 1536)]  # 576: N % 128 == 64 -> the mma.sync kernel at every M
BLOCK_MS = (1, 64, 200, 1024)


def _block_weights(n, k, g):
    """Weights whose magnitude differs from 128x128 block to block (a wrong block index shows in the error)."""
    mag = torch.exp(torch.randn(-(-n // 128), k // 128, device="cuda", generator=g) * 1.5)
    mag = mag.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
    return torch.randn(n, k, device="cuda", generator=g) * mag * 0.05


def _block_acts(m, k, dtype, g):
    """Activations whose magnitude differs from one 128-wide group of a row to the next."""
    mag = torch.exp(torch.randn(m, k // 128, device="cuda", generator=g)).repeat_interleave(128, 1)
    return (torch.randn(m, k, device="cuda", generator=g) * mag).to(dtype)


def _block_plan(qw, dtype, m, wgmma: bool):
    """The plan that ran M on ``qw``, checked to be the wgmma 8-bit family's (``wgmma``) or the mma.sync one's."""
    p = ran_plan(qw, m, dtype)
    assert family_of(p).name == ("wgmma_8bit" if wgmma else "mma_8bit"), p.explain()
    return p


@pytest.mark.parametrize("n,k", BLOCK_SHAPES, ids=[f"{n}x{k}" for n, k in BLOCK_SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_w8a8_fp8_block(dtype, n, k, set_knobs):
    """e4m3 weights with fp32 scales per 128x128 block, e4m3 activations per token per 128 of K: the wgmma kernel
    at M >= 64 (block scales at each 128-deep fp32 promotion), the 8-bit mma.sync kernel below (and for N % 128 ==
    64, all M); bias in the epilogue."""
    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    g = torch.Generator(device="cuda").manual_seed(n + k)
    bias = torch.randn(n, device="cuda", dtype=dtype, generator=g)
    qw = humming.quantize(_block_weights(n, k, g), humming.schemes.get(BLOCK), bias=bias)
    for m in BLOCK_MS:
        x = _block_acts(m, k, dtype, g)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        wg = m >= 64 and n % 128 == 0
        p = _block_plan(qw, dtype, m, wg)
        assert p.kernel_name.startswith("hm_w8a8blk_wgmma_e4m3_" if wg else "hm_w8a8blk_e4m3_"), p.explain()
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= 5e-3, f"{BLOCK} {dtype} M={m} N={n} K={k} ({p.kernel_name}): relative error {err:.2e}"


def test_w8a8_fp8_block_wgmma_matches_mma_sync_kernel(set_knobs):
    """Same weights and activations through the mma.sync block kernel and the wgmma one: both add the same fp32
    partials per 128 of K times the same block scales."""
    _require_wgmma()
    n, k, m = 1024, 2048, 256
    g = torch.Generator(device="cuda").manual_seed(11)
    qw = humming.quantize(_block_weights(n, k, g), humming.schemes.get(BLOCK))
    qw_legacy = qw.with_scheme(qw.scheme)  # the same tensors as a second weight: a layer keeps what ran each M
    x = _block_acts(m, k, torch.bfloat16, g)
    with knobs.override({WGMMA_KNOB: False}):
        legacy = humming.gemm(x, qw_legacy)
    set_knobs({WGMMA_KNOB: True})
    new = humming.gemm(x, qw)
    torch.cuda.synchronize()
    _block_plan(qw_legacy, torch.bfloat16, m, False)
    _block_plan(qw, torch.bfloat16, m, True)
    assert not torch.isnan(new).any() and not torch.isnan(legacy).any()
    assert rel_error(new, legacy) <= 2e-3


def test_w8a8_fp8_block_compressed_tensors_checkpoint(set_knobs):
    """A DeepSeek-V3-style float8 weight with a [N/128, K/128] weight_scale (compressed-tensors float-quantized),
    run with dynamic per-128 e4m3 activations (w8a8-fp8-block) on both kernels."""
    from humming.checkpoints import compressed_tensors

    _require_wgmma()
    set_knobs({WGMMA_KNOB: True})
    n, k = 768, 1024
    g = torch.Generator(device="cuda").manual_seed(3)
    wt = (torch.randn(n, k, device="cuda", generator=g) * 40).to(torch.float8_e4m3fn)
    ws = torch.rand(n // 128, k // 128, device="cuda", generator=g) * 1e-3 + 1e-4
    qw = compressed_tensors.load({"weight": wt, "weight_scale": ws})
    qw = qw.with_scheme(qw.scheme.with_(act="e4m3", act_scale="dynamic_group", act_group_size=128))
    for m in (16, 512):
        x = _block_acts(m, k, torch.float16, g)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        p = _block_plan(qw, torch.float16, m, m >= 64)
        assert p.layout.weight_scale == "block" and not torch.isnan(out).any()
        err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= 5e-3, f"checkpoint M={m}: relative error {err:.2e}"
