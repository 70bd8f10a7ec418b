"""The routing kernels (humming.core.moe.route_kernel) on a real GPU, element for element against the torch ops on the
CPU (the oracle: humming.core.moe.routing on CPU tensors): random and skewed ids (every slot to one expert, a few
experts, an expert repeated in a token, -1 and out-of-range ids, expert maps with unmapped experts), 0 to 16384
tokens, top-k 1 to 8, 1 to 512 experts, block_m 16 / 32 / 64, int32 and int64 inputs; the grouped forms with good and
bad offsets and counts; outputs filled with garbage before each launch, so every element must be written; CUDA-graph
capture and replay; a side stream."""
from __future__ import annotations

import random

import pytest
import torch

from humming.core.moe import route_kernel
from humming.core.moe.route_kernel import (
    MAX_ROUTE_SLOTS,
    RoutingKernelLimit,
    route_cuda,
    routing_from_counts_cuda,
    routing_from_offsets_cuda,
)
from humming.core.moe.route_source import MAX_EXPERTS
from humming.core.moe.routing import Routing, route, routing_from_counts, routing_from_offsets

pytestmark = pytest.mark.gpu

DTYPES = (torch.int32, torch.int64)


@pytest.fixture(autouse=True)
def _poisoned_routing(monkeypatch):
    """Every routing kernel writes into outputs filled with -7777: an element left unwritten shows."""
    monkeypatch.setattr(route_kernel, "_POISON", True)


def assert_same(got: Routing, want: Routing, what) -> None:
    """``got`` (CUDA) equals the oracle ``want`` (CPU) in every element and every field."""
    assert got.sorted_ids.is_cuda, what
    assert (got.block_m, got.num_tokens, got.top_k, got.num_experts) == \
        (want.block_m, want.num_tokens, want.top_k, want.num_experts), what
    for name in ("sorted_ids", "expert_ids", "num_padded"):
        g, w = getattr(got, name).cpu(), getattr(want, name)
        assert g.dtype == torch.int32 and g.shape == w.shape, (what, name, g.dtype, g.shape, w.shape)
        if not torch.equal(g, w):
            i = int((g != w).nonzero()[0, 0])
            raise AssertionError(f"{what}: {name}[{i}] is {int(g[i])}, the oracle says {int(w[i])}")


