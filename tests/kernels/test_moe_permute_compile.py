"""CPU: the act-order experts' permutation kernel (humming.core.moe.permute_kernel) compiles for every shipped profile
with an NVRTC route, without spills; act-order MoE problems plan on both MoE families and say what it costs; the
operands it refuses are named."""
from __future__ import annotations

import re

import pytest
import torch

import humming
from humming.capabilities import list_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.moe.permute_kernel import KERNEL_NAME, permute_source, permuted_rows
from humming.core.moe.routing import route
from humming.core.problem import Problem
from humming.core.registry import select
from humming.devices import get_backend
from humming.devices.current import resolve_profile
from humming.errors import ShapeError

PROFILES = [p for p in list_profiles(include_abstract=False)
            if p.target.arch and get_backend(p).compile_route(p).compiler == "nvrtc"]


@pytest.mark.parametrize("profile", PROFILES, ids=[p.name for p in PROFILES])
def test_permute_kernel_compiles_without_spills(profile, nvrtc_route):
    route_ = nvrtc_route(profile)
    mod = compile_cuda(permute_source(), [KERNEL_NAME], route_.arch, options=(*route_.options, "--ptxas-options=-v"),
                       cache=False)
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
    assert spills == [0], mod.log
    assert f".entry {KERNEL_NAME}(" in mod.ptx


@pytest.mark.parametrize("tokens", [16, 4096])  # the tile kernel, and the register-A kernel on the H200
def test_act_order_moe_plans(tokens):
    caps = resolve_profile("nvidia-h200")
    problem = Problem(humming.schemes.get("w4a16"), tokens, 1024, 2048, "bf16", form="indexed", experts=8, top_k=2,
                      act_order=True)
    plan = select(problem, caps).plan
    assert any(r.startswith("act-order experts") for r in plan.reasons), plan.reasons


def test_permuted_rows_refuses_what_it_cannot_take():
    r = route(torch.zeros(2, 1, dtype=torch.int32), 2, 16)
    with pytest.raises(ShapeError, match="contiguous CUDA 16-bit"):
        permuted_rows(torch.zeros(2, 64, dtype=torch.float16), r, torch.zeros(2, 64, dtype=torch.int32), 1)
