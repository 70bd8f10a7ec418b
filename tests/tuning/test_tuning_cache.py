"""CPU: M buckets, the tuning file (record/lookup round trip, priorities, invalid entries), the planner hook and
the shipped H200 defaults."""
from __future__ import annotations

import dataclasses
import json

import pytest

from humming import api, schemes
from humming.capabilities import get_profile
from humming.core.families.mma_wna16 import candidates as cands
from humming.core.families.mma_wna16 import tuned
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.families.mma_wna16.planner import plan_wna16
from humming.core.families.mma_wna16.tiles import MmaWnA16Tiles
from humming.core.families.register_a import prefill as rsp
from humming.core.families.register_a.planner import tma_wanted
from humming.core.tuning import entries as tuning
from humming.errors import ShapeError

A100 = get_profile("nvidia-a100")
H200 = get_profile("nvidia-h200")
W4 = schemes.get("w4a16")


def _layout(n=1024, k=2048, scheme=W4, act="f16"):
    return layout_for(scheme, n, k, act)


def _h200_live(monkeypatch):
    """The live GPU is the H200 profile's target: its wgmma kernels run here (devices.current.runs_here)."""
    from humming.devices import current

    monkeypatch.setattr(current, "live_arch", lambda: H200.target.arch)


# ---------------------------------------------------------------------------------------------- buckets
@pytest.mark.parametrize("m, label", [
    (1, "1"), (2, "2-8"), (8, "2-8"), (9, "9-16"), (16, "9-16"), (17, "17-32"), (33, "33-64"), (64, "33-64"),
    (65, "65-128"), (128, "65-128"), (129, "129-256"), (300, "257-512"), (513, "513-768"), (768, "513-768"),
    (769, "769-1024"), (1024, "769-1024"), (1025, "1025-2048"),
    (2048, "1025-2048"), (2049, "2049-4096"), (4096, "2049-4096"), (4097, ">4096"), (10**6, ">4096"),
])
def test_bucket_labels(m, label):
    assert tuning.m_bucket(m) == label
    assert m in tuning.bucket_of(m)


def test_buckets_cover_every_m_once():
    bs = tuning.buckets()
    assert bs[0].lo == 1 and bs[-1].hi is None
    for a, b in zip(bs, bs[1:]):
        assert b.lo == a.hi + 1
    for m in range(1, 3000):
        assert sum(m in b for b in bs) == 1
    assert tuning.bucket_of(20).ms() == tuple(range(17, 33))
    assert tuning.bucket_of(1500).ms() == (1025, 2048)  # sampled above 1024: the prefill kernels do not change with M
    assert tuning.bucket_of(3000).ms() == (2049, 4096)
    assert all(m > 4096 for m in tuning.bucket_of(5000).ms())
    with pytest.raises(ShapeError):
        tuning.bucket_of(0)


def test_layout_key_names_decode_act_and_groups():
    assert tuning.layout_key(_layout()) == "int4.f16.g128.z0"
    assert tuning.layout_key(_layout(scheme=schemes.get("w4a16-zp"), act="bf16")) == "int4.bf16.g128.z128"
    assert tuning.layout_key(_layout(scheme=schemes.get("w8a16-fp8"))).startswith("float8.f16.")


# ---------------------------------------------------------------------------------------------- round trip
def _forced_tile(m=40):
    return plan_wna16(A100, _layout(), m, "f16", scheme="w4a16", tiles=MmaWnA16Tiles(48, 64, 64, 4, 1, 1, 1),
                      splits=2, path="tile")


def test_record_lookup_round_trip(tmp_path):
    plan = _forced_tile(40)
    default = plan_wna16(A100, _layout(), 40, "f16")
    assert (default.tiles, default.splits) != (plan.tiles, plan.splits)  # the test forces something else
    key = tuning.record(plan, 12.345, device="Test GPU", default_us=20.0)
    assert key == "nvidia-a100|w4a16|int4.f16.g128.z0|1024x2048|33-64"
    data = json.loads((tmp_path / "tuning.json").read_text())
    assert data["format"] == 1 and list(data["entries"]) == [key]
    e = data["entries"][key]
    assert e["path"] == "dequant-to-activation" and e["tiles"]["bm"] == 48 and e["splits"] == 2
    assert e["measured_us"] == 12.35 and e["device"] == "Test GPU" and e["date"]

    for m in (33, 40, 64):  # any M of the bucket
        hit = tuning.lookup(A100, _layout(), 1024, 2048, m)
        assert hit is not None and hit["tiles"] == dataclasses.asdict(plan.tiles) and hit["splits"] == 2
        tp = tuned.tuned_plan(A100, _layout(), m, "f16")
        assert tp.tiles == plan.tiles and tp.splits == 2 and tp.path == plan.path and tp.m == m
        assert "tuned for M bucket 33-64" in tp.reasons[-1] and "Test GPU" in tp.reasons[-1]
        assert tuned.choose_plan(A100, _layout(), m, "f16").tiles == plan.tiles
    # other buckets, shapes, profiles, layouts miss
    assert tuning.lookup(A100, _layout(), 1024, 2048, 32) is None
    assert tuning.lookup(A100, _layout(2048, 2048), 2048, 2048, 40) is None
    assert tuning.lookup(H200, _layout(), 1024, 2048, 40) is None
    assert tuning.lookup(A100, _layout(act="bf16"), 1024, 2048, 40) is None
    assert tuned.tuned_plan(A100, _layout(), 100, "f16") is None
    assert tuned.choose_plan(A100, _layout(), 100, "f16") == plan_wna16(A100, _layout(), 100, "f16")


