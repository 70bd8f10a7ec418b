"""CPU: `python -m humming build` compiles each distinct kernel once and a second build is all cache hits;
model configs become layer shapes; `python -m humming tune` without a GPU exits 2 with a clear message."""
from __future__ import annotations

import json

import pytest

from humming import aot, schemes
from humming.capabilities import get_profile
from humming.cli import main as cli
from humming.core.compile import cache
from humming.core.families.mma_wna16 import candidates as cands
from humming.core.families.mma_wna16 import tuned
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.runtime import compiled
from humming.core.tuning import entries as tuning
from humming.errors import ShapeError, UnsupportedOnDevice

SHAPES = [(256, 512), (512, 1024)]


def _need_nvrtc(caps):
    from humming.core.compile.nvrtc import select_toolchain
    from humming.devices import get_backend

    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(f"installed NVRTC cannot target {route.arch}: {str(exc).splitlines()[0]}")


def _expected_kernels(caps, ms):
    names = set()
    for n, k in SHAPES:
        layout = layout_for(schemes.get("w4a16"), n, k, "f16", caps=caps)
        names |= {tuned.choose_plan(caps, layout, m, "f16", "w4a16").kernel_name for m in ms}
    return names


def _forget_in_process():
    compiled._compiled.clear()
    cache.clear_memory_caches()


def test_build_twice_second_is_all_cache_hits(capsys, tmp_path):
    caps = get_profile("nvidia-a100")
    _need_nvrtc(caps)
    _forget_in_process()
    args = ["build", "--shapes", ",".join(f"{n}x{k}" for n, k in SHAPES), "--profile", "nvidia-a100",
            "--m", "1,16", "--jobs", "2"]
    expected = _expected_kernels(caps, [1, *range(9, 17)])  # the buckets of 1 and 16: M = 1 and 9..16
    assert len(expected) == 4  # two stream kernels (bm 8 and 16) per K, the two shapes' Ks differ

    assert cli(args) == 0
    out = capsys.readouterr().out
    assert f"built {len(expected)} kernel(s) for nvidia-a100 (sm_80): {len(expected)} compiled, 0 cache hit(s)" in out
    assert "[" + "#" * 30 + "]" in out  # the progress bar reached the end
    entries = list((tmp_path / "kernels").glob("*/*.hkc"))
    assert len(entries) == len(expected)

    _forget_in_process()  # as a new process: only the disk cache remains
    assert cli(args) == 0
    out = capsys.readouterr().out
    assert f"built {len(expected)} kernel(s) for nvidia-a100 (sm_80): 0 compiled, {len(expected)} cache hit(s)" in out
    assert not (tmp_path / "tuning.json").exists()  # build reads tuning, never writes it


def test_build_report_names_the_kernels_the_runtime_plans():
    caps = get_profile("nvidia-a100")
    _need_nvrtc(caps)
    _forget_in_process()
    report = aot.build_kernels(SHAPES, "w4a16", "nvidia-a100", [1, 16], jobs=2)
    assert set(report.names) == _expected_kernels(caps, [1, *range(9, 17)])
    assert report.ok and report.compiled == report.kernels == 4 and report.cache_hits == 0
    again = aot.build_kernels(SHAPES, "w4a16", "nvidia-a100", [1, 16], jobs=2)  # in-process: memo hits
    assert again.cache_hits == 4 and again.compiled == 0


def test_build_plans_every_bucket_by_default():
    caps = get_profile("nvidia-h200")
    ms = aot.ms_for(None)
    assert ms[:16] == list(range(1, 17)) and max(ms) > 1024 and 1024 in ms
    plans = aot.kernel_plans(caps, [(8192, 8192)], schemes.get("w4a16"), ms)
    layout = layout_for(schemes.get("w4a16"), 8192, 8192, "f16", caps=caps)
    # what humming.gemm runs (registry.select): the mma_wna16 family's choice below M 513 (on this shape register-A
    # small-form plans from M 128, which it keeps), the register_a family's prefill plan from there
    assert set(plans) == {(tuned.choose_plan(caps, layout, m, "f16", "w4a16") if m < 513 else
                           tuned.register_a_prefill_plan(caps, layout, m, "f16", "w4a16")).kernel_name for m in ms}
    assert any(any(r.startswith("tuned for M bucket") for r in p.reasons) for p in plans.values())  # the shipped entries
    assert any(p.tiles.option("streamk") for p in plans.values())  # the prefill form's stream-K rule (M 768, 2048 ...)
    assert aot.ms_for([1, 20], exact=True) == [1, 20]
    assert aot.ms_for([20]) == list(range(17, 33))