# ------------------------------------------------------------------------------------------------- random cases
def random_ids(rng: random.Random, gen: torch.Generator):
    """(topk_ids [T, top_k] int64 on the CPU, num_experts, block_m, expert_map int64 or None, kind)."""
    num_tokens = rng.choice([0, 1, 2, 3, 7, 16, 33, 64, 100, 257, 1000, 1024, 1025, 4096, 16384, rng.randint(0, 2048)])
    top_k = min(rng.randint(1, 8), MAX_ROUTE_SLOTS // max(num_tokens, 1))
    num_experts = rng.choice([1, 2, 3, 8, 64, 128, 256, 512, rng.randint(1, 512)])
    block_m = rng.choice([16, 32, 64])
    kind = rng.choice(["uniform", "one", "few", "repeat", "invalid", "map"])
    shape = (num_tokens, top_k)
    pool = torch.arange(num_experts)
    expert_map = None
    if kind == "one":  # every slot to one expert
        pool = torch.tensor([rng.randrange(num_experts)])
    elif kind == "few":  # most experts empty
        pool = torch.tensor(rng.sample(range(num_experts), min(num_experts, rng.randint(1, 3))))
    elif kind == "invalid":  # -1 and out-of-range ids, dropped
        pool = torch.cat([pool, torch.tensor([-1, -1, num_experts, num_experts + 5, -7, 2**31 - 1])])
    elif kind == "map":  # expert parallelism: global ids, some not on this device, some outside the map
        num_global = rng.randint(1, 2 * num_experts + 8)
        expert_map = torch.full((num_global,), -1, dtype=torch.int64)
        local = rng.sample(range(num_global), min(num_global, num_experts))
        expert_map[torch.tensor(local, dtype=torch.int64)] = torch.arange(len(local))
        pool = torch.cat([torch.arange(num_global), torch.tensor([-1, num_global, num_global + 3])])
    ids = pool[torch.randint(len(pool), shape, generator=gen)]
    if kind == "repeat":  # the same expert more than once in a token
        same = pool[torch.randint(len(pool), (num_tokens, 1), generator=gen)].expand(shape)
        ids = torch.where(torch.rand(shape, generator=gen) < 0.6, same, ids)
    return ids, num_experts, block_m, expert_map, kind


def test_route_cuda_matches_the_torch_ops():
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    for case in range(400):
        ids, e, bm, emap, kind = random_ids(rng, gen)
        id_dtype, map_dtype = rng.choice(DTYPES), rng.choice(DTYPES)
        ids = ids.to(id_dtype)
        emap = None if emap is None else emap.to(map_dtype)
        want = route(ids, e, bm, expert_map=emap)  # CPU: the torch ops
        got = route_cuda(ids.cuda(), e, bm, None if emap is None else emap.cuda())
        assert_same(got, want, (case, kind, tuple(ids.shape), e, bm, id_dtype, map_dtype))


def test_route_on_cuda_runs_the_kernel(monkeypatch):
    calls = []
    real = route_kernel.launch_route

    def counted(*args):
        calls.append(args[1:3])
        return real(*args)

    monkeypatch.setattr(route_kernel, "launch_route", counted)
    ids = torch.randint(0, 96, (33, 8), dtype=torch.int32)
    emap = torch.cat([torch.randperm(64), torch.full((32,), -1)]).to(torch.int32)  # 96 global ids, 32 unmapped
    assert_same(route(ids.cuda(), 64, 16, expert_map=emap.cuda()), route(ids, 64, 16, expert_map=emap), "route()")
    assert calls == [(64, 16)]


def test_skewed_extremes():
    for dtype in DTYPES:
        for bm in (16, 32, 64):
            cases = {
                "one expert, 16384 x 8": torch.full((16384, 8), 511, dtype=dtype),
                "every slot dropped": torch.full((300, 4), -1, dtype=dtype),
                "expert 0 only": torch.zeros(1025, 1, dtype=dtype),
                "the last expert and -1": torch.tensor([[511, -1]] * 700, dtype=dtype),
                "a repeated expert in every token": torch.tensor([[3, 3, 3, 7]] * 513, dtype=dtype),
                "no tokens": torch.zeros(0, 8, dtype=dtype),
                "one slot": torch.tensor([[200]], dtype=dtype),
                "every expert once": torch.randperm(512).to(dtype).reshape(64, 8),
            }
            for what, ids in cases.items():
                assert_same(route_cuda(ids.cuda(), 512, bm), route(ids, 512, bm), (what, dtype, bm))
    # huge int64 ids are out of range, never truncated into range
    ids = torch.tensor([[2**32 + 1, 1, -(2**40)]], dtype=torch.int64)
    assert_same(route_cuda(ids.cuda(), 4, 16), route(ids, 4, 16), "huge ids")


def test_expert_maps():
    ids = torch.randint(-2, 40, (500, 6))
    for dtype in DTYPES:
        for what, emap in {
            "empty map": torch.zeros(0, dtype=dtype),
            "all unmapped": torch.full((40,), -1, dtype=dtype),
            "half mapped": torch.where(torch.arange(40) % 2 == 0, torch.arange(40) // 2, -1).to(dtype),
            "entries out of range": torch.tensor([0, 25, -5, 1] * 10, dtype=dtype),
            "shorter than the ids": torch.arange(10, dtype=dtype),
        }.items():
            for ids_dtype in DTYPES:
                x = ids.to(ids_dtype)
                assert_same(route_cuda(x.cuda(), 20, 16, emap.cuda()), route(x, 20, 16, expert_map=emap),
                            (what, dtype, ids_dtype))


def test_every_expert_count_up_to_the_kernel_limit():
    rng, gen = random.Random(1), torch.Generator().manual_seed(1)
    for e in (1, 31, 32, 33, 511, 512, 1000, MAX_EXPERTS):
        ids = torch.randint(-1, e + 1, (rng.randint(1, 3000), rng.randint(1, 8)), generator=gen)
        assert_same(route_cuda(ids.cuda(), e, 16), route(ids, e, 16), e)


def test_non_contiguous_ids():
    ids = torch.randint(0, 16, (8, 200))
    assert_same(route_cuda(ids.cuda().t(), 16, 32), route(ids.t(), 16, 32), "transposed")


def test_beyond_the_kernel_route_uses_the_torch_ops():
    ids = torch.randint(0, MAX_EXPERTS + 100, (50, 4))
    with pytest.raises(RoutingKernelLimit):
        route_cuda(ids.cuda(), MAX_EXPERTS + 100, 16)
    assert_same(route(ids.cuda(), MAX_EXPERTS + 100, 16), route(ids, MAX_EXPERTS + 100, 16), "many experts")
    ids = torch.randint(0, 8, (MAX_ROUTE_SLOTS + 1, 1))
    assert_same(route(ids.cuda(), 8, 64), route(ids, 8, 64), "many slots")


# ------------------------------------------------------------------------------------------------- grouped forms
def test_routing_from_offsets_matches_the_torch_ops():
    rng = random.Random(2)
    for case in range(150):
        e = rng.choice([1, 2, 8, 64, 256, rng.randint(1, MAX_EXPERTS)])
        bm = rng.choice([16, 32, 64])
        num_rows = rng.choice([0, 1, 100, rng.randint(0, 20000)])
        cuts = sorted(rng.randint(0, num_rows) for _ in range(e - 1))
        if rng.random() < 0.3:  # many empty experts
            cuts = sorted(rng.choice([0, num_rows, cuts[0] if cuts else 0]) for _ in range(e - 1))
        offsets = [0] + cuts + [num_rows]
        if rng.random() < 0.2:  # bad offsets: clamped and made non-decreasing, never past the rows
            offsets = [rng.randint(-5, num_rows + 5) for _ in offsets]
        t = torch.tensor(offsets, dtype=rng.choice(DTYPES))
        assert_same(routing_from_offsets_cuda(t.cuda(), num_rows, bm), routing_from_offsets(t, num_rows, bm),
                    (case, e, bm, num_rows))


def test_routing_from_counts_matches_the_torch_ops():
    rng = random.Random(3)
    for case in range(150):
        e = rng.choice([1, 2, 8, 64, 256, rng.randint(1, MAX_EXPERTS)])
        cap = rng.choice([0, 1, 5, 16, rng.randint(0, 300)])
        bm = rng.choice([16, 32, 64])
        counts = [rng.choice([0, cap, cap + 3, rng.randint(0, max(cap, 0)), -2]) for _ in range(e)]
        t = torch.tensor(counts, dtype=rng.choice(DTYPES))
        assert_same(routing_from_counts_cuda(t.cuda(), cap, bm), routing_from_counts(t, cap, bm), (case, e, cap, bm))


def test_grouped_forms_on_cuda_run_the_kernels(monkeypatch):
    calls = []
    for name in ("routing_from_offsets_cuda", "routing_from_counts_cuda"):
        real = getattr(route_kernel, name)
        monkeypatch.setattr(route_kernel, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    offsets, counts = torch.tensor([0, 3, 3, 10]), torch.tensor([2, 0, 9])
    assert_same(routing_from_offsets(offsets.cuda(), 10, 16), routing_from_offsets(offsets, 10, 16), "offsets")
    assert_same(routing_from_counts(counts.cuda(), 8, 16), routing_from_counts(counts, 8, 16), "counts")
    assert calls == ["routing_from_offsets_cuda", "routing_from_counts_cuda"]


# ------------------------------------------------------------------------------------------------- streams, graphs
def test_side_stream():
    ids = torch.randint(0, 32, (700, 4))
    side = torch.cuda.Stream()
    x = ids.cuda()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = route_cuda(x, 32, 64)
    side.synchronize()
    assert_same(got, route(ids, 32, 64), "side stream")


def test_cuda_graph_capture_and_replay():
    num_tokens, top_k, e, bm = 64, 8, 128, 16
    emap = torch.cat([torch.randperm(e), torch.full((32,), -1)]).to(torch.int32)  # 160 global ids, 32 unmapped
    static_ids = torch.randint(0, 160, (num_tokens, top_k), dtype=torch.int32, device="cuda")
    static_counts = torch.zeros(e, dtype=torch.int64, device="cuda")
    static_offsets = torch.zeros(e + 1, dtype=torch.int32, device="cuda")
    gmap = emap.cuda()
    # warm-up outside the capture: the kernels are compiled and loaded on the first call
    route_cuda(static_ids, e, bm, gmap)
    routing_from_counts_cuda(static_counts, 24, bm)
    routing_from_offsets_cuda(static_offsets, 500, bm)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        r = route_cuda(static_ids, e, bm, gmap)
        rc = routing_from_counts_cuda(static_counts, 24, bm)
        ro = routing_from_offsets_cuda(static_offsets, 500, bm)
    gen = torch.Generator().manual_seed(4)
    for replay in range(4):
        ids = torch.randint(-1, 161, (num_tokens, top_k), dtype=torch.int32, generator=gen)
        counts = torch.randint(-1, 30, (e,), generator=gen)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64),
                             torch.randint(0, 501, (e,), generator=gen).sort().values]).to(torch.int32)
        static_ids.copy_(ids)
        static_counts.copy_(counts)
        static_offsets.copy_(offsets)
        graph.replay()
        torch.cuda.synchronize()
        assert_same(r, route(ids, e, bm, expert_map=emap), ("graph route", replay))
        assert_same(rc, routing_from_counts(counts, 24, bm), ("graph counts", replay))
        assert_same(ro, routing_from_offsets(offsets, 500, bm), ("graph offsets", replay))