def test_record_keeps_other_entries_and_replaces_same_key():
    tuning.record(_forced_tile(40), 10.0)
    stream = plan_wna16(A100, _layout(), 1, "f16", scheme="w4a16", tiles=MmaWnA16Tiles(8, 64, 128, 2, 1, 1, 2),
                        splits=4, path="stream")
    tuning.record(stream, 5.0)
    tuning.record(_forced_tile(50), 9.0)  # same bucket: replaces
    keys = [e["key"] for e in tuning.entries() if e["origin"] == str(tuning.tune_file())]
    assert len(keys) == 2
    assert tuning.lookup(A100, _layout(), 1024, 2048, 33)["measured_us"] == 9.0
    tp = tuned.tuned_plan(A100, _layout(), 1, "f16")
    assert tp.path == "stream" and tp.tiles.warps_k == 2 and tp.tiles.stages == 2 and tp.splits == 4


def test_scheme_is_preferred_but_layout_decides(monkeypatch):
    tuning.record(_forced_tile(40), 10.0, scheme="w4a16")
    other = plan_wna16(A100, _layout(), 40, "f16", tiles=MmaWnA16Tiles(48, 64, 128, 3, 1, 1, 2), splits=1, path="tile")
    tuning.record(other, 11.0, scheme="w4a16[name=mine]")
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40, scheme="w4a16")["measured_us"] == 10.0
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40, scheme="w4a16[name=mine]")["measured_us"] == 11.0
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40, scheme="unknown")["measured_us"] in (10.0, 11.0)
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40)["measured_us"] in (10.0, 11.0)  # the runtime: no scheme
    monkeypatch.setenv("HUMMING_TUNE", "0")
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40) is None
    assert tuned.tuned_plan(A100, _layout(), 40, "f16") is None


def test_default_location_is_the_kernel_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("HUMMING_TUNE_FILE")
    assert tuning.tune_file() == tmp_path / "kernels" / "tuning.json"
    tuning.record(_forced_tile(40), 10.0)
    assert (tmp_path / "kernels" / "tuning.json").is_file()
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40) is not None


# ---------------------------------------------------------------------------------------------- invalid entries
def _write(path, entries):
    path.write_text(json.dumps({"format": 1, "entries": entries}))


def _entry(**changes):
    key, e = tuning.make_entry(_forced_tile(40), 10.0)
    e.update(changes)
    return key, e


@pytest.mark.parametrize("change", [
    {"tiles": {"bm": 48, "bn": 96, "bk": 64, "stages": 4, "warps_m": 1, "warps_n": 1, "warps_k": 1}},  # BN 96
    {"tiles": {"bm": 48, "bn": 64, "bk": 192, "stages": 4, "warps_m": 1, "warps_n": 1, "warps_k": 3}},  # BK vs K
    {"tiles": {"bm": 128, "bn": 256, "bk": 64, "stages": 12, "warps_m": 2, "warps_n": 4, "warps_k": 1}},  # smem
    {"splits": 7},                       # does not divide K / BK
    {"path": "stream"},                  # stream path above M = 16
    {"tiles": {"bm": 48}},               # malformed: missing fields
    {"splits": "many"},                  # malformed: not a number
])
def test_invalid_stored_config_is_ignored(tmp_path, change):
    key, e = _entry(**change)
    _write(tmp_path / "tuning.json", {key: e})
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40) is not None
    assert tuned.tuned_plan(A100, _layout(), 40, "f16") is None
    assert tuned.choose_plan(A100, _layout(), 40, "f16") == plan_wna16(A100, _layout(), 40, "f16")


@pytest.mark.parametrize("text", ["not json", "[]", '{"format": 99, "entries": {}}', '{"format": 1}'])
def test_unreadable_file_is_ignored(tmp_path, text):
    (tmp_path / "tuning.json").write_text(text)
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40) is None
    tuning.record(_forced_tile(40), 10.0)  # and recording replaces it with a good file
    assert tuning.lookup(A100, _layout(), 1024, 2048, 40)["measured_us"] == 10.0


# ---------------------------------------------------------------------------------------------- shipped defaults
def _shipped():
    out = []
    for path in tuning.shipped_files():
        out += list(tuning.read_entries(path).items())
    return out


def test_shipped_h200_defaults_load():
    names = [p.name for p in tuning.shipped_files()]
    assert "nvidia-h200.json" in names
    shipped = _shipped()
    assert len(shipped) >= 8
    buckets = {e["m_bucket"] for _, e in shipped}
    assert {"1", "9-16", "65-128", "257-512"} <= buckets


