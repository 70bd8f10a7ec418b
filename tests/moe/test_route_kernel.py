"""CPU: the routing kernels (humming.core.moe.route_source) compile with NVRTC for sm_75, sm_80 and sm_90a without
spills, within one block's registers and static shared memory, with the instructions they are written around; the
host side refuses what the kernels do not take, and route() / the grouped forms hand CUDA calls to the kernels only
where the sizes fit. The kernels themselves run in tests/gpu/test_route_kernel_gpu.py."""
from __future__ import annotations

import re

import pytest
import torch

from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.moe import route_kernel, routing
from humming.core.moe.route_kernel import (
    MAX_LAYOUT_CAPACITY,
    MAX_ROUTE_SLOTS,
    RoutingKernelLimit,
    fits_layout,
    fits_route,
    route_cuda,
    routing_from_counts_cuda,
    routing_from_offsets_cuda,
)
from humming.core.moe.route_source import (
    KERNEL_NAMES,
    MAX_EXPERTS,
    THREADS,
    layout_kernel_name,
    route_kernel_name,
    route_source,
)
from humming.errors import ShapeError, UnsupportedOnDevice

ARCHS = ["sm_75", "sm_80", "sm_90a"]


def _compiled(arch: str):
    try:
        select_toolchain(arch, None)
    except UnsupportedOnDevice as exc:
        pytest.skip(f"installed NVRTC cannot target {arch}: {str(exc).splitlines()[0]}")
    # no cache: the ptxas statistics are only in the log of a fresh compile
    return compile_cuda(route_source(), list(KERNEL_NAMES), arch, options=("--ptxas-options=-v",), cache=False)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles_without_spills(arch):
    mod = _compiled(arch)
    assert mod.cubin[:4] == b"\x7fELF"
    log = mod.log
    entries = re.findall(r"Compiling entry function '(\w+)'", log)
    assert sorted(entries) == sorted(KERNEL_NAMES), log
    spills = [int(v) for v in re.findall(r"(\d+) bytes spill stores", log)]
    assert len(spills) == len(KERNEL_NAMES) and max(spills) == 0, log
    regs = [int(v) for v in re.findall(r"Used (\d+) registers", log)]
    assert len(regs) == len(KERNEL_NAMES) and max(regs) <= 65536 // THREADS, log  # a whole block on one SM
    smem = [int(v) for v in re.findall(r"(\d+) bytes smem", log)]
    assert smem and max(smem) <= 48 * 1024, log  # static shared memory, no opt-in needed


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_holds_the_intended_instructions(arch):
    ptx = _compiled(arch).ptx
    assert f".target {arch}" in ptx
    assert "match.any.sync.b32" in ptx  # lanes of a warp with the same expert
    assert "dp4a.u32.u32" in ptx  # the per-warp byte counts summed four at a time
    assert "atom.shared.add" in ptx or "red.shared.add" in ptx  # per-expert counts in shared memory
    for name in KERNEL_NAMES:
        assert f".entry {name}(" in ptx


def test_kernel_names():
    assert route_kernel_name(32, 64) == "humming_moe_route_ids32_map64"
    assert layout_kernel_name("offsets", 64) == "humming_moe_layout_offsets64"
    assert layout_kernel_name("counts", 32) == "humming_moe_layout_counts32"
    assert len(set(KERNEL_NAMES)) == 8
    with pytest.raises(ValueError, match="form must be"):
        layout_kernel_name("masked", 32)


def test_source_names_its_limits():
    src = route_source()
    assert f"#define THREADS {THREADS}" in src and f"#define MAX_EXPERTS {MAX_EXPERTS}" in src
    assert MAX_EXPERTS <= THREADS  # one expert per thread in the scans


def test_fits():
    assert fits_route(MAX_ROUTE_SLOTS, MAX_EXPERTS) and fits_route(0, 1)
    assert not fits_route(MAX_ROUTE_SLOTS + 1, 8) and not fits_route(8, MAX_EXPERTS + 1)
    assert fits_layout(MAX_LAYOUT_CAPACITY, MAX_EXPERTS)
    assert not fits_layout(MAX_LAYOUT_CAPACITY + 1, 8) and not fits_layout(64, MAX_EXPERTS + 1)


