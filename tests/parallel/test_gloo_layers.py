"""CPU: the tensor- and expert-parallel humming layers (humming.nn_parallel) in 2 and 4 processes over gloo
(reference backend) equal the single-process layer: column-parallel (with and without the gathered output) and
row-parallel linears for weight-only int, zero-point, act-order and W8A8 schemes, and QuantMoE split by its
intermediate size and by its experts."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import humming
from humming.nn_parallel import ColumnParallelQuantLinear, ParallelQuantMoE, RowParallelQuantLinear

# (scheme, act_order, tolerance): W8A8's per-token activation scale is taken per rank's slice of x in a row-parallel
# layer (as in any tensor-parallel split), so its sum matches the whole layer up to that quantization
LINEAR_CASES = [("w4a16", False, 1e-5), ("w4a16-zp", False, 1e-5), ("w4a16", True, 1e-5), ("w8a16", False, 1e-5),
                ("w8a8-int8", False, 2e-2)]


def _close(got: torch.Tensor, want: torch.Tensor, tol: float, what: str) -> None:
    err = (got - want).abs().max().item()
    assert err <= tol * want.abs().max().item() + 1e-5, f"{what}: max error {err:.3g}"


def _worker(rank: int, world: int, rendezvous: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        for i, (scheme, act_order, tol) in enumerate(LINEAR_CASES):
            torch.manual_seed(100 + i)  # the same weights and inputs on every rank
            w, x = torch.randn(256, 512) * 0.05, torch.randn(5, 512)
            bias = torch.randn(256)
            qw = humming.quantize(w, scheme, act_order=act_order or None, group_size=64 if act_order else None)
            whole = humming.nn.QuantLinear.from_quantized(qw, bias)(x)
            col = ColumnParallelQuantLinear(qw, bias, gather_output=True)(x)
            _close(col, whole, 1e-5, f"{scheme} column-parallel gathered")
            part = ColumnParallelQuantLinear(qw, bias)(x)
            _close(part, whole[:, rank * 256 // world:(rank + 1) * 256 // world], 1e-5, f"{scheme} column slice")
            row = RowParallelQuantLinear(qw, bias, input_is_parallel=False)(x)
            _close(row, whole, tol, f"{scheme}{' act-order' if act_order else ''} row-parallel")
            if not act_order:
                xs = x[:, rank * 512 // world:(rank + 1) * 512 // world]
                _close(RowParallelQuantLinear(qw, bias)(xs), whole, tol, f"{scheme} row-parallel, x already split")
        torch.manual_seed(7)
        experts, hidden, inter = 8, 128, 256
        moe = humming.nn.QuantMoE.from_experts(torch.randn(experts, inter, hidden) * 0.05,
                                               torch.randn(experts, hidden, inter) * 0.05,
                                               torch.randn(experts, inter, hidden) * 0.05, "w4a16", group_size=64)
        x = torch.randn(6, hidden)
        ids = torch.stack([torch.randperm(experts)[:2] for _ in range(6)]).to(torch.int32)
        tw = torch.softmax(torch.randn(6, 2), dim=1)
        whole = moe(x, ids, tw)
        for mode in ("tensor", "expert"):
            _close(ParallelQuantMoE(moe, mode=mode)(x, ids, tw), whole, 1e-5, f"QuantMoE {mode}-parallel")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_parallel_layers_match_one_process(world, tmp_path):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.spawn(_worker, args=(world, str(tmp_path / "rendezvous")), nprocs=world, join=True)


def test_needs_an_initialised_group():
    qw = humming.quantize(torch.randn(64, 128), "w4a16", group_size=64)
    with pytest.raises(humming.errors.ShapeError, match="init_process_group"):
        ColumnParallelQuantLinear(qw)
