"""MoE routing (humming.core.moe.routing) against a plain-Python oracle, its invariants, and the proof that it never
synchronises with the device: it runs on the meta device, where any data-dependent step fails."""
from __future__ import annotations

import random

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from humming.core.moe.routing import (
    Routing,
    capacity,
    check_expert_map,
    check_ids,
    route,
    routing_from_counts,
    routing_from_offsets,
)
from humming.errors import ShapeError


# ------------------------------------------------------------------------------------------------- the oracle
def oracle_layout(runs: list[list[int]], num_slots: int, block_m: int, cap: int) -> tuple[list, list, int]:
    """sorted_ids, expert_ids, num_padded of experts whose entries are ``runs[e]`` (in order)."""
    sorted_ids: list[int] = []
    expert_ids: list[int] = []
    for e, run in enumerate(runs):
        padded = run + [num_slots] * (-len(run) % block_m)
        sorted_ids += padded
        expert_ids += [e] * (len(padded) // block_m)
    used = len(sorted_ids)
    assert used <= cap
    return sorted_ids + [num_slots] * (cap - used), expert_ids + [-1] * (cap // block_m - len(expert_ids)), used


def oracle_route(ids: list[list[int]], num_experts: int, block_m: int, expert_map: list[int] | None = None):
    top_k = len(ids[0]) if ids else 0
    runs: list[list[int]] = [[] for _ in range(num_experts)]
    for t, row in enumerate(ids):
        for j, g in enumerate(row):
            local = g
            if expert_map is not None:
                local = expert_map[g] if 0 <= g < len(expert_map) else -1
            if 0 <= local < num_experts:
                runs[local].append(t * top_k + j)
    num_slots = len(ids) * top_k
    return oracle_layout(runs, num_slots, block_m, capacity(num_slots, num_experts, block_m))


def as_lists(r: Routing) -> tuple[list, list, int]:
    return r.sorted_ids.tolist(), r.expert_ids.tolist(), int(r.num_padded[0])


# ------------------------------------------------------------------------------------------------- random cases
def random_case(rng: random.Random):
    """(topk_ids [T, top_k] as lists, num_experts, block_m, expert_map or None), with skewed distributions."""
    num_tokens = rng.choice([0, 1, 2, 3, 7, 16, 33, rng.randint(0, 300)])
    top_k = rng.randint(1, 8)
    num_experts = rng.choice([1, 2, 3, 8, rng.randint(1, 64), 64])
    block_m = rng.choice([8, 16, 64])
    kind = rng.choice(["uniform", "one", "few", "repeat", "invalid", "map"])
    expert_map = None
    pool = list(range(num_experts))
    if kind == "one":  # every slot to one expert
        pool = [rng.randrange(num_experts)]
    elif kind == "few":  # most experts empty
        pool = rng.sample(range(num_experts), min(num_experts, rng.randint(1, 3)))
    elif kind == "invalid":  # -1 and out-of-range ids, dropped
        pool = pool + [-1, -1, num_experts, num_experts + 5, -7]
    elif kind == "map":  # expert parallelism: global ids, some not on this device
        num_global = rng.randint(1, 96)
        local = rng.sample(range(num_global), min(num_global, num_experts))
        expert_map = [-1] * num_global
        for i, g in enumerate(local):
            expert_map[g] = i
        pool = list(range(num_global)) + [-1, num_global]
    ids = []
    for _ in range(num_tokens):
        if kind == "repeat":  # the same expert more than once in a token
            e = rng.choice(pool)
            ids.append([e if rng.random() < 0.6 else rng.choice(pool) for _ in range(top_k)])
        else:
            ids.append([rng.choice(pool) for _ in range(top_k)])
    return ids, top_k, num_experts, block_m, expert_map


CASES = [random_case(random.Random(seed)) for seed in range(300)]


def to_tensor(ids: list[list[int]], top_k: int, dtype=torch.int64) -> torch.Tensor:
    return torch.tensor(ids, dtype=dtype).reshape(len(ids), top_k)


def run_case(case, dtype=torch.int64) -> Routing:
    ids, top_k, num_experts, block_m, expert_map = case
    em = None if expert_map is None else torch.tensor(expert_map, dtype=dtype)
    return route(to_tensor(ids, top_k, dtype), num_experts, block_m, expert_map=em)


def test_route_matches_the_oracle():
    for case in CASES:
        ids, top_k, num_experts, block_m, expert_map = case
        r = run_case(case)
        assert as_lists(r) == oracle_route(ids, num_experts, block_m, expert_map), case
        assert (r.num_tokens, r.top_k, r.num_experts, r.block_m) == (len(ids), top_k, num_experts, block_m)


def test_route_int32_ids_and_map_give_the_same_routing():
    for case in CASES[:60]:
        a, b = run_case(case, torch.int64), run_case(case, torch.int32)
        assert as_lists(a) == as_lists(b)


def test_route_invariants():
    for case in CASES:
        ids, top_k, num_experts, block_m, expert_map = case
        r = run_case(case)
        s, bm, sentinel = r.sorted_ids, r.block_m, r.num_slots
        assert s.dtype == r.expert_ids.dtype == r.num_padded.dtype == torch.int32
        assert r.capacity == capacity(r.num_slots, num_experts, bm) and r.capacity % bm == 0
        assert tuple(r.expert_ids.shape) == (r.capacity // bm,) and tuple(r.num_padded.shape) == (1,)
        used = int(r.num_padded[0])
        assert used % bm == 0 and used <= r.capacity
        # every valid slot exactly once, nothing else but the sentinel
        flat = [g for row in ids for g in row]
        local = [(expert_map[g] if 0 <= g < len(expert_map) else -1) if expert_map else g for g in flat]
        valid = sorted(i for i, e in enumerate(local) if 0 <= e < num_experts)
        entries = s.tolist()
        assert sorted(v for v in entries if v != sentinel) == valid
        assert all(0 <= v <= sentinel for v in entries)
        assert all(v == sentinel for v in entries[used:])
        # each block belongs to its expert; blocks past the used length are -1; runs ascending, experts in order
        blocks = r.expert_ids.tolist()
        assert all(b == -1 for b in blocks[used // bm:])
        assert all(0 <= b < num_experts for b in blocks[:used // bm])
        assert blocks[:used // bm] == sorted(blocks[:used // bm])
        for b, e in enumerate(blocks[:used // bm]):
            chunk = [v for v in entries[b * bm:(b + 1) * bm] if v != sentinel]
            assert chunk, "a used block holds at least one slot"
            assert all(local[v] == e for v in chunk)
            assert chunk == sorted(chunk)
        # padding only at the end of a run: the sentinel never precedes a slot within a block
        for b in range(used // bm):
            chunk = entries[b * bm:(b + 1) * bm]
            k = chunk.index(sentinel) if sentinel in chunk else bm
            assert all(v == sentinel for v in chunk[k:])


def test_route_skewed_extremes():
    # all 256 x 8 slots to expert 63 of 64: one run of 2048 slots, 32 blocks of 64
    ids = torch.full((256, 8), 63, dtype=torch.int32)
    r = route(ids, 64, 64)
    assert int(r.num_padded[0]) == 2048
    assert r.sorted_ids[:2048].tolist() == list(range(2048))
    assert r.expert_ids[:32].tolist() == [63] * 32 and set(r.expert_ids[32:].tolist()) == {-1}
    # every slot dropped
    r = route(torch.full((5, 3), -1), 4, 16)
    assert int(r.num_padded[0]) == 0 and set(r.sorted_ids.tolist()) == {15} and set(r.expert_ids.tolist()) == {-1}
    # a repeated expert within a token: both slots, adjacent
    r = route(torch.tensor([[2, 2, 0]]), 3, 8)
    assert r.sorted_ids.tolist()[:16] == [2] + [3] * 7 + [0, 1] + [3] * 6
    assert r.expert_ids.tolist()[:2] == [0, 2]


def test_route_with_an_empty_expert_map_drops_everything():
    r = route(torch.tensor([[0, 1]]), 2, 8, expert_map=torch.zeros(0, dtype=torch.int32))
    assert int(r.num_padded[0]) == 0 and set(r.sorted_ids.tolist()) == {2}


def test_capacity():
    assert capacity(0, 8, 64) == 0
    assert capacity(1, 1, 16) == 16
    assert capacity(10, 3, 8) == 32  # round_up(10 + 3 * 7, 8)
    assert capacity(4096 * 8, 256, 128) == 4096 * 8 + 256 * 127  # already a multiple of 128
    # at most min(experts, slots) experts are non-empty: a few slots over many experts pad only their own runs
    assert capacity(1, 64, 16) == 16
    assert capacity(3, 256, 64) == 192  # 3 + 3 * 63
    assert capacity(8, 256, 16) == 128  # decode: one token, top-8 of 256 experts
    assert capacity(9, 8, 16) == 144  # round_up(9 + 8 * 15, 16)


def test_capacity_is_reached():
    # slots that all go to different experts use every entry; one more slot to any expert stays within it
    for slots, e, bm in [(1, 64, 16), (3, 256, 64), (8, 8, 16), (5, 5, 8)]:
        ids = torch.randperm(e)[:slots].reshape(slots, 1)
        r = route(ids, e, bm)
        assert int(r.num_padded[0]) == r.capacity == capacity(slots, e, bm) == slots * bm
    # more slots than experts: every expert one past a whole number of blocks
    ids = torch.arange(4).repeat(17).reshape(-1, 1)  # 68 slots, 17 per expert of 4
    r = route(ids, 4, 16)
    assert int(r.num_padded[0]) == r.capacity == capacity(68, 4, 16) == 4 * 32
    with pytest.raises(ShapeError, match="power of two"):
        capacity(4, 2, 24)
    with pytest.raises(ShapeError, match="non-negative"):
        capacity(-1, 2, 8)


# ------------------------------------------------------------------------------------------------- grouped forms
def oracle_offsets(offsets: list[int], num_rows: int, block_m: int):
    runs = [list(range(a, b)) for a, b in zip(offsets, offsets[1:])]
    return oracle_layout(runs, num_rows, block_m, capacity(num_rows, len(runs), block_m))


def oracle_counts(counts: list[int], cap: int, block_m: int):
    runs = [list(range(e * cap, e * cap + min(max(c, 0), cap))) for e, c in enumerate(counts)]
    num_rows = len(counts) * cap
    return oracle_layout(runs, num_rows, block_m, capacity(num_rows, len(counts), block_m))


def test_routing_from_offsets_matches_the_oracle():
    rng = random.Random(1)
    for _ in range(150):
        e = rng.randint(1, 64)
        block_m = rng.choice([8, 16, 64])
        num_rows = rng.choice([0, 1, rng.randint(0, 400)])
        cuts = sorted(rng.randint(0, num_rows) for _ in range(e - 1))
        if rng.random() < 0.3:  # many empty experts
            cuts = sorted(rng.choice([0, num_rows, cuts[0] if cuts else 0]) for _ in range(e - 1))
        offsets = [0] + cuts + [num_rows]
        r = routing_from_offsets(torch.tensor(offsets, dtype=rng.choice([torch.int32, torch.int64])), num_rows,
                                 block_m)
        assert as_lists(r) == oracle_offsets(offsets, num_rows, block_m), (offsets, block_m)
        assert (r.num_tokens, r.top_k, r.num_experts) == (num_rows, 1, e)


def test_routing_from_offsets_survives_bad_offsets():
    # decreasing / out-of-range offsets are clamped to [0, rows] and made non-decreasing, never indexing past x
    r = routing_from_offsets(torch.tensor([0, 10, 3, 99]), 6, 8)
    assert as_lists(r) == oracle_offsets([0, 6, 6, 6], 6, 8)
    r = routing_from_offsets(torch.tensor([-5, 2, 4]), 4, 8)
    assert as_lists(r) == oracle_offsets([0, 2, 4], 4, 8)


def test_routing_from_counts_matches_the_oracle():
    rng = random.Random(2)
    for _ in range(150):
        e = rng.randint(1, 64)
        cap = rng.choice([0, 1, 5, 16, rng.randint(0, 40)])
        block_m = rng.choice([8, 16, 64])
        counts = [rng.choice([0, cap, cap + 3, rng.randint(0, max(cap, 0)), -2]) for _ in range(e)]
        r = routing_from_counts(torch.tensor(counts, dtype=rng.choice([torch.int32, torch.int64])), cap, block_m)
        assert as_lists(r) == oracle_counts(counts, cap, block_m), (counts, cap, block_m)
        assert (r.num_tokens, r.top_k, r.num_experts) == (e * cap, 1, e)


# ------------------------------------------------------------------------------------------------- no host sync
def test_routing_runs_on_the_meta_device():
    """Meta tensors hold no data: .item(), .tolist(), nonzero, masked indexing, bincount and unique all fail on
    them. Routing that runs here has sizes computable from shapes alone and never reads a value on the host."""
    for num_tokens, top_k, e, bm in [(0, 2, 4, 16), (1, 1, 1, 8), (37, 8, 64, 64), (300, 4, 33, 16)]:
        ids = torch.empty(num_tokens, top_k, dtype=torch.int32, device="meta")
        r = route(ids, e, bm)
        cap = capacity(num_tokens * top_k, e, bm)
        assert r.sorted_ids.device.type == "meta"
        assert tuple(r.sorted_ids.shape) == (cap,) and tuple(r.expert_ids.shape) == (cap // bm,)
        assert tuple(r.num_padded.shape) == (1,)
        assert r.sorted_ids.dtype == r.expert_ids.dtype == r.num_padded.dtype == torch.int32
        emap = torch.empty(2 * e, dtype=torch.int64, device="meta")
        r = route(ids.long(), e, bm, expert_map=emap)
        assert tuple(r.sorted_ids.shape) == (cap,)
        r = routing_from_offsets(torch.empty(e + 1, dtype=torch.int64, device="meta"), num_tokens, bm)
        assert tuple(r.sorted_ids.shape) == (capacity(num_tokens, e, bm),)
        r = routing_from_counts(torch.empty(e, dtype=torch.int32, device="meta"), num_tokens, bm)
        assert tuple(r.expert_ids.shape) == (capacity(e * num_tokens, e, bm) // bm,)


def test_meta_device_rejects_what_would_synchronise():
    """The meta proof above is only a proof if the meta device refuses each forbidden step; check that it does."""
    t = torch.empty(8, dtype=torch.int64, device="meta")
    for forbidden in (lambda: t[0].item(), lambda: t.tolist(), lambda: torch.nonzero(t), lambda: t[t > 0],
                      lambda: torch.bincount(t), lambda: torch.unique(t), lambda: bool(t.any())):
        with pytest.raises((RuntimeError, NotImplementedError)):
            forbidden()


class _OpLog(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


SYNCING_OPS = {"aten._local_scalar_dense", "aten.nonzero", "aten.bincount", "aten._unique2", "aten.unique_dim",
               "aten.masked_select", "aten.item", "aten.unique_consecutive"}


def test_routing_dispatches_no_syncing_op():
    """On real (CPU) data too: the ops routing dispatches include none that reads a device value on the host."""
    ids = torch.tensor([[0, 3, 3], [1, -1, 7], [2, 2, 0]])
    with _OpLog() as log:
        route(ids, 4, 16)
        route(ids, 3, 8, expert_map=torch.tensor([0, -1, 1, 2]))
        routing_from_offsets(torch.tensor([0, 2, 2, 5]), 5, 8)
        routing_from_counts(torch.tensor([1, 0, 9]), 4, 8)
    assert log.ops and not (log.ops & SYNCING_OPS), log.ops & SYNCING_OPS
    with _OpLog() as log:  # the recorder does see a syncing op where there is one
        check_ids(ids, 8)
    assert log.ops & SYNCING_OPS


# ------------------------------------------------------------------------------------------------- emulated kernel
def test_a_kernel_emulated_from_the_routing_computes_every_slot():
    """Walk the blocks as an indexed MoE kernel does and check each valid slot's product lands once."""
    rng = random.Random(3)
    for _ in range(20):
        ids, top_k, e, bm, emap = random_case(rng)
        if not ids:
            continue
        x = torch.randn(len(ids), 4, dtype=torch.float64)
        w = torch.randn(e, 3, 4, dtype=torch.float64)
        em = None if emap is None else torch.tensor(emap)
        r = route(to_tensor(ids, top_k), e, bm, expert_map=em)
        out = torch.zeros(r.num_slots, 3, dtype=torch.float64)
        written = torch.zeros(r.num_slots, dtype=torch.int64)
        for b in range(int(r.num_padded[0]) // bm):
            expert = int(r.expert_ids[b])
            for s in r.sorted_ids[b * bm:(b + 1) * bm].tolist():
                if s < r.num_slots:
                    out[s] = w[expert] @ x[s // top_k]
                    written[s] += 1
        flat = to_tensor(ids, top_k).reshape(-1)
        local = flat if em is None else torch.where((flat >= 0) & (flat < len(emap)),
                                                    em[flat.clamp(0, max(len(emap) - 1, 0))], -1)
        valid = (local >= 0) & (local < e)
        assert torch.equal(written, valid.long())
        want = torch.stack([w[int(lo)] @ x[s // top_k] if v else torch.zeros(3, dtype=torch.float64)
                            for s, (lo, v) in enumerate(zip(local, valid))])
        assert torch.allclose(out, want)


# ------------------------------------------------------------------------------------------------- errors
def test_bad_input_is_named():
    ids = torch.tensor([[0, 1]])
    with pytest.raises(ShapeError, match="topk_ids must be int32 or int64"):
        route(ids.float(), 2, 16)
    with pytest.raises(ShapeError, match="topk_ids must be 2-D"):
        route(ids[0], 2, 16)
    with pytest.raises(ShapeError, match="topk_ids must be a tensor"):
        route([[0, 1]], 2, 16)
    for bad in (0, 12, -16, True, 16.0):
        with pytest.raises(ShapeError, match="block_m must be a positive power of two"):
            route(ids, 2, bad)
    with pytest.raises(ShapeError, match="num_experts must be an integer >= 1"):
        route(ids, 0, 16)
    with pytest.raises(ShapeError, match="expert_map must be int32 or int64"):
        route(ids, 2, 16, expert_map=torch.zeros(4))
    with pytest.raises(ShapeError, match="expert_map must be 1-D"):
        route(ids, 2, 16, expert_map=torch.zeros(2, 2, dtype=torch.int32))
    with pytest.raises(ShapeError, match="expert_map is on meta"):
        route(ids, 2, 16, expert_map=torch.zeros(4, dtype=torch.int32, device="meta"))
    with pytest.raises(ShapeError, match="at least one expert"):
        routing_from_offsets(torch.tensor([0]), 0, 16)
    with pytest.raises(ShapeError, match="num_rows must be an integer >= 0"):
        routing_from_offsets(torch.tensor([0, 1]), -1, 16)
    with pytest.raises(ShapeError, match="expert_offsets must be int32 or int64"):
        routing_from_offsets(torch.tensor([0.0, 1.0]), 1, 16)
    with pytest.raises(ShapeError, match="counts must be 1-D"):
        routing_from_counts(torch.zeros(2, 2, dtype=torch.int32), 4, 16)
    with pytest.raises(ShapeError, match="capacity_per_expert must be an integer >= 0"):
        routing_from_counts(torch.zeros(2, dtype=torch.int32), -4, 16)
    with pytest.raises(ShapeError, match="at least one expert"):
        routing_from_counts(torch.zeros(0, dtype=torch.int32), 4, 16)


def test_check_ids_names_the_bad_id():
    check_ids(torch.tensor([[0, -1], [3, 2]]), 4)
    with pytest.raises(ShapeError, match=r"topk_ids\[1, 0\] = 4 is not an expert id.*\[0, 4\)"):
        check_ids(torch.tensor([[0, -1], [4, 2]]), 4)
    with pytest.raises(ShapeError, match=r"topk_ids\[0, 1\] = -2"):
        check_ids(torch.tensor([[0, -2]], dtype=torch.int32), 4)


def test_check_expert_map():
    check_expert_map(torch.tensor([-1, 0, -1, 1]), 2)
    with pytest.raises(ShapeError, match=r"expert_map\[2\] = 5 is not a local expert id"):
        check_expert_map(torch.tensor([0, 1, 5]), 2)
    with pytest.raises(ShapeError, match="several global experts to local expert 1"):
        check_expert_map(torch.tensor([1, 0, 1]), 2)
