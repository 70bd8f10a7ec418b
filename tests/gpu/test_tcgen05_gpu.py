"""The tcgen05 kernels (Blackwell datacenter: W8A8 kind::f8f6f4 / kind::i8, W4A4 NVFP4 kind::mxf4nvf4 and MXFP4
kind::mxf4, W4A8 MXFP4 x FP8 kind::mxf8f6f4, WnA16 int4 kind::f16 at M >= 128) against the reference, activation quantization included, with
HUMMING_UNVERIFIED_KERNELS=1 on a GPU whose own profile declares tcgen05 (B200, B300, Thor, Rubin). Skipped elsewhere:
these kernels have been compiled and emulated on CPU only; this file is what a first Blackwell session runs (see
docs/status.md, "Unverified ISA details", for what to suspect first when a case fails). Outputs are NaN-poisoned
before each launch (conftest), and every case checks that the tcgen05 kernel really ran."""
import pytest
import torch

import humming
from humming import api
from humming.core import registry
from humming.core.families.tcgen05.planner import UNVERIFIED_ENV, Tcgen05WnA16Plan, tcgen05_form
from humming.core.problem import Problem

from .conftest import biased_weight, ran_plan, rel_error

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened

SHAPES = [(512, 2048), (1024, 4096)]
MS = (1, 100, 256, 1000)
# scheme -> the tcgen05 family (humming.core.registry) that runs it
KERNELS = {"w8a8-fp8": "tcgen05_w8a8", "w8a8-fp8-tensor": "tcgen05_w8a8", "w8a8-int8": "tcgen05_w8a8",
           "w4a8-mxfp4": "tcgen05_w4a8", "w4a4-nvfp4": "tcgen05_blockscaled", "w4a4-mxfp4": "tcgen05_blockscaled"}


def _require_tcgen05():
    caps = api.resolve_profile(None)
    if not caps.find_mma(family="tcgen05") or api.live_arch() != caps.target.arch:
        pytest.skip(f"{caps.name}: the tcgen05 kernels need a Blackwell datacenter GPU running its own profile")
    return caps


@pytest.fixture
def unverified(monkeypatch):
    monkeypatch.setenv(UNVERIFIED_ENV, "1")  # (read on every selection: nothing planned before is kept)


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", sorted(KERNELS))
def test_tcgen05_kernel(scheme, dtype, n, k, unverified, native_8bit):
    caps = _require_tcgen05()
    if scheme == "w8a8-int8" and tcgen05_form(caps, "s8") is None:
        pytest.skip(f"{caps.name}: no tcgen05 kind::i8 (INT8 runs the legacy mma.sync path)")
    qw = biased_weight(scheme, n, k, dtype, n + k + len(scheme))
    act = "bf16" if dtype == torch.bfloat16 else "f16"
    for m in MS:
        p = humming.plan(scheme, m, n, k, profile=caps, act=act)
        assert p.family == "tcgen05", p.explain()
        sel = registry.select(Problem(humming.schemes.get(scheme), m, n, k, act, native_8bit), caps)
        assert sel.family.name == KERNELS[scheme], sel.explain()
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        ran = ran_plan(qw, m, dtype)
        assert ran.family == "tcgen05" and ran.kernel_name == p.kernel_name, f"the tcgen05 kernel did not run: {ran}"
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= 5e-3, f"{scheme} {dtype} M={m} N={n} K={k}: relative error {err:.2e}\n{p.explain()}"


@pytest.mark.parametrize("group", [128, 32, None], ids=["g128", "g32", "channel"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_tcgen05_wna16(group, dtype, unverified):
    """W4A16 prefill (M >= 128) on the tcgen05 WnA16 kernel (int4 dequantized into shared memory, kind::f16)."""
    _require_tcgen05()
    n, k = 1024, 4096
    sch = humming.schemes.get("w4a16")
    sch = sch.with_(group_size=group) if group else sch.with_(granularity="channel", group_size=None)
    qw = biased_weight(sch, n, k, dtype, n + (group or 7))
    for m in (128, 200, 1024):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        ran = ran_plan(qw, m, dtype)
        assert isinstance(ran, Tcgen05WnA16Plan), f"the tcgen05 WnA16 kernel did not run: {ran.kernel_name}"
        assert not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= (1e-3 if dtype == torch.float16 else 5e-3), f"w4a16 g{group} {dtype} M={m}: {err:.2e}"
