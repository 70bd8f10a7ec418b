"""The warp-specialised TMA wgmma W8A8 kernel (promoted e4m3: per-channel x per-token, per-tensor, 128x128 blocks;
a producer warpgroup's thread 0 issues TMA tensor copies of both operands, two consumer warpgroups meet only at
mbarriers) against the reference and against the lock-step wgmma kernel, on a GPU whose profile declares wgmma, tma,
mbarrier and setmaxnreg. Partial token tiles (rows past M arrive as zeros), alternating activation tensors (the
activation map is re-encoded per address) and CUDA-graph replay. Outputs are NaN-poisoned (conftest)."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.wgmma_8bit.planner import TMA_KNOB, TMA_THREADS, W4A8_TMA_KNOB
from humming.core.registry import family_of

from .conftest import biased_weight, fresh_gemm, graph_replay_error, launch_spec, rel_error

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened

SCHEMES = ["w8a8-fp8", "w8a8-fp8-tensor", "w8a8-fp8-block"]
SHAPES = [(512, 2048), (1024, 4096)]
MS = (64, 200, 1024, 1100)


def _require(set_knobs, on: bool = True):
    caps = api.resolve_profile(None)
    if not caps.find_mma(family="wgmma", a_type="e4m3") or not (caps.memory.tma and caps.memory.setmaxnreg):
        pytest.skip(f"{caps.name} declares no wgmma e4m3 with tma and setmaxnreg (the TMA W8A8 kernel needs sm_90a)")
    set_knobs({"wgmma_8bit.enabled": True, TMA_KNOB: on})
    return caps


def _spec(qw, dtype, m):
    """The launch that ran M on ``qw`` (``dtype`` activations), checked to be the wgmma 8-bit family's."""
    spec = launch_spec(qw, dtype, m)
    assert family_of(spec.plan).name == "wgmma_8bit", spec.plan.explain()
    return spec


@pytest.mark.parametrize("n,k", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_tma_w8a8(scheme, dtype, n, k, set_knobs):
    _require(set_knobs)
    qw = biased_weight(scheme, n, k, dtype, n + k + len(scheme))
    for m in MS:
        x, out = fresh_gemm(qw, m, k, dtype)
        spec = _spec(qw, dtype, m)
        p = spec.plan
        assert p.tiles.option("bulk") == 1 and p.threads == TMA_THREADS and spec.xmap is not None and spec.wmap is not None, \
            p.explain()
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any(), p.explain()
        err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= 5e-3, f"{scheme} {dtype} M={m} N={n} K={k}: relative error {err:.2e}"


@pytest.mark.parametrize("scheme", ["w8a8-fp8", "w8a8-fp8-block"])
def test_tma_matches_lock_step_kernel(scheme, set_knobs):
    """Same weights and activations through the TMA kernel and the lock-step kernel: the same per-stage partials
    promoted in the same order, so the results agree to rounding."""
    _require(set_knobs, False)
    n, k, m = 1024, 4096, 300
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get(scheme))
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    lock_step = humming.gemm(x, qw)
    assert _spec(qw, torch.float16, m).plan.tiles.option("bulk") == 0
    qw.__dict__["_humming_prepared"].clear()  # a new prepared layer: it plans again, now with the TMA kernel
    set_knobs({TMA_KNOB: True})
    tma = humming.gemm(x, qw)
    torch.cuda.synchronize()
    assert _spec(qw, torch.float16, m).plan.tiles.option("bulk") == 1
    assert not torch.isnan(tma).any()
    assert rel_error(tma, lock_step) <= 1e-3


def test_tma_maps_follow_the_tensors_and_graph_replay(set_knobs):
    _require(set_knobs)
    n, k, m = 512, 2048, 256
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get("w8a8-fp8"))
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(2)]
    for x in xs + xs:
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= 5e-3
    assert _spec(qw, torch.float16, m).plan.tiles.option("bulk") == 1
    err = graph_replay_error(lambda s: humming.gemm(s, qw), xs[0],
                             lambda x: humming.reference_gemm(x, qw, out_dtype=torch.float32))
    assert err <= 5e-3


W4A8_CASES = ["w4a8-int8", "w4a8-fp8", "w4a8-mxfp4", "w4a8-int8[group_size=32]", "w4a8-fp8[group_size=64]"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name", W4A8_CASES)
def test_tma_w4a8_warp_specialised(name, dtype, set_knobs):
    """The warp-specialised W4A8 kernel with TMA copies (knob wgmma_8bit.w4a8_tma true; the register-A W4A8 kernel
    off: knob register_a8.min_m null): A and the packed weights by tensor copy, widened by the producer warpgroup,
    group scales on fp32 partials."""
    _require(set_knobs)
    set_knobs({"register_a8.min_m": None, W4A8_TMA_KNOB: True})
    base, _, variant = name.partition("[")
    sch = humming.schemes.get(base)
    if variant:
        sch = sch.with_(group_size=int(variant[len("group_size="):-1]))
    n, k = 1024, 4096
    qw = biased_weight(sch, n, k, dtype, len(name) + (dtype == torch.bfloat16))
    for m in (64, 200, 1100):
        x, out = fresh_gemm(qw, m, k, dtype)
        spec = _spec(qw, dtype, m)
        p = spec.plan
        assert p.tiles.option("bulk") == 1 and p.threads == TMA_THREADS and spec.wmap is not None, p.explain()
        assert not torch.isnan(out).any(), p.explain()
        err = rel_error(out, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= 5e-3, f"{name} {dtype} M={m}: relative error {err:.2e}"