def t_bn(entry: dict) -> int:
    return int(entry["tiles"].get("bn", 64))


@pytest.mark.parametrize("key, entry", _shipped(), ids=[k for k, _ in _shipped()])
def test_shipped_defaults_give_valid_plans_on_h200(key, entry):
    assert entry["profile"] == "nvidia-h200" and entry["device"] == "NVIDIA H200"
    caps = get_profile(entry["profile"])
    layout = layout_for(schemes.get(entry["scheme"]), entry["n"], entry["k"], "f16")
    assert tuning.layout_key(layout) == entry["layout"]
    assert key == tuning.entry_key(entry["profile"], entry["scheme"], entry["layout"], entry["n"], entry["k"],
                                   entry["m_bucket"])
    # an entry of a bucket split since (513-1024 of 2026-11-29) covers the M of the old bucket that no entry of the
    # new ones covers
    bucket = tuning.LEGACY_BUCKETS.get(entry["m_bucket"]) or tuning.bucket_of(entry["m"])
    assert bucket.label == entry["m_bucket"] and entry["m"] in bucket
    for m in (v for v in (bucket.lo, entry["m"], bucket.hi) if v is not None):  # (the last bucket has no end)
        p = tuned.tuned_plan(caps, layout, m, "f16")
        if entry["path"] == "wgmma-rs" and t_bn(entry) > 64 and m < 128 and 4 * (entry["tiles"]["bm"] - m) >= entry["tiles"]["bm"]:
            # below 128 an entry of the two-warpgroup form runs where its one token tile is at least three quarters
            # tokens (tuned._two_warpgroup_padding_check): below that the planner's rules (the small form)
            assert p is None, (key, m)
            continue
        assert p is not None, (key, m)
        assert p.path == entry["path"] and p.splits == entry["splits"]
        t = entry["tiles"]
        if "instead of the entry's" in p.explain():
            # rule (1) of register_a.prefill.ROUNDS_KNOB: the entry's tiles fill the rounds badly at this M (not at its
            # own): stream-K over 256-token tiles fitted to M
            sms = caps.limits.sms
            assert t["bn"] == 128 and not t.get("streamk") and not t.get("tail")
            assert rsp.rounds_badly_filled(-(-m // t["bm"]) * (entry["n"] // 128), sms)
            assert not rsp.rounds_badly_filled(-(-entry["m"] // t["bm"]) * (entry["n"] // 128), sms)
            assert p.tiles == tuned._rs_prefill_plan(caps, layout, m, "f16", entry["scheme"], 256, streamk=sms,
                                                     lowest=1).tiles
            continue
        # (a two-warpgroup entry runs its token tile fitted to M: the planner then picks the stages that tile fits)
        retiled = p.path == "wgmma-rs" and t["bn"] == 128 and p.tiles.bm != t["bm"]
        stages = p.tiles.stages if retiled else t["stages"]
        assert (p.tiles.warps_k, p.tiles.stages, p.tiles.bk) == (t["warps_k"], stages, t["bk"])
        if p.path == "stream":
            assert p.tiles.bm == (8 if m <= 8 else 16) and m <= 16
            assert p.tiles.balance == t.get("balance", 0) and p.grid[1] == entry["n"] // 64 + p.tiles.balance
        else:
            # an entry's bulk=0 on the register-A path means "the default way of copying the activations" (TMA
            # where the profile declares it; entries older than that option say nothing else)
            bulk = t.get("bulk") or int(p.path == "wgmma-rs" and tma_wanted(caps, None))
            # the two-warpgroup form with its producer warpgroup starts its consumers staggered (a planner rule)
            # (not with stream-K)
            stagger = int(p.path == "wgmma-rs" and t["bn"] == 128 and p.tiles.bulk == 2 and m >= 1024
                          and not t.get("streamk"))
            # the two-warpgroup form's plans (tuned ones too) rasterize their blocks, except with the tail option
            # (a planner rule)
            from humming.core.families.register_a.planner import RASTER_KNOB
            from humming.core.tuning import knobs

            raster = knobs.value(RASTER_KNOB, caps) if p.path == "wgmma-rs" and t["bn"] == 128 and not t.get("tail") else 0
            # ... and keep a ring of RING_2WG weight atoms (a planner rule)
            from humming.core.families.register_a.planner import RING_2WG

            prefetch = RING_2WG if p.path == "wgmma-rs" and t["bn"] == 128 else 0
            # ... and the small form fits its token tile to M (register_a.planner.fitted_token_tile)
            from humming.core.families.register_a.planner import fitted_token_tile

            # (the two-warpgroup form's too: tuned.two_warpgroup_token_tile, then fitted in 16-row groups)
            bm = fitted_token_tile(m, t["bm"] if t["bn"] == 64 else tuned.two_warpgroup_token_tile(m, t["bm"])) \
                if p.path == "wgmma-rs" else t["bm"]
            # ... and the register-A forms stage their epilogue by stmatrix (not the W4A8 stream-K form)
            stsm = int(p.path == "wgmma-rs" or (p.path == "wgmma-rs8" and not t.get("streamk")))
            # every option any family's tiles have: this family's as expected, the others' absent (read as 0)
            expected = {"x_ring": 0, "fold": 0, "x_smem": 0, "cluster": 0, "balance": 0,
                                                   "occupancy": 0, "tail": 0, "streamk": 0, "early": 0, "stsm": stsm, "wide": 0,
                                                   "widened": 0, "l2next": 0, "direct": 0,
                                                   **t,
                                                   "bm": bm,
                                                   "stages": stages,
                                                   "bulk": bulk,
                                                   "stagger": stagger, "raster": raster, "prefetch": prefetch}
            assert {f: p.tiles.option(f) for f in expected} == expected
            assert p.smem_bytes <= caps.limits.smem_per_block_kb * 1024
        assert "shipped nvidia-h200.json" in p.reasons[-1]


def test_user_entry_overrides_shipped():
    key, shipped = next((k, e) for k, e in _shipped() if e["path"] != "stream")
    caps = get_profile("nvidia-h200")
    layout = layout_for(schemes.get(shipped["scheme"]), shipped["n"], shipped["k"], "f16")
    other = plan_wna16(caps, layout, shipped["m"], "f16", scheme=shipped["scheme"],
                       tiles=MmaWnA16Tiles(128, 128, 64, 2, 2, 2, 1), splits=1, path="tile")
    assert dataclasses.asdict(other.tiles) != shipped["tiles"]
    assert tuning.record(other, 1.0) == key
    p = tuned.tuned_plan(caps, layout, shipped["m"], "f16")
    assert p.tiles == other.tiles and "shipped" not in p.reasons[-1]


# ---------------------------------------------------------------------------------------------- candidates
def test_candidates_default_first_valid_and_unique():
    # M 9-64 also time the small-M register-A wgmma form (the H200 profile runs wgmma; this machine has no GPU to say
    # otherwise)
    for m, paths in ((1, {"stream", "dequant-to-activation"}), (16, {"stream", "dequant-to-activation", "wgmma-rs"}),
                     (40, {"dequant-to-activation", "wgmma-rs"}), (128, {"dequant-to-activation", "wgmma-rs"}),
                     (1024, {"dequant-to-activation", "wgmma-rs"})):
        layout = _layout(8192, 8192)
        plans = cands.candidates(H200, layout, m, "f16", "w4a16")
        # the default first: what humming.gemm runs without an entry (from M 513 the two-warpgroup form's rules)
        if m >= 513:
            from humming.core.families.register_a.prefill import prefill_default

            assert plans[0] == prefill_default(H200, layout, m, "f16", "w4a16") and plans[0].path == "wgmma-rs"
        else:
            assert plans[0] == plan_wna16(H200, layout, m, "f16", scheme="w4a16")
        sigs = [(p.path, p.tiles, p.splits) for p in plans]
        assert len(sigs) == len(set(sigs)) and len(plans) > 10
        assert {p.path for p in plans} == paths
        assert all(p.smem_bytes <= H200.limits.smem_per_block_kb * 1024 for p in plans)
    only = cands.candidates(H200, _layout(8192, 8192), 1, "f16", include_tile_for_stream=False)
    assert {p.path for p in only[1:]} == {"stream"}


@pytest.mark.parametrize("m", [1024, 4096])
def test_candidates_hold_the_runtime_plan_from_m_1024(m, monkeypatch):
    """From M 1024 humming.gemm runs the two-warpgroup register-A form (the register_a family the registry selects,
    planned by plan_wna16_wgmma_rs; this machine plans as an H200 would): the tuner times that kernel and its stream-K
    variant next to the others, so a bucket's winner is measured against what the runtime runs."""
    from humming.core.families.register_a.planner import plan_wna16_wgmma_rs
    from humming.core.problem import Problem
    from humming.core.registry import select

    _h200_live(monkeypatch)
    layout = _layout(12288, 4096)
    runtime = plan_wna16_wgmma_rs(H200, layout, m, "f16", scheme="w4a16")
    assert runtime.tiles.bn == 128 and not runtime.tiles.streamk
    plans = cands.candidates(H200, layout, m, "f16", "w4a16")
    assert any(p.path == "wgmma-rs" and p.tiles == runtime.tiles for p in plans)
    assert any(p.tiles.option("streamk") == H200.limits.sms and p.tiles.bm == runtime.tiles.bm for p in plans)
    chosen = select(Problem(W4, m, 12288, 4096), H200)  # what humming.gemm runs for this M
    assert chosen.family.name == "register_a"
    assert any((p.path, p.tiles, p.splits) == (chosen.plan.path, chosen.plan.tiles, chosen.plan.splits) for p in plans)


def _tuned_why(plan) -> str:
    """The reason a tuned plan gives for its entry (the launch options' reasons may follow it)."""
    return next((r for r in plan.reasons if r.startswith("tuned for M bucket")), "")


def test_register_a_prefill_family_takes_two_warpgroup_entries(monkeypatch, tmp_path):
    """The register_a family, which runs the two-warpgroup form from M 513, plans through
    tuned.register_a_prefill_plan: a stored two-warpgroup entry of M's bucket (here the plain form with 128-token tiles
    at M 2048) on a hit, the form's rules otherwise (stream-K on 28672x8192 at M 2048), and not an entry of another
    kernel (a tile-kernel entry)."""
    from humming.core.families.register_a.planner import plan_wna16_wgmma_rs
    from humming.core.families.register_a.prefill import prefill_default
    from humming.core.problem import Problem
    from humming.core.registry import select

    _h200_live(monkeypatch)
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(tmp_path / "tune.json"))
    tuning.clear_memory()
    layout = _layout(28672, 8192)
    default = prefill_default(H200, layout, 2048, "f16", scheme="w4a16")
    assert default.tiles.streamk == 132 and default.grid == (1, 132, 1)
    assert tuned.register_a_prefill_plan(H200, layout, 2048, "f16", "w4a16").tiles == default.tiles
    plain = plan_wna16_wgmma_rs(H200, layout, 2048, "f16", scheme="w4a16", bt=128, small=False)
    tuning.record(plain, 1000.0, scheme="w4a16", device="test")
    tuning.clear_memory()
    got = tuned.register_a_prefill_plan(H200, layout, 1500, "f16", "w4a16")
    assert got.tiles.bm == 128 and not got.tiles.streamk and "tuned for M bucket 1025-2048" in _tuned_why(got)
    chosen = select(Problem(W4, 1500, 28672, 8192), H200)  # what humming.gemm runs: that family, that plan
    assert chosen.family.name == "register_a" and chosen.plan.tiles == got.tiles and _tuned_why(chosen.plan)
    assert tuned.register_a_prefill_plan(H200, layout, 3000, "f16", "w4a16").tiles.streamk == 132  # another bucket
    square = _layout(8192, 8192)
    tile = plan_wna16(H200, square, 1024, "f16", scheme="w4a16", tiles=MmaWnA16Tiles(128, 128, 64, 3, 2, 2, 1), splits=1,
                      path="tile")
    tuning.record(tile, 500.0, scheme="w4a16", device="test")
    tuning.clear_memory()
    stored = tuned.tuned_plan(H200, square, 1024, "f16", "w4a16")
    assert stored is not None and stored.path != "wgmma-rs"  # a tile-kernel entry: not this family's
    assert tuned.register_a_prefill_plan(H200, square, 1024, "f16", "w4a16").tiles == \
        prefill_default(H200, square, 1024, "f16", "w4a16").tiles
    chosen = select(Problem(W4, 1024, 8192, 8192), H200)
    assert chosen.family.name == "register_a" and chosen.plan.tiles == prefill_default(H200, square, 1024, "f16",
                                                                                     "w4a16").tiles


def test_runtime_prefers_the_entries_of_its_own_scheme():
    """A prepared weight plans with its scheme's name (api.plan_for), as `humming build` does: when a tuning
    file holds entries of two schemes for one layout, each weight gets its own."""
    import torch

    from humming import api

    tuning.record(_forced_tile(40), 10.0, scheme="w4a16")
    other = plan_wna16(A100, _layout(), 40, "f16", tiles=MmaWnA16Tiles(48, 64, 128, 3, 1, 1, 2), splits=1, path="tile")
    tuning.record(other, 11.0, scheme="aaa-other")  # sorts first: picked when the scheme is not given
    torch.manual_seed(0)
    qw = __import__("humming").quantize(torch.randn(1024, 2048) * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, "cpu", profile="nvidia-a100")
    p = api.plan_for(handle, 40)
    assert (p.tiles, p.splits) == (_forced_tile(40).tiles, 2)


def _register_a_candidates(monkeypatch, n: int, k: int, m: int, bn: int) -> tuple:
    """(caps, layout, the register-A candidates with bn channels per block at M), the live GPU pretended to run the
    H200's wgmma (no GPU in CI)."""
    from humming.core.families.register_a.planner import PATH

    _h200_live(monkeypatch)
    caps = get_profile("nvidia-h200")
    layout = layout_for(schemes.get("w4a16"), n, k, "f16")
    plans = cands.candidates(caps, layout, m, "f16", scheme="w4a16")
    return caps, layout, [p for p in plans if p.path == PATH and p.tiles.bn == bn]


def test_small_register_a_candidates_include_both_copies(monkeypatch):
    """Where the profile's wgmma runs on the live GPU (pretended here: no GPU in CI) the tuner times the small
    register-A form with the activations by cp.async and by TMA tensor copy (bulk), and a stored bulk=1 entry plans
    the TMA variant again."""
    for m in (32, 128):
        caps, layout, rs = _register_a_candidates(monkeypatch, 4096, 4096, m, 64)
        assert {p.tiles.bulk for p in rs} == {0, 1}, m
        assert len({p.kernel_name for p in rs if p.tiles.bulk}) >= 2
    forced = tuned._rs_small_plan(caps, layout, 32, "f16", "w4a16", 2, 8, 32, 0, True)
    assert forced.tiles.bulk == 1 and "TMA tensor-copy" in forced.explain()


def test_two_warpgroup_register_a_form_is_a_candidate_below_its_default_m(monkeypatch):
    """From M 128 the tuner also times the two-warpgroup register-A form (128 channels per block, token tiles of 128
    and 256, fitted to M: at M=128 both are one tile of 128, timed once); a stored winner of that form (bn = 128)
    plans it again for its bucket, on the same prepared weights, its tile fitted to that M."""
    from humming.core.families.register_a.planner import PATH

    for m, tiles in ((128, {128}), (512, {128, 256})):
        caps, layout, wide = _register_a_candidates(monkeypatch, 8192, 8192, m, 128)
        assert {p.tiles.bm for p in wide} == tiles, m
    assert not _register_a_candidates(monkeypatch, 8192, 8192, 64, 128)[2]
    winner = tuned._rs_prefill_plan(caps, layout, 384, "f16", "w4a16", 128)
    assert winner.tiles.bm == 128
    tuning.record(winner, 100.0, scheme="w4a16")
    p = tuned.choose_plan(caps, layout, 400, "f16", scheme="w4a16")  # same bucket (257-512)
    # 128-token tiles for 400 tokens: 4 tiles of 100 rows, fitted to 112
    assert p.path == PATH and (p.tiles.bn, p.tiles.bm) == (128, 112) and "tuned for M bucket" in p.explain()


def test_legacy_open_bucket_entries_apply_above_1024(monkeypatch, tmp_path):
    """Files written before the buckets from 513 were split keep working: an entry of the old open bucket (">1024")
    applies to every M above 1024 where no file has an entry of M's own bucket, and such an entry wins over it."""
    from humming.core.families.register_a.planner import plan_wna16_wgmma_rs

    layout = _legacy_file(monkeypatch, tmp_path, 8192, ">1024")
    for m in (1025, 3000, 8192):
        got = tuned.register_a_prefill_plan(H200, layout, m, "f16", "w4a16")
        assert got.tiles.streamk == 132 and "tuned for M bucket >1024" in _tuned_why(got), m
    below = tuning.lookup(H200, layout, 4096, 14336, 1024, "w4a16")
    assert below is None or below["m_bucket"] != ">1024"  # not at M <= 1024
    plain = plan_wna16_wgmma_rs(H200, layout, 3000, "f16", scheme="w4a16", bt=128, small=False)
    tuning.record(plain, 900.0, scheme="w4a16", device="test")  # bucket 2049-4096: wins there, not elsewhere
    tuning.clear_memory()
    assert not tuned.register_a_prefill_plan(H200, layout, 3000, "f16", "w4a16").tiles.streamk
    assert "tuned for M bucket >1024" in _tuned_why(tuned.register_a_prefill_plan(H200, layout, 8192, "f16", "w4a16"))


def _legacy_file(monkeypatch, tmp_path, m: int, bucket: str):
    """A user tuning file holding one stream-K entry of 4096x14336 measured at ``m`` under the old ``bucket`` label;
    the register-A form runs here (as on the H200). Returns the layout."""
    from humming.core.families.register_a.planner import plan_wna16_wgmma_rs

    _h200_live(monkeypatch)
    target = tmp_path / "tune.json"
    monkeypatch.setenv("HUMMING_TUNE_FILE", str(target))
    layout = _layout(4096, 14336)
    streamk = plan_wna16_wgmma_rs(H200, layout, m, "f16", scheme="w4a16", bt=256, small=False, streamk=132)
    key, entry = tuning.make_entry(streamk, 1000.0, scheme="w4a16", device="test")
    assert key.endswith("|" + tuning.m_bucket(m)) and tuning.m_bucket(m) != bucket
    tuning.write_entries(target, {key.rsplit("|", 1)[0] + "|" + bucket: dict(entry, m_bucket=bucket)})
    tuning.clear_memory()
    return layout


def test_legacy_513_1024_entries_apply_to_both_new_buckets(monkeypatch, tmp_path):
    layout = _legacy_file(monkeypatch, tmp_path, 1024, "513-1024")
    for m in (513, 768, 769, 1024):
        got = tuning.lookup(H200, layout, 4096, 14336, m, "w4a16")
        assert got is not None and got["m_bucket"] == "513-1024", m
    assert tuning.lookup(H200, layout, 4096, 14336, 1025, "w4a16") is None
    assert tuning.lookup(H200, layout, 4096, 14336, 512, "w4a16")["m_bucket"] == "257-512"  # the shipped entry


# the two-warpgroup form's stream-K rule against what was measured on the H200 (2026-12-01, rotated A/B rounds):
# (N, K, M) -> stream-K won; M 2048 on 4096x14336 (1.94 tiles a SM, 97% full) is left plain (2% either way)
@pytest.mark.parametrize("n, k, m, won", [
    (28672, 8192, 768, True), (28672, 8192, 1024, True), (28672, 8192, 2048, True), (28672, 8192, 4096, True),
    (28672, 8192, 8192, True), (8192, 8192, 768, True), (8192, 8192, 1024, False), (8192, 8192, 2048, True),
    (8192, 8192, 4096, True), (8192, 8192, 8192, True), (4096, 14336, 768, True), (4096, 14336, 1024, False),
    (4096, 14336, 4096, True), (4096, 14336, 8192, True),
])
def test_streamk_default_follows_the_measurements(n, k, m, won, set_knobs):
    from humming.core.tuning import knobs

    set_knobs({rsp.ROUNDS_KNOB: False})  # the stream-K rule alone (the finer tiles: test_finer_token_tiles)
    layout = _layout(n, k)
    blocks, bt, why = rsp.streamk_default(H200, layout, m)
    assert bool(blocks) == won, why
    p = rsp.prefill_default(H200, layout, m, "f16", "w4a16")
    assert p.tiles.streamk == blocks and why in p.reasons[-1]
    if won:
        assert bt == p.tiles.bm == rsp.STREAMK_BT and p.grid == (1, H200.limits.sms, 1)
        with knobs.override({rsp.STREAMK_KNOB: False}):
            off = rsp.prefill_default(H200, layout, m, "f16", "w4a16")
        assert not off.tiles.streamk and f"stream-K off ({rsp.STREAMK_KNOB} false)" in off.reasons[-1], off.explain()


# rule (2) of register_a.prefill.ROUNDS_KNOB against what was measured on the H200 (2026-12-01, rotated A/B rounds, us,
# stream-K over 256-token tiles -> one more token tile, fitted, plain): (N, K, M, token tiles x tokens or None)
@pytest.mark.parametrize("n, k, m, finer", [
    (8192, 8192, 513, (4, 144)), (8192, 8192, 600, (4, 160)), (8192, 8192, 700, (4, 176)), (8192, 8192, 768, (4, 192)),
    (8192, 8192, 1100, (6, 192)), (4096, 14336, 513, (4, 144)), (4096, 14336, 600, (4, 160)),
    (4096, 14336, 768, (4, 192)), (4096, 14336, 1100, None), (28672, 8192, 600, None), (28672, 8192, 1100, None),
    (8192, 8192, 1024, None), (8192, 8192, 4096, None),
])
def test_finer_token_tiles(n, k, m, finer):
    """Where 256-token tiles fill their last round badly (the stream-K split condition), the default plan takes one
    more token tile, fitted, if those fill their rounds to ROUNDS_MIN_FILL (8192x8192 M=600 145.9 -> 130.3 us,
    4096x14336 M=700 152.7 -> 129.5), else stream-K as before; ROUNDS_KNOB false turns it off."""
    from humming.core.tuning import knobs

    layout = _layout(n, k)
    p = rsp.prefill_default(H200, layout, m, "f16", "w4a16")
    bt, why = rsp.finer_token_tile(H200, layout, m)
    if finer is None:
        assert not bt and "instead of stream-K" not in p.reasons[-1]
        return
    tiles, tokens = finer
    assert (bt, p.tiles.bm, p.grid[0], p.tiles.streamk) == (tokens, tokens, tiles, 0), p.explain()
    assert why == p.reasons[-1] and "instead of stream-K" in why and rsp.ROUNDS_KNOB in why
    used = tiles * (n // 128)
    assert used / (-(-used // 132) * 132) >= rsp.ROUNDS_MIN_FILL
    with knobs.override({rsp.ROUNDS_KNOB: False}):
        assert rsp.prefill_default(H200, layout, m, "f16", "w4a16").tiles.streamk == 132


def test_entry_yields_to_streamk_where_its_rounds_fill_badly(monkeypatch):
    """Rule (1): the shipped 4096x14336 257-512 entry (128-token tiles, measured at 512: 128 tiles, one round 97% full)
    runs M 257-384 (96 tiles, 73%) as stream-K over 256-token tiles fitted to M (M=300 84.7 -> 71.0 us), M 385-512 as
    stored; an entry that is stream-K itself (28672x8192 65-128 since 2026-12-01's twenty-first session) stands."""
    from humming.core.tuning import knobs

    _h200_live(monkeypatch)
    tuning.clear_memory()
    layout = _layout(4096, 14336)
    for m, streamk, bm in ((270, 132, 144), (300, 132, 160), (384, 132, 192), (385, 0, 112), (512, 0, 128)):
        p = tuned.tuned_plan(H200, layout, m, "f16", "w4a16")
        assert (p.tiles.streamk, p.tiles.bm) == (streamk, bm), (m, p.explain())
        assert ("instead of the entry's 128-token tiles" in p.explain()) == bool(streamk)
    with knobs.override({rsp.ROUNDS_KNOB: False}):
        assert tuned.tuned_plan(H200, layout, 300, "f16", "w4a16").tiles.streamk == 0
    p = tuned.tuned_plan(H200, _layout(28672, 8192), 128, "f16", "w4a16")
    assert (p.tiles.streamk, p.tiles.bm) == (132, 128), p.explain()
    assert "instead of the entry's" not in p.explain()


def test_streamk_default_needs_the_producer_warpgroup(set_knobs):
    """Where the profile takes no stream-K (no producer warpgroup: knob register_a.producer false), the plain form
    with the reason."""
    from humming.core.families.register_a import planner as rs

    set_knobs({rs.WS_KNOB: False})
    p = rsp.prefill_default(H200, _layout(28672, 8192), 4096, "f16", "w4a16")
    assert not p.tiles.streamk and "no stream-K" in p.reasons[-1] and "producer" in p.reasons[-1]


@pytest.mark.parametrize("m, fitted, unfitted", [(513, 176, 128), (530, 192, 128), (540, 192, 256), (600, 208, 256),
                                               (768, 256, 256), (1025, 208, 256), (1100, 224, 256), (4097, 256, 256)])
def test_streamk_default_token_tile(m, fitted, unfitted):
    """256-token tiles fitted to M (as many as 256 needs, each M / tiles rounded up to 16); with the fitting off
    (FIT_KNOB false) 128-token tiles where 256-token ones would be mostly padding rows (M just above a multiple of 256;
    measured at M 513 / 600 / 1100 on the H200)."""
    from humming.core.families.register_a import planner as rs
    from humming.core.tuning import knobs

    layout = _layout(28672, 8192)
    for fit, bt, bm in (({}, 256, fitted), ({rs.FIT_KNOB: False}, unfitted, unfitted)):
        with knobs.override(fit):
            blocks, got, why = rsp.streamk_default(H200, layout, m)
            assert blocks == 132 and got == bt, why
            p = rsp.prefill_default(H200, layout, m, "f16", "w4a16")
        assert p.tiles.bm == bm and p.tiles.streamk == 132 and p.grid == (1, 132, 1)


def test_profiles_without_wgmma_keep_the_mma_sync_default_from_m_513():
    """On a profile without wgmma (A100) the register-A prefill form never runs: the tuner's default row, the
    runtime's plan and humming.plan stay the mma.sync kernels at M >= 513 (no error)."""
    from humming.core.plan import launch_options
    from humming.core.problem import Problem
    from humming.core.registry import select

    a100 = get_profile("nvidia-a100")
    layout = _layout(4096, 4096)
    for m in (513, 1024, 4096):
        assert not tuned.runs_register_a_prefill(a100, layout, m)
        plans = cands.candidates(a100, layout, m, "f16", "w4a16")
        assert plans[0] == plan_wna16(a100, layout, m, "f16", scheme="w4a16")
        assert all(p.family == "mma_sync" for p in plans)
        assert tuned.runtime_plan(a100, layout, m, "f16", "w4a16") == tuned.choose_plan(a100, layout, m, "f16", "w4a16")
        chosen = select(Problem(W4, m, 4096, 4096), a100)
        assert chosen.family.name == "mma_wna16" and chosen.plan == tuned.runtime_plan(a100, layout, m, "f16", "w4a16")
        assert api.plan("w4a16", m, 4096, 4096, profile=a100) == chosen.plan
    assert tuned.runs_register_a_prefill(H200, layout, 1024)
    assert tuned.runtime_plan(H200, layout, 1024, "f16", "w4a16") == launch_options(
        H200, tuned.register_a_prefill_plan(H200, layout, 1024, "f16", "w4a16"))
    h200_layout = layout_for(W4, 4096, 4096, "f16", caps=H200)  # (as the runtime prepares it: the H200's pair order)
    assert api.plan("w4a16", 1024, 4096, 4096, profile=H200) == tuned.runtime_plan(H200, h200_layout, 1024, "f16",
                                                                                   "w4a16")


@pytest.mark.parametrize("profile", ["nvidia-h100", "nvidia-h20"])
def test_wide_layers_take_the_two_warpgroup_form_below_min_m(profile):
    """register_a.wave_min_m: below register_a.min_m (513), from M 129 the two-warpgroup register-A form takes layers
    whose 256-token tiles number at least one per SM (28672 output features: 224 tiles of 128 channels); narrower
    layers keep the small form; the knob null turns the rule off."""
    import humming

    caps = get_profile(profile)
    for m in (129, 256, 512):
        p = humming.plan("w4a16", m, 28672, 8192, profile=profile)
        assert p.path == "wgmma-rs" and p.tiles.bn == 128, p.explain()
        assert "register_a.wave_min_m" in p.reasons[-1]
        narrow = humming.plan("w4a16", m, 4096, 14336, profile=profile)
        assert not (narrow.path == "wgmma-rs" and narrow.tiles.bn == 128), narrow.explain()
    assert humming.plan("w4a16", 128, 28672, 8192, profile=profile).tiles.bn != 128  # below wave_min_m
    with humming.tuning.override({"register_a.wave_min_m": None}):
        assert humming.plan("w4a16", 256, 28672, 8192, profile=profile).tiles.bn != 128
    assert caps.limits.sms <= 224
