"""CPU: measured MoE entries (`humming tune --moe`): keyed per (profile, scheme, layout, N, K, experts, top_k, bucket of
tokens), applied by the MoE families (the kernel, token tile, tile and split-K they name), stale ones ignored; the
tile kernel's tuning candidates are valid plans; dense entries and MoE entries of the same N x K never mix."""
from __future__ import annotations

import dataclasses

import pytest

from humming.core.families.moe_register_a.planner import PATH as RS_PATH
from humming.core.families.moe_register_a.planner import plan_moe_register_a
from humming.core.families.moe_wna16.planner import PATH as TILE_PATH
from humming.core.families.moe_wna16.planner import plan_moe, tile_candidates
from humming.core.problem import Problem, scheme_of
from humming.core.registry import select
from humming.core.tuning import entries as tuning
from humming.devices.current import resolve_profile
from humming.errors import ShapeError

H100 = resolve_profile("nvidia-h100")
W4 = scheme_of("w4a16")
E, TOP_K, N, K = 128, 8, 1536, 2048


def _problem(tokens):
    return Problem(W4, tokens, N, K, "bf16", form="indexed", experts=E, top_k=TOP_K)


def _record(plan, us=100.0):
    key = tuning.record(plan, us, device="test GPU", default_us=120.0, moe=(E, TOP_K))
    tuning.clear_memory()
    return key


def test_a_tile_kernel_entry_replaces_the_register_a_default():
    assert select(_problem(2048), H100).plan.path == RS_PATH  # the rules: 128 rows per expert
    forced = plan_moe(H100, W4, 2048, N, K, "bf16", E, TOP_K)
    cand = next(p for p in tile_candidates(H100, W4, 2048, N, K, "bf16", E, TOP_K)
                if p.tiles.bm == 32 and p.splits == 2)
    key = _record(cand)
    assert key == f"nvidia-h100|w4a16|{tuning.layout_key(forced.layout)}|{N}x{K}|e{E}t{TOP_K}|1025-2048"
    entry = tuning.entries()[0]
    assert (entry["experts"], entry["top_k"], entry["m"]) == (E, TOP_K, 2048)
    plan = select(_problem(1500), H100).plan  # same bucket
    assert plan.path == TILE_PATH and plan.tiles == cand.tiles and plan.splits == 2
    assert "tuned for M bucket 1025-2048" in plan.explain() and "test GPU" in plan.explain()
    assert select(_problem(4096), H100).plan.path == RS_PATH  # another bucket: the rules
    other = Problem(W4, 2048, N, K, "bf16", form="indexed", experts=64, top_k=TOP_K)
    assert select(other, H100).plan.path == RS_PATH  # another expert count: the rules


def test_a_register_a_entry_applies_below_the_rows_threshold():
    default = select(_problem(64), H100).plan  # 4 rows per expert: the tile kernel by rule
    assert default.path == TILE_PATH
    _record(plan_moe_register_a(H100, W4, 64, N, K, "bf16", E, TOP_K, token_tile=64))
    plan = select(_problem(64), H100).plan
    assert plan.path == RS_PATH and plan.tiles.bm == 64 and "tuned for M bucket 33-64" in plan.explain()


def test_stale_entries_are_ignored_and_forced_configs_checked():
    cand = tile_candidates(H100, W4, 16, N, K, "bf16", E, TOP_K)[0]
    _record(dataclasses.replace(cand, tiles=dataclasses.replace(cand.tiles, bn=96)))
    plan = select(_problem(16), H100).plan
    assert plan == select(_problem(16), H100).plan and "tuned" not in plan.explain()
    with pytest.raises(ShapeError, match="not one of"):
        plan_moe(H100, W4, 16, N, K, "bf16", E, TOP_K, forced=(dataclasses.replace(cand.tiles, bn=96), 1))
    with pytest.raises(ShapeError, match="split-K 3"):
        plan_moe(H100, W4, 16, N, K, "bf16", E, TOP_K, forced=(cand.tiles, 3))
    with pytest.raises(ShapeError, match="no 512-token tile"):
        plan_moe_register_a(H100, W4, 16, N, K, "bf16", E, TOP_K, token_tile=512)


def test_tile_candidates_cover_the_rules_choice_and_are_distinct():
    for tokens in (1, 64, 2048):
        cands = tile_candidates(H100, W4, tokens, N, K, "bf16", E, TOP_K)
        configs = [(p.tiles, p.splits) for p in cands]
        assert len(set(configs)) == len(configs) >= 8
        rule = plan_moe(H100, W4, tokens, N, K, "bf16", E, TOP_K)
        assert (rule.tiles, rule.splits) in configs
        assert {p.tiles.bm for p in cands} == {16, 32, 64, 128}


def test_dense_and_moe_entries_of_one_shape_never_mix():
    from humming.core.families.mma_wna16.tuned import tuned_plan

    cand = tile_candidates(H100, W4, 16, N, K, "bf16", E, TOP_K)[0]
    _record(cand)
    layout = plan_moe(H100, W4, 16, N, K, "bf16", E, TOP_K).layout
    assert tuning.lookup(H100, layout, N, K, 16, "w4a16") is None  # the dense key of the same N x K
    assert tuned_plan(H100, layout, 16, "bf16", "w4a16") is None
    assert tuning.lookup(H100, layout, N, K, 16, "w4a16", moe=(E, TOP_K))["path"] == TILE_PATH


def test_moe_candidates_start_with_the_rules_plan_even_under_an_entry():
    from humming.moe_tuner import moe_candidates

    default, plans = moe_candidates(_problem(2048), H100)
    assert plans[0] is default and default.path == RS_PATH
    assert {p.tiles.bm for p in plans if p.path == RS_PATH} == {64, 128, 256}
    assert len({(p.kernel_name, p.splits) for p in plans}) == len(plans)
    _record(next(p for p in plans if p.path == TILE_PATH))
    assert moe_candidates(_problem(2048), H100)[0] == default  # the rules' plan, not the entry's