def test_build_bad_shape_is_reported_not_fatal(capsys):
    caps = get_profile("nvidia-a100")
    _need_nvrtc(caps)
    assert cli(["build", "--shapes", "256x512,100x512", "--profile", "nvidia-a100", "--m", "1", "--exact"]) == 1
    captured = capsys.readouterr()
    assert "skipped 100x512" in captured.err and "N=100 is not a multiple of 16" in captured.err
    assert "built 1 kernel(s)" in captured.out


LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
            "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32}


def test_model_shapes_llama():
    shapes = aot.model_shapes(LLAMA_8B)
    assert shapes == [("q_proj", 4096, 4096), ("k_proj", 1024, 4096), ("v_proj", 1024, 4096),
                      ("o_proj", 4096, 4096), ("gate_proj", 14336, 4096), ("up_proj", 14336, 4096),
                      ("down_proj", 4096, 14336)]
    assert [s for s, _ in aot.unique_shapes(shapes)] == [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
    fused = aot.model_shapes(LLAMA_8B, fused=True)
    assert fused == [("qkv_proj", 6144, 4096), ("o_proj", 4096, 4096), ("gate_up_proj", 28672, 4096),
                     ("down_proj", 4096, 14336)]
    # explicit head_dim (Qwen3/Gemma style) and a nested text config (multimodal)
    qwen = {"text_config": dict(LLAMA_8B, head_dim=128, num_attention_heads=40, hidden_size=5120)}
    assert aot.model_shapes(qwen)[0] == ("q_proj", 5120, 5120)
    assert aot.model_shapes(qwen)[3] == ("o_proj", 5120, 5120)


def test_build_model_config_plans_its_shapes(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA_8B))
    seen = {}

    def fake_build(shapes, scheme, profile, ms, **kw):
        seen.update(shapes=shapes, profile=profile, ms=ms, jobs=kw["jobs"])
        return aot.BuildReport("nvidia-h200", "sm_90a", list(shapes))

    monkeypatch.setattr(aot, "build_kernels", fake_build)
    assert cli(["build", "--model-config", str(cfg), "--profile", "nvidia-h200", "--jobs", "3"]) == 0
    assert seen["shapes"] == [(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336)]
    assert seen["profile"].name == "nvidia-h200" and seen["ms"] is None and seen["jobs"] == 3
    assert "q_proj, o_proj" in capsys.readouterr().out


