"""The two-warpgroup register-A form with token tiles fitted to M (planner_wgmma_rs.fitted_token_tile: as many tiles
as 128 / 256 need, each M / tiles rounded up to 16 rows, e.g. M=300 in two tiles of 160) against the reference: plain,
stream-K and tail launches, groups, per-channel scales, zero points, bias, f16 and bf16, M with the last tile partly
past M; CUDA-graph replay and repeated launches of a wide layer; the default plans through humming.gemm. Outputs are
NaN-poisoned before each launch (conftest), data is fresh random per case, and every case checks the tile that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import FIT_ENV, fitted_token_tile, plan_wna16_wgmma_rs, tail_tiles

from .conftest import forced_repeats_and_replay, rel_error, run_forced_plans
from .test_wgmma_rs_gpu import TOL, _handles, _require_wgmma, _scheme

pytestmark = pytest.mark.gpu

# (scheme, group, asked token tile, option, M values): N = 1024 (8 channel tiles), K = 2048
CONFIGS = [("w4a16", 128, 256, "", (130, 150, 200, 300, 385)), ("w4a16-zp", None, 128, "", (97, 150, 270)),
           ("w4a16", 64, 256, "streamk", (150, 270, 513, 600)), ("w4a16-zp", 128, 128, "streamk", (100, 261, 300)),
           ("w4a16", None, 256, "tail", (150, 240))]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"{c[0]}-g{c[1]}-bt{c[2]}-{c[3] or 'plain'}" for c in CONFIGS])
def test_fitted_tiles_match_reference(cfg, dtype, monkeypatch):
    name, group, bt, option, ms = cfg
    _require_wgmma(dtype)
    monkeypatch.delenv(FIT_ENV, raising=False)
    torch.manual_seed(bt + sum(ms) + len(option))
    n, k = 1024, 2048
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = "f16" if dtype == torch.float16 else "bf16"

    def plans_for(prep, base, m):
        tiles = -(-m // bt) * (n // 128)
        kw = {"streamk": 5} if option == "streamk" else {"tail": tail_tiles(tiles, 132) or tiles} if option else {}
        p = plan_wna16_wgmma_rs(prep.caps, prep.packed.layout, m, act, scheme="", bt=bt, small=False, **kw)
        want, used = fitted_token_tile(m, bt), -(-m // bt)
        assert p.tiles.bm == want and -(-m // want) == used, p.explain()  # as many tiles as bt needs ...
        assert used * want - m < 16 * used  # ... each under 16 rows of padding
        assert f"constexpr int BT = {want}," in api.source(p)
        yield p

    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


@pytest.mark.parametrize("m", [150, 300])
def test_fitted_tile_repeats_and_graph_replay(m):
    """A wide layer (224 channel tiles) with stream-K over 132 blocks and fitted tiles (M=150: one tile of 160, M=300:
    two of 160), launched 20 times in a row, then CUDA-graph replay with fresh activations."""
    from .test_wgmma_rs_streamk_gpu import wide_layer_streamk

    dtype = torch.float16
    qw, handle, p, caps = wide_layer_streamk(m, 256)
    k = 2048
    assert p.tiles.bm == 160 and p.grid == (1, caps.limits.sms, 1), p.explain()
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    forced_repeats_and_replay(qw, handle, p, x, TOL[dtype])


@pytest.mark.parametrize("m,rounds,want", [(600, "0", (208, 132)), (1100, "0", (224, 132)), (600, "", (160, 0)),
                                           (1100, "", (192, 0))])
def test_default_plans_fit_through_gemm(m, rounds, want, monkeypatch):
    """humming.gemm without tuning entries: from M 513 the two-warpgroup form's default plan with its tile fitted, on
    8192 channels where 256-token tiles fill their rounds badly: stream-K over them (ROUNDS_ENV=0; M=600: three tiles of
    208, M=1100: five of 224), or one more token tile, plain (M=600: four of 160, M=1100: six of 192); every output
    checked against the reference."""
    dtype = torch.bfloat16
    _require_wgmma(dtype)
    monkeypatch.setenv("HUMMING_TUNE", "0")
    monkeypatch.delenv(FIT_ENV, raising=False)
    monkeypatch.delenv("HUMMING_WGMMA_RS_STREAMK", raising=False)
    monkeypatch.setenv("HUMMING_WGMMA_RS_ROUNDS", rounds)
    torch.manual_seed(m + 1)
    n, k = 8192, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16-zp")
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    rs, _ = _handles(qw, dtype)
    p = api._registry[rs].launches[m].plan
    assert p.tiles.bn == 128 and (p.tiles.bm, p.tiles.streamk) == want, p.explain()
    assert rel_error(out, ref) <= TOL[dtype]


def test_shipped_entry_yields_to_streamk_through_gemm(monkeypatch):
    """The shipped 4096x14336 entry of bucket 257-512 (128-token tiles, measured at M=512) at M=300: its 3 tiles per
    channel tile would fill one round of the SMs badly, so stream-K over two 160-token tiles runs (rule (1) of
    planner_wgmma_rs.ROUNDS_ENV); right against the reference, and in CUDA-graph replay."""
    from .conftest import graph_replay_error

    dtype = torch.float16
    _require_wgmma(dtype)
    monkeypatch.delenv("HUMMING_TUNE", raising=False)
    monkeypatch.delenv("HUMMING_TUNE_FILE", raising=False)
    monkeypatch.delenv("HUMMING_WGMMA_RS_ROUNDS", raising=False)
    torch.manual_seed(300)
    n, k, m = 4096, 14336, 300
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    ref_of = lambda a: humming.reference_gemm(a, qw, out_dtype=torch.float32)  # noqa: E731
    out = humming.gemm(x, qw)
    torch.cuda.synchronize()
    ran = [api._registry[h].plans[m] for h in qw.__dict__["_humming_prepared"].values()
           if isinstance(h, int) and h >= 0 and m in api._registry[h].plans]
    assert ran and (ran[-1].tiles.bn, ran[-1].tiles.bm, ran[-1].tiles.streamk) == (128, 160, 132), ran[-1].explain()
    assert "instead of the entry's 128-token tiles" in ran[-1].explain()
    assert not torch.isnan(out).any() and rel_error(out, ref_of(x)) <= TOL[dtype]
    assert graph_replay_error(lambda a: humming.gemm(a, qw), x, ref_of) <= TOL[dtype]
