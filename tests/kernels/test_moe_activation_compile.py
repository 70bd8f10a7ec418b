"""CPU: the MoE gated-activation kernels (humming.core.moe.activation_kernel) compile for every shipped profile with an
NVRTC route (ptxas verbose: no spills), each form is in the module, and the loads are 16-byte vectors."""
from __future__ import annotations

import re

import pytest
import torch

from humming.capabilities import list_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.moe.activation_kernel import KERNEL_NAMES, activation_source, fits, kernel_name
from humming.devices import get_backend

PROFILES = [p for p in list_profiles(include_abstract=False)
            if p.target.arch and get_backend(p).compile_route(p).compiler == "nvrtc"]


@pytest.mark.parametrize("profile", PROFILES, ids=[p.name for p in PROFILES])
def test_activation_kernels_compile_without_spills(profile, nvrtc_route):
    route = nvrtc_route(profile)
    source = activation_source(profile)
    mod = compile_cuda(source, list(KERNEL_NAMES), route.arch, options=(*route.options, "--ptxas-options=-v"),
                       cache=False)
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
    assert len(spills) == len(KERNEL_NAMES) and max(spills) == 0, mod.log
    for name in KERNEL_NAMES:
        assert f".entry {name}(" in mod.ptx
    # halves: two 16-byte loads per 8 outputs (gate, up); pairs: two of the interleaved row
    assert mod.ptx.count("ld.global.nc.v4.u32") == 2 * len(KERNEL_NAMES)


def test_kernel_names_and_what_the_kernel_takes():
    assert len(set(KERNEL_NAMES)) == 8
    assert kernel_name("swiglu_clamped", True, torch.bfloat16) == "humming_moe_swiglu_clamped_pairs_bf16"
    assert not fits(torch.zeros(4, 16))  # CPU tensors never reach the kernel
