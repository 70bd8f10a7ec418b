"""The register-A W4A16 family's plan options forced on the prepared weights, against humming.reference_gemm:
stream-K (persistent blocks, split tiles handed over; the early weight ring), the tail option (the last tiles in
four K quarters), pairs of blocks in thread-block clusters (also with stream-K), token tiles fitted to M, the small
form's occupancy option and its multicast clusters (PDL launches back to back); repeated launches (counters, slots
and phases reset themselves) and CUDA-graph replay. Outputs are NaN-poisoned before each launch (conftest), data is
fresh random per case, and every case checks the kernel that ran."""
import pytest
import torch

import humming
from humming import api
from humming.core.families.register_a.planner import (
    fitted_token_tile,
    plan_wna16_wgmma_rs,
    tail_tiles,
)
from humming.core.plan import TAIL_SPLITS, launch_options, with_pdl
from humming.core.tuning import knobs
from humming.errors import ShapeError

from .conftest import forced_repeats_and_replay, graph_replay_error, rel_error, run_forced_plans
from .test_register_a_gpu import (
    DTYPE_IDS,
    DTYPES,
    EARLY_KNOB,
    RASTER_KNOB,
    TOL,
    _act,
    _biased_layer,
    _layout,
    _require_wgmma,
    _scheme,
)

pytestmark = pytest.mark.gpu


def _prefill_plan(prep, m, act, bt, **options):
    return plan_wna16_wgmma_rs(prep.caps, _layout(prep, m), m, act, scheme="", bt=bt, small=False, **options)


# ----------------------------------------------------------------------------- stream-K, tail, pairs: forced plans
def _check_streamk(p, m, bt, blocks, n):
    assert p.tiles.option("streamk") == blocks and f"k{blocks}" in p.kernel_name and p.grid == (1, blocks, 1)
    assert "struct StreamK" in api.source(p)


