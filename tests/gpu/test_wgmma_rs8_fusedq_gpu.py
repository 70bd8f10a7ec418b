"""The wide register-A W4A8 form quantizing its own activations (HUMMING_WGMMA_W4A8_RS_FUSEDQ; TileConfig.fusedq):
warps claim rows of x from a queue counter, write the codes and token scales as the activation quantizer does, and
the producer copies a tile's codes once its rows are counted done. Against the reference and, bit for bit, against
the same kernel behind the separate quantizer (the codes and scales are the same bits); repeated launches (the
counters must come back to zero), CUDA-graph replay with fresh activations, a partial last token tile, f16 and bf16,
e4m3 and s8, groups of 128 and per channel. Outputs NaN-poisoned before each launch, fresh random data per case."""
import pytest
import torch

import humming
from humming import api
from humming.core.planner_wgmma_rs8 import FUSEDQ_ENV, PATH, STREAMK_ENV, WIDE_FROM_ENV

from .conftest import biased_weight, graph_replay_error, launch_spec, rel_error
from .test_wgmma_rs8_gpu import TOL, _require_wgmma, _scheme

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened


@pytest.fixture(autouse=True)
def _wide_plain(monkeypatch):
    """The wide form without stream-K at every M here (the form the in-kernel quantization is written for)."""
    monkeypatch.setenv(WIDE_FROM_ENV, "128")
    monkeypatch.setenv(STREAMK_ENV, "0")

CASES = [("w4a8-fp8", 128), ("w4a8-fp8", None), ("w4a8-int8", 128)]


def _gemm_with(qw, x, fused: str, monkeypatch):
    """humming.gemm(x, qw) planned afresh with FUSEDQ_ENV=fused: (output, the plan it ran)."""
    monkeypatch.setenv(FUSEDQ_ENV, fused)
    qw.__dict__.pop("_humming_prepared", None)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    return out, launch_spec(qw, "w4a8-wgmma-rs8", x.dtype, x.shape[0]).plan


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("name,group", CASES, ids=["fp8-g128", "fp8-channel", "int8-g128"])
def test_fused_quantization_matches_the_separate_quantizer(name, group, dtype, monkeypatch):
    _require_wgmma("e4m3" if name.endswith("fp8") else "s8")
    monkeypatch.setattr(api, "_POISON", True)
    n, k = 2048, 4096
    qw = biased_weight(_scheme(name, group), n, k, dtype, seed=n + k + (group or 1) + len(name) + (dtype == torch.bfloat16))
    for m in (300, 1024, 2048):  # 300: a partial last token tile (the queue's rows end inside it)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        x[m // 3] *= 40.0  # one token with a much larger range than the others: its own scale
        fused, p = _gemm_with(qw, x, "1", monkeypatch)
        assert p.path == PATH and p.tiles.fusedq == 1 and p.tiles.bulk == 2, p.explain()
        assert "activations quantized in the kernel" in p.explain()
        plain, q = _gemm_with(qw, x, "0", monkeypatch)
        assert q.tiles.fusedq == 0 and q.kernel_name != p.kernel_name
        assert not torch.isnan(fused).any()
        assert torch.equal(fused, plain), (m, (fused.float() - plain.float()).abs().max().item(), p.kernel_name)
        err = rel_error(fused, humming.reference_gemm(x, qw, out_dtype=torch.float32))
        assert err <= TOL, (m, err, p.explain())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_fused_quantization_repeats_and_replays(dtype, monkeypatch):
    """Launch after launch on fresh activations (every launch's queue and tile counters start at zero again: the
    last warp of the grid resets them), then a CUDA graph replayed with new activations; x read through a strided
    view is copied to contiguous rows first."""
    _require_wgmma("e4m3")
    monkeypatch.setattr(api, "_POISON", True)
    monkeypatch.setenv(FUSEDQ_ENV, "1")
    n, k, m = 1024, 2048, 1000
    qw = biased_weight("w4a8-fp8", n, k, dtype, seed=7 + (dtype == torch.bfloat16))
    for i in range(6):
        x = torch.randn(m, k, device="cuda", dtype=dtype) * (1 + i)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert launch_spec(qw, "w4a8-wgmma-rs8", dtype, m).plan.tiles.fusedq == 1
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        assert rel_error(out, ref) <= TOL, (i, rel_error(out, ref))
    wide = torch.randn(m, 2 * k, device="cuda", dtype=dtype)
    strided = wide[:, :k]  # rows 2k apart: not contiguous
    assert rel_error(humming.gemm(strided, qw), humming.reference_gemm(strided.contiguous(), qw,
                                                                      out_dtype=torch.float32)) <= TOL
    err = graph_replay_error(lambda xs: humming.gemm(xs, qw), torch.randn(m, k, device="cuda", dtype=dtype),
                             lambda fresh: humming.reference_gemm(fresh, qw, out_dtype=torch.float32))
    assert err <= TOL, err


def test_fused_quantization_on_two_streams(monkeypatch):
    """Two GEMMs at once on two streams: each stream has its own counters (api._workspace), so neither launch waits
    for, or takes, the other's rows."""
    _require_wgmma("e4m3")
    monkeypatch.setenv(FUSEDQ_ENV, "1")
    n, k, m = 2048, 4096, 2048
    qw = biased_weight("w4a8-fp8", n, k, torch.float16, seed=11)
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(2)]
    humming.gemm(xs[0], qw)  # compiled and planned before the streams run
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = [None, None]
    for _ in range(3):
        for i, s in enumerate(streams):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                outs[i] = humming.gemm(xs[i], qw)
        torch.cuda.synchronize()
        for i in range(2):
            assert rel_error(outs[i], humming.reference_gemm(xs[i], qw, out_dtype=torch.float32)) <= TOL