def test_tune_moe_cli_records_the_winner_and_names_bad_arguments(monkeypatch, capsys):
    from humming import moe_tuner, tuner
    from humming.cli import main as cli

    assert cli(["tune", "--moe", "--shapes", "1536x2048"]) == 2
    assert "--moe needs --experts E and --top-k K" in capsys.readouterr().err
    assert cli(["tune", "--moe", "--experts", "4", "--top-k", "8"]) == 2
    assert "more than --experts" in capsys.readouterr().err

    def fake_tune_moe(scheme, experts, top_k, n, k, tokens_list, **kw):
        out = []
        for tokens in tokens_list:
            problem = Problem(scheme_of(scheme), tokens, n, k, "bf16", form="indexed", experts=experts, top_k=top_k)
            default, plans = moe_tuner.moe_candidates(problem, H100)
            timings = [tuner.Timing(p, 100.0 - 3 * i) for i, p in enumerate(plans[:4])]
            res = tuner.TuneResult(str(scheme), n, k, tokens, timings[0], device="Fake GPU")
            res.timings = sorted(timings, key=lambda t: t.us)
            out.append(res)
        return out

    monkeypatch.setattr(tuner, "require_gpu", lambda what="": None)
    monkeypatch.setattr(moe_tuner, "tune_moe", fake_tune_moe)
    monkeypatch.setenv("HUMMING_DEVICE_PROFILE", "nvidia-h100")
    assert cli(["tune", "--moe", "--experts", str(E), "--top-k", str(TOP_K), "--shapes", f"{N}x{K}", "--tokens",
                "2048", "--dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "MoE E=128 top-8 1536x2048 T=2048 (bucket 1025-2048): default 100.0 us, best 91.0 us" in out
    assert f"|{N}x{K}|e{E}t{TOP_K}|1025-2048" in out
    tuning.clear_memory()
    plan = select(_problem(2048), H100).plan
    assert "tuned for M bucket 1025-2048: 91.0 us measured (the default plan of that run: 100.0 us) on Fake GPU" \
        in plan.explain()


def test_a_register_a8_winner_is_keyed_and_applied():
    """A W4A8 bucket won by the register-A W4A8 kernel (off by rule) is stored under the tile kernel's layout and
    moves that bucket onto it; the other buckets keep the rules."""
    from humming.core.families.moe_register_a8.planner import PATH as RS8_PATH
    from humming.core.families.moe_register_a8.planner import plan_moe_register_a8
    from humming.moe_tuner import keyed

    w4a8 = scheme_of("w4a8-fp8")
    win = plan_moe_register_a8(H100, w4a8, 2048, N, K, "bf16", E, TOP_K)
    _record(keyed(win))
    chosen = select(Problem(w4a8, 2048, N, K, "bf16", form="indexed", experts=E, top_k=TOP_K), H100)
    assert chosen.family.name == "moe_register_a8" and chosen.plan.path == RS8_PATH
    assert "tuned for M bucket 1025-2048: 100.0 us measured" in chosen.plan.explain()
    assert select(Problem(w4a8, 64, N, K, "bf16", form="indexed", experts=E, top_k=TOP_K),
                  H100).family.name != "moe_register_a8"


@pytest.mark.parametrize("scheme", ["w8a8-fp8", "w8a8-int8", "w8a8-fp8-block"])
def test_a_wgmma_w8a8_winner_is_a_candidate_keyed_and_applied(scheme):
    """W8A8 experts: the wgmma W8A8 kernel (off by rule) is among the tuner's candidates; a bucket it wins is stored
    under the tile kernel's layout and moves that bucket onto it; the other buckets keep the rules."""
    from humming.core.families.moe_wgmma_8bit.planner import PATH as W8A8_PATH
    from humming.moe_tuner import keyed, moe_candidates

    sch = scheme_of(scheme)
    problem = Problem(sch, 2048, N, K, "bf16", form="indexed", experts=E, top_k=TOP_K)
    default, plans = moe_candidates(problem, H100)
    assert default.path != W8A8_PATH and [p.path for p in plans].count(W8A8_PATH) == 1
    _record(keyed(next(p for p in plans if p.path == W8A8_PATH)))
    chosen = select(problem, H100)
    assert chosen.family.name == "moe_wgmma_8bit" and chosen.plan.path == W8A8_PATH
    assert "tuned for M bucket 1025-2048: 100.0 us measured" in chosen.plan.explain()
    assert select(Problem(sch, 64, N, K, "bf16", form="indexed", experts=E, top_k=TOP_K),
                  H100).family.name != "moe_wgmma_8bit"


def test_the_mma_8bit_moe_form_is_a_candidate_where_mma_sync_runs_8bit():
    from humming.core.families.moe_mma_8bit.planner import PATH as MMA8_PATH
    from humming.devices.current import resolve_profile
    from humming.moe_tuner import keyed, moe_candidates

    a100 = resolve_profile("nvidia-a100")
    # 64 rows per expert: under moe.mma_8bit_min_rows (128), so the rules choose the tile kernel and the tuner times both
    problem = Problem(scheme_of("w8a8-int8"), 1024, N, K, "f16", form="indexed", experts=E, top_k=TOP_K)
    default, plans = moe_candidates(problem, a100)
    assert default.path != MMA8_PATH and [p.path for p in plans].count(MMA8_PATH) == 1
    win = keyed(next(p for p in plans if p.path == MMA8_PATH))
    assert win.path == MMA8_PATH and type(win.layout).__name__ == "WeightLayout"  # keyed by the tile kernel's layout