def test_build_without_device_or_profile_says_what_to_do(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert cli(["build", "--shapes", "256x512"]) == 2
    err = capsys.readouterr().err
    assert "UnsupportedOnDevice" in err and "--profile" in err and "Traceback" not in err


def test_build_needs_shapes(capsys):
    assert cli(["build", "--profile", "nvidia-a100"]) == 2
    assert "--shapes" in capsys.readouterr().err


def test_tune_without_gpu_exits_2_with_message(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: tune would run")
    assert cli(["tune", "--shapes", "256x512", "--m", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: UnsupportedOnDevice:")
    assert "no CUDA device" in err and "humming build --profile" in err and "Traceback" not in err
    assert not tuning.tune_file().exists()


def test_tune_rejects_bad_arguments_before_looking_for_a_gpu(capsys):
    assert cli(["tune", "--shapes", "8192by8192"]) == 2
    assert "NxK" in capsys.readouterr().err
    assert cli(["tune", "--m", "0"]) == 2


def test_tune_names_a_padded_shape_before_looking_for_a_gpu(capsys):
    """A shape that runs padded (N or K not a multiple of 64) has nothing to tune: a named error, GPU or not."""
    assert cli(["tune", "--shapes", "1008x2048", "--m", "1"]) == 2
    err = capsys.readouterr().err
    assert "ShapeError" in err and "1008x2048 is padded when prepared" in err and "Traceback" not in err


def test_tune_cli_records_the_winner(monkeypatch, capsys, tmp_path):
    """The CLI's table and recording, with the GPU timing replaced by fixed numbers."""
    from humming import tuner

    caps = get_profile("nvidia-h200")

    def fake_tune_layer(scheme, n, k, ms, **kw):
        layout = layout_for(scheme, n, k, kw["dtype"], caps=caps)
        out = []
        for m in ms:
            plans = cands.candidates(caps, layout, m, kw["dtype"], str(scheme))
            timings = [tuner.Timing(p, 100.0 - i * (0.5 if m == 1 else 0.001)) for i, p in enumerate(plans[:6])]
            res = tuner.TuneResult(str(scheme), n, k, m, timings[0], device="Fake GPU")
            res.timings = sorted(timings, key=lambda t: t.us)
            out.append(res)
        return out

    monkeypatch.setattr(tuner, "require_gpu", lambda what="": None)
    monkeypatch.setattr(tuner, "tune_layer", fake_tune_layer)
    json_out = tmp_path / "timings.json"
    assert cli(["tune", "--shapes", "1024x2048", "--m", "1,128", "--json", str(json_out)]) == 0
    out = capsys.readouterr().out
    assert "1024x2048 M=1 (bucket 1): default 100.0 us, best 97.5 us" in out
    assert "<- default" in out and "recorded nvidia-h200|w4a16|int4.f16.g128.z0|1024x2048|1" in out
    layout = layout_for(schemes.get("w4a16"), 1024, 2048, "f16", caps=caps)
    m1 = tuning.lookup(caps, layout, 1024, 2048, 1)
    assert m1["measured_us"] == 97.5 and m1["default_us"] == 100.0 and m1["device"] == "Fake GPU"
    # M=128: the best is within --min-gain (1%) of the default, so the default's config is kept
    m128 = tuning.lookup(caps, layout, 1024, 2048, 100)
    default128 = cands.candidates(caps, layout, 128, "f16")[0]
    assert m128["measured_us"] == 100.0 and m128["tiles"] == default128.tiles.__dict__
    assert len(json.loads(json_out.read_text())) == 2
    assert cli(["tune", "--shapes", "1024x2048", "--m", "16", "--no-record"]) == 0
    assert tuning.lookup(caps, layout, 1024, 2048, 16) is None


def test_tune_only_passes_the_option_and_rejects_unknown_ones(monkeypatch, capsys):
    """`--only x_smem` reaches tuner.tune_layer (which then times only candidates with that option next to the default
    and the plan chosen now); an option the tuner does not know is refused before any GPU is looked for."""
    from humming import tuner

    seen = {}

    def fake_tune_layer(scheme, n, k, ms, **kw):
        seen.update(kw)
        return []

    monkeypatch.setattr(tuner, "require_gpu", lambda what="": None)
    monkeypatch.setattr(tuner, "tune_layer", fake_tune_layer)
    assert cli(["tune", "--shapes", "1024x2048", "--m", "1", "--only", "x_smem", "--no-record"]) == 0
    assert seen["only"] == "x_smem"
    with pytest.raises(SystemExit):
        cli(["tune", "--shapes", "1024x2048", "--only", "warp_magic"])
    assert "invalid choice" in capsys.readouterr().err


def test_tune_table_row_names_every_option():
    """The tuner's table names each candidate's options, so rows that differ only in one (occupancy, a split
    cluster, balance, ...) can be told apart."""
    from dataclasses import replace

    from humming.cli.tune import _row
    from humming.core.families.register_a.planner import plan_wna16_wgmma_rs
    from humming.tuner import Timing

    caps = get_profile("nvidia-h200")
    lay = layout_for(schemes.get("w4a16"), 28672, 8192, "f16", caps=caps)
    p = plan_wna16_wgmma_rs(caps, lay, 16, "f16", scheme="w4a16", splits=2, stages=8, fold=1, small=True, tma=True,
                            occupancy=7, prefetch=4)
    row = _row(1, Timing(replace(p, cluster_splits=True), 44.7), 56.6)
    assert "fold1,bulk,occupancy7,prefetch4,split-cluster" in row and "x1.27" in row and "44.7" in row
    plain = _row(2, Timing(replace(p, tiles=replace(p.tiles, fold=0, bulk=0, occupancy=0, prefetch=0)), 50.0), 0)
    assert plain.rstrip().endswith(" -")


def test_rotated_samples_follow_a_balanced_design():
    """The order of the benchmarks, the A/B helpers and the tuner's re-timing: every timer once per round, the rounds
    rounded up to a whole design; each timer first (and last) equally often, and each ordered pair of timers adjacent
    within a round equally often (with three timers a plain rotation made one always follow the same other)."""
    from itertools import permutations

    from humming import tuner

    calls = []

    def timer(i):
        def run():
            calls.append(i)
            return float(10 * i + len(calls))
        return run

    samples = tuner.rotated_samples([timer(0), timer(1), timer(2)], 4)  # 4 rounds -> the design's 6
    assert calls == [0, 1, 2, 1, 2, 0, 2, 0, 1, 2, 1, 0, 0, 2, 1, 1, 0, 2]
    assert [len(s) for s in samples] == [6, 6, 6]
    assert samples[1] == [2.0 + 10, 4.0 + 10, 9.0 + 10, 11.0 + 10, 15.0 + 10, 16.0 + 10]
    assert tuner.rotated_samples([], 3) == []
    for n in range(1, 11):
        orders = tuner.balanced_orders(n)
        assert len(orders) == (n if n % 2 == 0 or n == 1 else 2 * n)
        assert all(sorted(o) == list(range(n)) for o in orders)
        for pos in range(n):  # every timer at every position equally often
            assert sorted(o[pos] for o in orders) == sorted(list(range(n)) * (len(orders) // n))
        pairs = [(o[j], o[j + 1]) for o in orders for j in range(n - 1)]
        want = 1 if n % 2 == 0 else 2
        assert all(pairs.count(pr) == want for pr in permutations(range(n), 2)), n


def test_tune_cli_retime_option():
    import argparse

    from humming.cli import tune as tune_cli

    p = argparse.ArgumentParser()
    tune_cli.add_arguments(p)
    assert p.parse_args([]).retime == 4 and p.parse_args(["--retime", "0"]).retime == 0


def test_retime_reranks_the_fastest_and_the_default(monkeypatch):
    """tuner._retime: the first pass's fastest `top` and the default get the rotated rounds' medians (each timer
    captured while its plan is set) and are ranked by them ahead of the rest; plans are cleared after."""
    import types

    from humming import tuner

    registry = [types.SimpleNamespace(plans={}, launches={}) for _ in range(2)]
    api = types.SimpleNamespace(_registry=registry, gemm_prepared=lambda x, h: None)
    second_pass = {"a": 12.0, "b": 9.0, "c": 11.0, "default": 10.0}

    def fake_timer(calls, reps=5):
        name = registry[0].plans[7]  # the plan set when the graph is captured
        assert all(r.plans[7] == name for r in registry)
        return lambda: second_pass[name]

    monkeypatch.setattr(tuner, "graph_timer", fake_timer)
    timings = [tuner.Timing(p, us) for p, us in (("a", 5.0), ("b", 6.0), ("c", 7.0), ("d", 8.0), ("default", 20.0))]
    result = tuner.TuneResult("w4a16", 64, 64, 7, default=timings[-1], timings=timings)
    said = []
    tuner._retime(api, [0, 1], 7, None, result, 3, said.append)
    # the re-timed ones ranked by the rounds, ahead of the one that was slower in the first pass
    assert [(t.plan, t.us) for t in result.timings] == [("b", 9.0), ("default", 10.0), ("c", 11.0), ("a", 12.0),
                                                        ("d", 8.0)]
    assert result.best.plan == "b" and result.winner(0.01).plan == "b" and result.winner(0.2).plan == "default"
    assert all(7 not in r.plans for r in registry) and "rotated rounds" in said[0]


QWEN3_MOE = {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
             "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
             "mlp_only_layers": []}


def test_moe_shapes_of_the_moe_decoders():
    assert aot.moe_shapes(QWEN3_MOE) == [("experts.gate_up_proj", 1536, 2048, 128, 8),
                                         ("experts.down_proj", 2048, 768, 128, 8)]
    assert [n for n, *_ in aot.model_shapes(QWEN3_MOE)] == ["q_proj", "k_proj", "v_proj", "o_proj"]  # no dense MLP
    mixtral = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
               "num_local_experts": 8, "num_experts_per_tok": 2}
    assert aot.moe_shapes(mixtral)[0] == ("experts.gate_up_proj", 28672, 4096, 8, 2)
    gpt_oss = {"hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
               "intermediate_size": 2880, "num_local_experts": 128, "experts_per_token": 4}
    assert aot.moe_shapes(gpt_oss)[1] == ("experts.down_proj", 2880, 2880, 128, 4)
    deepseek = {"hidden_size": 7168, "num_attention_heads": 128, "intermediate_size": 18432,
                "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
                "first_k_dense_replace": 3}
    assert aot.moe_shapes(deepseek)[0] == ("experts.gate_up_proj", 4096, 7168, 256, 8)
    assert ("down_proj", 7168, 18432) in aot.model_shapes(deepseek)  # its first three layers are dense
    assert aot.moe_shapes(LLAMA_8B) == []
    with pytest.raises(ShapeError, match="MoE config"):
        aot.moe_shapes({"hidden_size": 64, "num_experts": 4, "num_experts_per_tok": 2})


def test_build_compiles_the_moe_kernels_of_a_model_config(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_MOE))
    assert cli(["build", "--model-config", str(path), "--profile", "nvidia-a100", "--m", "1", "--exact",
                "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "1536x2048 x 128 experts, top-8: experts.gate_up_proj (MoE)" in out and "and 2 MoE GEMM(s)" in out
    report = aot.build_kernels([], "w4a16", "nvidia-a100", [1], exact=True, moe=[(1536, 2048, 128, 8)])
    assert report.ok and report.kernels == 1 and report.names[0].startswith("hm_wna16_moe_")
    bad = aot.build_kernels([], "w4a16", "nvidia-a100", [1], exact=True, moe=[(1000, 2048, 128, 8)])
    assert not bad.ok and "MoE 128 experts top-8" in bad.skipped_shapes[0][1]


def test_time_candidate_files_failures_as_results():
    from humming import tuner

    result = tuner.TuneResult("w4a16", 64, 64, 1, tuner.Timing("rules", None))
    calls = []
    ok = tuner.time_candidate("rules", lambda: 5.0, lambda: "")
    wrong = tuner.time_candidate("b", lambda: 3.0, lambda: "wrong result: relative error 1.0e+00")

    def raises():
        raise RuntimeError("launch failed\nmore")
    rejected = tuner.time_candidate("c", raises, lambda: "")
    uncompiled = tuner.time_candidate("d", lambda: calls.append(1) or 1.0, lambda: "", "CompileError: x")  # never run
    for t in (ok, wrong, rejected, uncompiled):
        tuner.add_timing(result, t, "rules")
    assert result.default is ok and [t.plan for t in result.timings] == ["rules"] and not calls
    assert [(t.plan, t.us) for t in result.failed] == [("b", None), ("c", None), ("d", None)]
    assert wrong.error.startswith("wrong result") and rejected.error.startswith("RuntimeError: launch failed")