def _check_tail(p, m, bt, tail, n):
    assert p.tiles.option("tail") == tail and f"q{tail}" in p.kernel_name and p.partials == TAIL_SPLITS
    tiles = -(-m // bt) * (n // 128)
    assert p.grid == (1, tiles + tail * (TAIL_SPLITS - 1), 1) and "TAIL_SPLITS" in api.source(p)


def _check_pair(p, m, bt, cluster, n):
    assert p.tiles.option("cluster") == 2 and p.cluster_dims == (1, 2, 1) and "c2" in p.kernel_name


OPTIONS = {"streamk": ("streamk", _check_streamk), "tail": ("tail", _check_tail), "pair": ("cluster", _check_pair)}

# (option, scheme, group, token tile, the option's value, K, rasterized, seed); N = 1024 (8 channel tiles)
# stream-K: persistent blocks that leave whole waves and a few tiles, only split tiles, or fewer left-over atoms
# than blocks (the last: 1 tile of 4 atoms left for 7 blocks, 3 without any)
STREAMK = [("w4a16", 128, 128, 3, 4096), ("w4a16", None, 128, 132, 4096), ("w4a16-zp", 128, 256, 5, 4096),
           ("w4a16-zp", None, 128, 7, 2048), ("w4a16", 64, 256, 132, 2048), ("w4a16-zp", 256, 128, 11, 4096),
           ("w4a16", 128, 128, 7, 256)]
# tail: tiles of the 8 channel tiles per token tile, a few or every one
TAIL = [("w4a16", 128, 128, 3), ("w4a16", None, 128, 8), ("w4a16-zp", 128, 256, 5), ("w4a16-zp", None, 128, 1),
        ("w4a16", 64, 256, 8), ("w4a16-zp", 256, 128, 6)]
# pairs: token tiles of 128, 160 and 256, rasterized and in launch order
PAIR = [("w4a16", 128, 128), ("w4a16", None, 256), ("w4a16-zp", 128, 256), ("w4a16-zp", 64, 160)]
FORCED = ([("streamk", name, group, bt, blocks, k, True, bt + 13 * blocks + k) for name, group, bt, blocks, k in STREAMK]
          + [("tail", name, group, bt, tail, 4096, True, bt + 11 * tail + (group or 3)) for name, group, bt, tail in TAIL]
          + [("pair", name, group, bt, 2, 4096, raster, bt + (group or 3)) for raster in (True, False)
             for name, group, bt in PAIR])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("option,name,group,bt,value,k,raster,seed", FORCED,
                         ids=[f"{c[0]}-{c[1]}-{c[2]}-bt{c[3]}-{c[4]}-k{c[5]}" + ("" if c[6] else "-launch-order")
                              for c in FORCED])
def test_option_plans_match_reference(option, name, group, bt, value, k, raster, seed, dtype, set_knobs):
    """M of half a token tile, one, and three (the last partly past M): groups, per-channel scales, zero points,
    bias, f16 and bf16."""
    _require_wgmma(dtype)
    if not raster:
        set_knobs({RASTER_KNOB: 0})
    torch.manual_seed(seed)
    n = 1024
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = _act(dtype)
    arg, check = OPTIONS[option]

    def plans_for(prep, base, m):
        p = _prefill_plan(prep, m, act, bt, **{arg: value})
        check(p, m, bt, value, n)
        yield p

    ms = (bt // 2 + 1, bt, 2 * bt + 5)  # the last: three token tiles, the last one partly past M
    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


# (scheme, group, dtype, N, K, M, token tile, persistent blocks): stream-K in pairs (asked for; units of two blocks):
# 28672 x 2048 M=128 on 66 pairs (112 pair tiles: one wave, 46 split), three token tiles (one partly past M) on 5 pairs
# (two waves, two tiles split), fewer left-over atoms than pairs (1024 x 256 on 3 pairs: one tile of 4 atoms left),
# 256-token tiles with zero points in bf16 (256 pair tiles: three waves, 58 split)
STREAMK_PAIRS = [("w4a16", 128, torch.float16, 28672, 2048, 128, 128, 132),
                 ("w4a16", 128, torch.float16, 1024, 4096, 261, 128, 10),
                 ("w4a16", None, torch.float16, 1024, 256, 128, 128, 6),
                 ("w4a16-zp", 128, torch.bfloat16, 8192, 1024, 2048, 256, 132)]


@pytest.mark.parametrize("case", STREAMK_PAIRS, ids=["-".join(str(v) for v in c[3:]) + f"-{c[0]}" for c in STREAMK_PAIRS])
def test_streamk_pairs_match_reference(case):
    """Stream-K in pairs (RegisterATiles.cluster = 2 with streamk; register_a.streamk's pair rewrite): both blocks of a
    pair run the same segments, each its channel tile; the split tiles' halves handed over with their own counters.
    Against the reference, then 20 launches in a row (counters and both blocks' phases) and graph replay."""
    name, group, dtype, n, k, m, bt, blocks = case
    caps = _require_wgmma(dtype)
    torch.manual_seed(n + k + m + blocks)
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    p = plan_wna16_wgmma_rs(caps, _layout(prep, m), m, _act(dtype), scheme="", bt=bt, small=False, streamk=blocks,
                            cluster=2)
    assert p.tiles.option("cluster") == 2 and p.tiles.option("streamk") == blocks and p.cluster_dims == (1, 2, 1)
    forced_repeats_and_replay(qw, handle, p, torch.randn(m, k, device="cuda", dtype=dtype), TOL[dtype])


# (N, K, M, token tile, persistent blocks): 28672 x 2048 M=128 on 132 blocks (tiles of two and three parts), 1024 x 4096
# M=261 on 7 blocks (whole waves then split tiles, a token tile partly past M), 1024 x 256 on 7 blocks (blocks without
# atoms), 8192 x 1024 M=2048 with 256-token tiles (3.9 tiles a block: segment after segment)
EARLY_CASES = [(28672, 2048, 128, 128, 132), (1024, 4096, 261, 128, 7), (1024, 256, 128, 128, 7),
               (8192, 1024, 2048, 256, 132)]


@pytest.mark.parametrize("case", EARLY_CASES, ids=["x".join(str(v) for v in c) for c in EARLY_CASES])
def test_early_ring_equals_default(case):
    """The early ring (RegisterATiles.early, register_a.early_ring: the next segment's first weight atoms loaded before a
    segment's epilogue) only moves loads: its output equals the default stream-K kernel's bit for bit, matches the
    reference, and survives 20 launches in a row and graph replay."""
    n, k, m, bt, blocks = case
    caps = _require_wgmma(torch.float16)
    torch.manual_seed(n + k + m + blocks)
    bias = torch.randn(n, device="cuda", dtype=torch.float16)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16", bias=bias)
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    plans = {}
    for early in (True, False):
        with knobs.override({EARLY_KNOB: early}):
            plans[early] = plan_wna16_wgmma_rs(caps, _layout(prep, m), m, "f16", scheme="", bt=bt, small=False,
                                               streamk=blocks)
    assert plans[True].tiles.option("early") == 1 and plans[False].tiles.option("early") == 0
    assert "ring_ready" in api.source(plans[True]) and "ring_ready" not in api.source(plans[False])
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    outs = {}
    for early, p in plans.items():
        prep.plans[m], _ = p, prep.launches.pop(m, None)
        outs[early] = api.gemm_prepared(x, handle)
        torch.cuda.synchronize()
        assert not torch.isnan(outs[early]).any(), (p.kernel_name, "output not fully written")
    assert rel_error(outs[True], humming.reference_gemm(x, qw, out_dtype=torch.float32)) <= TOL[torch.float16]
    assert torch.equal(outs[True], outs[False])  # the same loads, earlier: the same sums
    prep.plans.pop(m, None)
    prep.launches.pop(m, None)
    forced_repeats_and_replay(qw, handle, plans[True], torch.randn(m, k, device="cuda", dtype=torch.float16),
                              TOL[torch.float16])


# ----------------------------------------------------------------------------- token tiles fitted to M
# (scheme, group, asked token tile, option, M values): N = 1024 (8 channel tiles), K = 2048
FITTED = [("w4a16", 128, 256, "", (130, 150, 200, 300, 385)), ("w4a16-zp", None, 128, "", (97, 150, 270)),
          ("w4a16", 64, 256, "streamk", (150, 270, 513, 600)), ("w4a16-zp", 128, 128, "streamk", (100, 261, 300)),
          ("w4a16", None, 256, "tail", (150, 240))]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("cfg", FITTED, ids=[f"{c[0]}-g{c[1]}-bt{c[2]}-{c[3] or 'plain'}" for c in FITTED])
def test_fitted_tiles_match_reference(cfg, dtype):
    """The two-warpgroup form with token tiles fitted to M (register_a.planner.fitted_token_tile: as many tiles as
    128 / 256 need, each M / tiles rounded up to 16 rows, e.g. M=300 in two tiles of 160): plain, stream-K and tail
    launches, M with the last tile partly past M."""
    name, group, bt, option, ms = cfg
    _require_wgmma(dtype)
    torch.manual_seed(bt + sum(ms) + len(option))
    n, k = 1024, 2048
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group), bias=bias)
    act = _act(dtype)

    def plans_for(prep, base, m):
        tiles = -(-m // bt) * (n // 128)
        kw = {"streamk": 5} if option == "streamk" else {"tail": tail_tiles(tiles, 132) or tiles} if option else {}
        p = _prefill_plan(prep, m, act, bt, **kw)
        want, used = fitted_token_tile(m, bt), -(-m // bt)
        assert p.tiles.bm == want and -(-m // want) == used, p.explain()  # as many tiles as bt needs ...
        assert used * want - m < 16 * used  # ... each under 16 rows of padding
        assert f"constexpr int BT = {want}," in api.source(p)
        yield p

    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


# ----------------------------------------------------------------------------- the small form's occupancy option
# (scheme, group, token tile, fold, occupancy, prefetch, stages, splits)
OCCUPANCY = [("w4a16", 128, 16, 1, 7, 0, 8, 2), ("w4a16", 128, 16, 0, 8, 0, 4, 2), ("w4a16", 128, 32, 0, 7, 4, 8, 4),
             ("w4a16-zp", 128, 16, 1, 6, 2, 6, 1), ("w4a16", None, 32, 0, 6, 0, 8, 8), ("w4a16", 64, 48, 0, 6, 0, 4, 2),
             ("w4a16-zp", None, 64, 0, 6, 3, 8, 2), ("w4a16", 256, 16, 1, 7, 3, 4, 4)]


def _occupancy_plan(prep, m, bt, fold, occupancy, prefetch, stages, splits, act):
    p = plan_wna16_wgmma_rs(prep.caps, _layout(prep, m), m, act, scheme="", bt=bt, splits=splits, stages=stages,
                            fold=fold, small=True, occupancy=occupancy, prefetch=prefetch)
    return launch_options(prep.caps, p)  # PDL and split clusters, as the runtime launches it


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("cfg", OCCUPANCY, ids=["-".join(str(v) for v in c) for c in OCCUPANCY])
def test_occupancy_plans_match_reference(cfg, dtype):
    """Registers budgeted for 6-8 blocks per SM, a shallow weight ring, each stage waiting for its own wgmmas: token
    tiles of 16-64, fold 0/1, groups and per-channel scales, zero points, 1 to 8 splits (workspace and split
    clusters), PDL as the runtime launches it."""
    name, group, bt, fold, occupancy, prefetch, stages, splits = cfg
    _require_wgmma(dtype)
    torch.manual_seed(bt + 7 * occupancy + splits)
    n, k = 1024, 4096
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, _scheme(name, group))
    act = _act(dtype)
    kernels = []

    def plans_for(prep, base, m):
        try:
            p = _occupancy_plan(prep, m, bt, fold, occupancy, prefetch, stages, splits, act)
        except ShapeError as exc:  # e.g. fold at 48 tokens: the planner says why
            pytest.fail(f"{cfg}: {exc}")
        assert p.tiles.option("occupancy") == occupancy and f"o{occupancy}" in p.kernel_name
        assert f"__launch_bounds__(cfg::THREADS, {occupancy})" in api.source(p)
        kernels.append(p.kernel_name)
        yield p

    ms = [m for m in (bt - 15, bt - 1, bt) if m >= 9]
    assert run_forced_plans(qw, dtype, ms, plans_for, TOL[dtype]) == len(ms)


# ----------------------------------------------------------------------------- repeated launches and graph replay
def _wide_layer_streamk(m: int, bt: int):
    """A fresh W4A16 layer of 28672 x 2048 (224 channel tiles), its prepared f16 handle and the two-warpgroup plan at M
    with ``bt``-token tiles and stream-K over one block per SM: (weights, handle, plan, profile)."""
    caps = _require_wgmma(torch.float16)
    torch.manual_seed(m)
    qw = humming.quantize(torch.randn(28672, 2048, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    p = plan_wna16_wgmma_rs(caps, _layout(api._registry[handle], m), m, "f16", scheme="", bt=bt, small=False,
                            streamk=caps.limits.sms)
    return qw, handle, p, caps


def _streamk_wide(m):
    """224 channel tiles on 132 blocks: one wave, 92 tiles split; at M=1100 five token tiles, raster groups."""
    qw, handle, p, caps = _wide_layer_streamk(m, 128 if m == 128 else 256)
    assert p.tiles.option("raster") == knobs.value(RASTER_KNOB, caps) and p.grid == (1, caps.limits.sms, 1)
    return qw, handle, p, torch.randn(m, 2048, device="cuda", dtype=torch.float16)


def _fitted_wide(m):
    """Stream-K over 132 blocks with fitted tiles (M=150: one tile of 160, M=300: two of 160)."""
    qw, handle, p, caps = _wide_layer_streamk(m, 256)
    assert p.tiles.bm == 160 and p.grid == (1, caps.limits.sms, 1), p.explain()
    return qw, handle, p, torch.randn(m, 2048, device="cuda", dtype=torch.float16)


def _tail_wide(m):
    """The shape the tail option is for (224 channel tiles on 132 SMs: 92 split)."""
    caps = _require_wgmma(torch.float16)
    torch.manual_seed(92)
    n, k = 28672, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    tail = tail_tiles(n // 128, caps.limits.sms)
    assert tail == 92
    p = _prefill_plan(api._registry[handle], m, "f16", 128, tail=tail)
    return qw, handle, p, torch.randn(m, k, device="cuda", dtype=torch.float16)


def _pair_wide(m):
    """28672 x 2048 (224 channel tiles, 112 pairs): the EMPTY and FULL phases of both blocks must line up every
    launch."""
    _require_wgmma(torch.float16)
    torch.manual_seed(112)
    n, k = 28672, 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    handle = api.prepared(qw, torch.float16, torch.device("cuda", torch.cuda.current_device()))
    p = _prefill_plan(api._registry[handle], m, "f16", 128, cluster=2)
    assert p.tiles.option("cluster") == 2
    return qw, handle, p, torch.randn(m, k, device="cuda", dtype=torch.float16)


def _occupancy_split_cluster(m):
    """A split-cluster occupancy plan (its slots and counters reset themselves)."""
    _require_wgmma(torch.float16)
    torch.manual_seed(5)
    qw = humming.quantize(torch.randn(2048, 8192, device="cuda") * 0.05, "w4a16")
    x = torch.randn(m, 8192, device="cuda", dtype=torch.float16)
    humming.gemm(x, qw)
    handle = api.prepared(qw, torch.float16, x.device)
    p = _occupancy_plan(api._registry[handle], m, 16, 1, 7, 0, 8, 2, "f16")
    return qw, handle, p, x


REPEATS = [("streamk", _streamk_wide, 128), ("streamk", _streamk_wide, 1100), ("fitted-streamk", _fitted_wide, 150),
           ("fitted-streamk", _fitted_wide, 300), ("tail", _tail_wide, 128), ("pair", _pair_wide, 128),
           ("occupancy", _occupancy_split_cluster, 16)]


@pytest.mark.parametrize("variant,build,m", REPEATS, ids=[f"{v}-m{m}" for v, _, m in REPEATS])
def test_repeats_and_graph_replay(variant, build, m):
    """A variant's plan forced on a layer, launched 20 times in a row (its counters, slots and phases reset
    themselves), then CUDA-graph replay with fresh activations."""
    qw, handle, p, x = build(m)
    forced_repeats_and_replay(qw, handle, p, x, TOL[torch.float16])


# ----------------------------------------------------------------------------- the small form's multicast clusters
# (M, token tile, splits, stages, fold, cluster)
CLUSTER_CASES = [(9, 16, 1, 8, 0, 2), (16, 16, 4, 8, 1, 4), (24, 32, 2, 8, 0, 4), (33, 48, 1, 4, 0, 2),
                 (64, 64, 2, 4, 0, 4), (100, 128, 1, 6, 0, 2), (128, 128, 2, 4, 0, 4), (300, 128, 4, 6, 0, 2),
                 (16, 16, 16, 8, 0, 2)]  # the last: 4 k atoms per split, fewer stages than slots


def _force_cluster(qw, m: int, dtype, pdl: bool = False, **options):
    handle = api.prepared(qw, dtype, torch.device("cuda", torch.cuda.current_device()))
    prep = api._registry[handle]
    p = plan_wna16_wgmma_rs(prep.caps, _layout(prep, m), m, _act(dtype), scheme="w4a16", tma=True, small=True,
                            **options)
    prep.plans[m] = with_pdl(prep.caps, p) if pdl else p
    prep.launches.pop(m, None)
    return handle, prep.plans[m]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("name,group", [("w4a16", 128), ("w4a16-zp", 128), ("w4a16", None)],
                         ids=["w4a16-g128", "w4a16-zp-g128", "w4a16-channel"])
def test_cluster_small_form(name, group, dtype):
    """Clusters of 2 / 4 adjacent slabs share each activation stage through one multicast tensor copy (slots released
    by peer mbarrier arrivals, no block barrier per stage): token tiles 16-128, split-K (also splits shorter than the
    slot ring), fold."""
    _require_wgmma(dtype)
    k = 4096
    qw, bias = _biased_layer(name, group, dtype, k=k)
    for m, bt, splits, stages, fold, cluster in CLUSTER_CASES:
        if fold and (group is None or name.endswith("zp")):
            fold = 0
        handle, p = _force_cluster(qw, m, dtype, bt=bt, splits=splits, stages=stages, fold=fold, cluster=cluster)
        assert p.cluster_dims == (1, cluster, 1)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw)
        torch.cuda.synchronize()
        assert api._registry[handle].launches[m].cluster == (1, cluster, 1)
        assert not torch.isnan(out).any(), ("output not fully written", p.kernel_name)
        err = rel_error(out, humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32))
        assert err <= TOL[dtype], (m, err, p.explain())


def test_cluster_pdl_back_to_back_and_graph_replay():
    """Many PDL cluster launches in a row on one stream (each reads the previous one's output as its input, so a
    missing wait or a slot released too early shows), then CUDA-graph replay."""
    dtype = torch.float16
    _require_wgmma(dtype)
    torch.manual_seed(5)
    n = k = 2048
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, "w4a16")
    for m, bt, splits, stages, cluster in ((16, 16, 2, 8, 4), (128, 128, 1, 4, 2)):
        _, p = _force_cluster(qw, m, dtype, pdl=True, bt=bt, splits=splits, stages=stages, cluster=cluster)
        assert p.pdl and p.cluster_dims == (1, cluster, 1)
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        outs, ys = [x], []
        for _ in range(20):
            y = humming.gemm(outs[-1], qw)
            ys.append(y)
            outs.append(y / y.float().abs().amax().clamp_min(1e-3).to(dtype))  # keep the chain in range
        torch.cuda.synchronize()
        for inp, y in zip(outs[:-1], ys):
            assert not torch.isnan(y).any()
            assert rel_error(y, humming.reference_gemm(inp, qw, out_dtype=torch.float32)) <= TOL[dtype]
        err = graph_replay_error(lambda s: humming.gemm(s, qw), x,
                                 lambda t: humming.reference_gemm(t, qw, out_dtype=torch.float32))
        assert err <= TOL[dtype], (m, err)
