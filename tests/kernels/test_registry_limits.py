"""CPU: the registry honours the limits a profile declares: a family whose plan needs more threads per block or
shared memory than the profile allows, or that cannot plan on it, hands the problem on, and the chosen plan says
why; 64-thread warps are refused by name."""
from __future__ import annotations

import dataclasses

import pytest

from humming.capabilities import get_profile
from humming.core.problem import Problem, scheme_of
from humming.core.registry import limit_refusal, select
from humming.errors import UnsupportedOnDevice


def with_limits(name: str, **limits):
    caps = get_profile(name)
    return dataclasses.replace(caps, limits=dataclasses.replace(caps.limits, **limits))


@pytest.mark.parametrize("scheme", ["w4a16", "w8a16", "w4a8-fp8", "w8a8-int8"])
def test_threads_per_block_is_law(scheme):
    caps = with_limits("nvidia-h200", max_threads_per_block=256)
    for m in (1, 16, 128, 1024, 4096):
        sel = select(Problem(scheme_of(scheme), m, 8192, 8192, "f16"), caps)
        assert sel.plan.threads <= 256, (scheme, m, sel.plan.kernel_name)
        assert not limit_refusal(sel.plan, caps)
    big = select(Problem(scheme_of("w4a16"), 4096, 8192, 8192, "f16"), caps).plan
    assert any("allows 256 (max_threads_per_block)" in r for r in big.reasons)


def test_small_shared_memory_falls_back():
    caps = with_limits("nvidia-h200", smem_per_block_kb=100)
    for m in (1, 64, 1024):
        plan = select(Problem(scheme_of("w4a16"), m, 8192, 8192, "f16"), caps).plan
        assert plan.smem_bytes <= 100 * 1024, (m, plan.kernel_name)


def test_other_warp_sizes_are_refused():
    caps = with_limits("nvidia-h200", warp_size=64)
    with pytest.raises(UnsupportedOnDevice, match="32-thread warps"):
        select(Problem(scheme_of("w4a16"), 16, 4096, 4096, "f16"), caps)