def test_direct_calls_refuse_what_the_kernels_do_not_take():
    ids = torch.zeros(4, 2, dtype=torch.int32)
    with pytest.raises(ShapeError, match="topk_ids must be a CUDA tensor"):
        route_cuda(ids, 4, 16)
    with pytest.raises(RoutingKernelLimit, match=f"up to {MAX_ROUTE_SLOTS} slots and {MAX_EXPERTS} experts"):
        route_cuda(torch.zeros(MAX_ROUTE_SLOTS + 1, 1, dtype=torch.int32), 4, 16)
    with pytest.raises(RoutingKernelLimit, match="got 8 slots and 1025 experts"):
        route_cuda(ids, MAX_EXPERTS + 1, 16)
    with pytest.raises(ShapeError, match="expert_offsets must be a CUDA tensor"):
        routing_from_offsets_cuda(torch.tensor([0, 2, 4]), 4, 16)
    with pytest.raises(ShapeError, match="counts must be a CUDA tensor"):
        routing_from_counts_cuda(torch.tensor([1, 2]), 4, 16)
    with pytest.raises(RoutingKernelLimit, match="grouped routing kernels"):
        routing_from_counts_cuda(torch.zeros(MAX_EXPERTS + 1, dtype=torch.int32), 4, 16)
    with pytest.raises(RoutingKernelLimit, match="grouped routing kernels"):
        routing_from_counts_cuda(torch.zeros(2, dtype=torch.int32), MAX_LAYOUT_CAPACITY, 16)
    # the same shape checks as the torch forms
    with pytest.raises(ShapeError, match="block_m must be a positive power of two"):
        route_cuda(ids, 4, 24)
    with pytest.raises(ShapeError, match="topk_ids must be int32 or int64"):
        route_cuda(ids.float(), 4, 16)
    with pytest.raises(ShapeError, match="at least one expert"):
        routing_from_offsets_cuda(torch.tensor([0]), 0, 16)


class _Recorder:
    """A stand-in for humming.core.moe.route_kernel: records which forms were handed to it."""

    def __init__(self):
        self.calls: list[str] = []
        self.fits_route, self.fits_layout = route_kernel.fits_route, route_kernel.fits_layout

    def launch_route(self, *args):
        self.calls.append("route")
        return "kernel"

    def routing_from_offsets_cuda(self, *args):
        self.calls.append("offsets")
        return "kernel"

    def routing_from_counts_cuda(self, *args):
        self.calls.append("counts")
        return "kernel"


def test_routing_hands_calls_the_kernels_take_to_them(monkeypatch):
    kernels = _Recorder()
    monkeypatch.setattr(routing, "_kernels_for", lambda t: kernels)
    ids = torch.tensor([[0, 1]])
    assert routing.route(ids, 2, 16) == "kernel"
    assert routing.routing_from_offsets(torch.tensor([0, 1, 2]), 2, 16) == "kernel"
    assert routing.routing_from_counts(torch.tensor([1, 1]), 2, 16) == "kernel"
    assert kernels.calls == ["route", "offsets", "counts"]
    # sizes beyond the kernels: the torch ops
    r = routing.route(ids, MAX_EXPERTS + 1, 16)
    assert isinstance(r, routing.Routing) and r.sorted_ids.tolist() == [0] + [2] * 15 + [1] + [2] * 15
    r = routing.routing_from_counts(torch.zeros(MAX_EXPERTS + 1, dtype=torch.int32), 1, 16)
    assert isinstance(r, routing.Routing)
    assert kernels.calls == ["route", "offsets", "counts"]


def test_cpu_tensors_never_reach_the_kernels():
    assert routing._kernels_for(torch.zeros(1)) is None
    assert routing._kernels_for(torch.zeros(1, device="meta")) is None
