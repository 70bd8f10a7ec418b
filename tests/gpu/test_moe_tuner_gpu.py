"""GPU: `humming tune --moe`'s measuring half (humming.moe_tuner.tune_moe) on a small MoE GEMM: every candidate runs,
is right and is timed; the default is the rules' plan; the winner recorded as an entry is what the MoE GEMM then
runs, and its result is right."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_tune_moe_times_every_candidate_and_the_winner_runs(tmp_path, monkeypatch):
    import humming
    from humming.core.moe.reference import reference_moe_gemm
    from humming.core.tuning import entries as tuning
    from humming.moe_tuner import tune_moe

    monkeypatch.setenv("HUMMING_TUNE_FILE", str(tmp_path / "tuning.json"))
    tuning.clear_memory()
    experts, top_k, n, k = 16, 4, 256, 512
    results = tune_moe("w4a16", experts, top_k, n, k, [8, 300], reps=2, retime_top=2)
    assert [r.m for r in results] == [8, 300]
    for res in results:
        assert not res.failed, res.failed[0].error
        assert len(res.timings) >= 8 and all(t.us > 0 for t in res.timings)
        assert res.default.us is not None and "NVIDIA" in res.device
        tuning.record(res.best.plan, res.best.us, device=res.device, moe=(experts, top_k))
    tuning.clear_memory()
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(experts, n, k, device="cuda") * 0.05, "w4a16")
    x = torch.randn(300, k, device="cuda", dtype=torch.bfloat16)
    ids = torch.rand(300, experts, device="cuda").argsort(1)[:, :top_k].to(torch.int32)
    plan = humming.moe.prepared(qw, x.dtype, x.device).plan_for(300, top_k)
    assert "tuned for M bucket 257-512" in plan.explain()
    assert (plan.tiles, plan.splits) == (results[1].best.plan.tiles, results[1].best.plan.splits)
    y = humming.moe_gemm(x, qw, ids)
    ref = reference_moe_gemm(x, qw, ids)
    assert ((y.float() - ref.float()).norm() / ref.float().norm()).item() < 1e-2
