"""Both pair orders of the prepared int4 weights (humming.core.common.layout) through every kernel that reads them, on the
H200 against the reference: tile-major (what this profile gets for int4 with the register-A kernels' groups) through
the stream kernel, the mma.sync tile kernel (forced, as HUMMING_WGMMA_RS=0 or a tuned tile entry would run it) and
the register-A kernels (small and two-warpgroup forms); step-major (groups of 512, which those kernels do not take by
default) through the register-A kernels with HUMMING_WGMMA_RS=1. Outputs are NaN-poisoned (conftest), data fresh."""
import pytest
import torch

import humming
from humming import api
from humming.core.plan import plan_wna16

from .conftest import rel_error, run_forced_plans

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 1e-3, torch.bfloat16: 5e-3}


def _wgmma_here():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the register-A wgmma kernels run on sm_90a")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", ["w4a16", "w4a16-zp", "w4a16[group_size=-1]"])
def test_tile_major_weights_through_every_kernel(scheme, dtype):
    _wgmma_here()
    torch.manual_seed(hash((scheme, str(dtype), "order")) % 2**31)
    qw = humming.quantize(torch.randn(1024, 2048, device="cuda") * 0.05, scheme)
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    assert api._registry[handle].packed.layout.tile_major
    paths = set()
    for m in (1, 5, 16, 40, 128, 1024):  # stream, small register-A form, two-warpgroup form
        x = torch.randn(m, 2048, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        paths.add(humming.plan(scheme, m, 1024, 2048, act="f16" if dtype == torch.float16 else "bf16").path)
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[dtype], m
    assert {"stream", "wgmma-rs"} <= paths

    def tile_plans(prep, base, m):  # the mma.sync tile kernel on the same (tile-major) prepared weights
        p = plan_wna16(prep.caps, prep.packed.layout, m, base.act, scheme=base.scheme, path="tile")
        assert p.layout.tile_major and "lds_32(base + A_BYTES" in api.source(p, prep.caps)
        yield p
    assert run_forced_plans(qw, dtype, (3, 16, 33, 128), tile_plans, TOL[dtype]) == 4


def test_step_major_weights_through_the_register_a_kernels(monkeypatch):
    _wgmma_here()
    monkeypatch.setenv("HUMMING_WGMMA_RS", "1")
    torch.manual_seed(21)
    qw = humming.quantize(torch.randn(1024, 4096, device="cuda") * 0.05, "w4a16[group_size=512]")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    assert not api._registry[handle].packed.layout.tile_major
    for m in (16, 128, 1024):
        p = humming.plan("w4a16[group_size=512]", m, 1024, 4096)
        assert p.path == "wgmma-rs" and "load_g32(p + ks * 128)" in api.source(p), (m, p.kernel_name)
        x = torch.randn(m, 4096, device="cuda", dtype=torch.float16)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert api._registry[api._wna16_handle_for(x, qw, None, handle)].launches[m].plan.path == "wgmma-rs"
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16], m
