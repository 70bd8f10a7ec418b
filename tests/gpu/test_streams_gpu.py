"""GEMMs on two CUDA streams at once (GPU): the split kernels' partials and tile counters are per stream
(humming.core.runtime.launch.workspaces), so kernels of two streams that overlap neither mix their partials nor
miscount their tiles. The stream-K form's finishing block waits on its tile's counter: with a shared workspace a count
summed by two launches could hang it; this test would then not finish."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.runtime import launch

from .conftest import ran_plan, rel_error

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m", [64, 2048])  # split-K small form (4 splits); stream-K over 132 blocks (hand-over)
def test_two_streams_at_once(m):
    torch.manual_seed(11)
    n = k = 8192
    qa = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    qb = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    xs = [torch.randn(m, k, device="cuda", dtype=torch.float16) for _ in range(2)]
    plan = humming.plan("w4a16", m, n, k)
    assert plan.workspace_floats > 0, plan.summary()  # a kernel with partials and counters
    refs = {(i, j): humming.reference_gemm(xs[i], q, out_dtype=torch.float32) for i in range(2)
            for j, q in enumerate((qa, qb))}
    humming.gemm(xs[0], qa), humming.gemm(xs[0], qb)  # compiled and planned before the streams race
    torch.cuda.synchronize()
    assert ran_plan(qa, m).kernel_name == plan.kernel_name  # the split kernel is what runs
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = []
    for r in range(12):  # both streams queue launches without waiting for each other; the same weight on both too
        for s, stream in enumerate(streams):
            with torch.cuda.stream(stream):
                i, j = (r + s) % 2, s if r % 3 else 0
                outs.append(((i, j), humming.gemm(xs[i], (qa, qb)[j])))
    torch.cuda.synchronize()
    for key, out in outs:
        assert rel_error(out, refs[key]) <= 1e-3, (key, plan.kernel_name)
    assert {k[1] for k in launch.workspaces} >= {s.cuda_stream for s in streams}  # one workspace per stream
