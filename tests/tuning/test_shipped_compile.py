"""CPU: every kernel that the shipped H200 tuning entries, and the two-warpgroup form's default rules on the shapes
they were measured on, make the runtime launch compiles for sm_90a without spills or serialized wgmmas (ptxas -v)."""
from __future__ import annotations

import re

import pytest

from humming import schemes
from humming.capabilities import get_profile
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.mma_wna16 import tuned
from humming.core.families.mma_wna16.layout import layout_for
from humming.core.plan import launch_options
from humming.core.problem import Problem
from humming.core.registry import select
from humming.core.tuning import entries as tuning
from humming.errors import UnsupportedOnDevice

H200 = get_profile("nvidia-h200")


def _need_sm90a():
    try:
        select_toolchain("sm_90a", None)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _shipped_h200():
    path = next(p for p in tuning.shipped_files() if p.name == "nvidia-h200.json")
    return sorted(tuning.read_entries(path).items())


def _assert_clean(plan) -> None:
    from humming import api

    mod = compile_cuda(api.source(plan, H200), [plan.kernel_name], "sm_90a", options=("--ptxas-options=-v",))
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
    assert spills and max(spills) == 0, (plan.kernel_name, mod.log)
    assert not re.search(r"C751\d", mod.log), (plan.kernel_name, mod.log)  # serialized wgmmas


@pytest.mark.parametrize("key, entry", _shipped_h200(), ids=[k.split("|", 3)[-1] for k, _ in _shipped_h200()])
def test_shipped_entries_compile_clean(key, entry):
    _need_sm90a()
    # the weights as the runtime prepares them for the H200 (its pair order: layout_for with the profile)
    layout = layout_for(schemes.get(entry["scheme"]), entry["n"], entry["k"], "f16", caps=H200)
    plan = tuned.tuned_plan(H200, layout, entry["m"], "f16", entry["scheme"])
    assert plan is not None, key
    _assert_clean(launch_options(H200, plan))


@pytest.mark.parametrize("n, k", [(8192, 8192), (28672, 8192), (4096, 14336)])
@pytest.mark.parametrize("m", [513, 768, 1024, 4096])
def test_prefill_defaults_compile_clean(n, k, m):
    """What the registry's register-A prefill family runs there (plain or stream-K, 128- or 256-token tiles; the
    knobs' shipped values, none overridden)."""
    _need_sm90a()
    chosen = select(Problem(schemes.get("w4a16"), m, n, k), H200)
    plan = chosen.plan
    assert chosen.family.name == "register_a" and plan.path == "wgmma-rs" and plan.tiles.bn == 128
    layout = layout_for(schemes.get("w4a16"), n, k, "f16", caps=H200)
    assert plan == tuned.register_a_prefill_plan(H200, layout, m, "f16", "w4a16")
    _assert_clean(plan)
