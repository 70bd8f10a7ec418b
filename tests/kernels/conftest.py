"""Shared by the kernel compile tests."""
import re

import pytest


@pytest.fixture
def native_8bit_defaults(monkeypatch):
    """native_8bit_defaults(*knobs) -> GemmOptions: the planners' defaults for the 8-bit kernel tests: none of the
    named tuning knobs overridden (each must be one of humming.core.tuning.knobs.KNOBS), and W8A8 / W4A8 kept on the
    native 8-bit kernels (not the widened weight-only path, humming.core.routes.widened_ranges): for the rest of the test
    the call options that humming.plan and humming.gemm take when given none are GemmOptions(act_widen=False), which
    it returns (pass ``dataclasses.replace(it, fast_accum=True)`` and the like for other numerics)."""
    from humming import options
    from humming.core.tuning import knobs

    native = options.GemmOptions(act_widen=False)
    monkeypatch.setattr(options, "DEFAULT", native)  # what humming.plan / gemm resolve options=None to

    def unset(*names: str) -> options.GemmOptions:
        forced = dict(knobs.overridden())
        for name in names:
            assert name in knobs.KNOBS, f"{name!r} is not a tuning knob"
            assert name not in forced, f"knob {name} is overridden ({forced[name]!r})"
        return native
    return unset


def route_or_skip(caps):
    """The backend's compile route for the profile; skips (with the reason) where the installed NVRTC is too old for
    its target."""
    from humming.core.compile.nvrtc import select_toolchain
    from humming.devices import get_backend
    from humming.errors import UnsupportedOnDevice

    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    return route


@pytest.fixture
def nvrtc_route():
    """route(caps) -> the profile's compile route, skipping where the installed NVRTC is too old for its target."""
    return route_or_skip


@pytest.fixture
def compiled_for_profile():
    """compile(plan, caps) -> (kernel, module) as the runtime compiles it (humming.core.runtime.compiled), skipping
    where the installed NVRTC is too old for the profile's target."""
    from humming.core.runtime.compiled import compile_plan

    def compile_for(plan, caps):
        route_or_skip(caps)
        return compile_plan(plan, caps)
    return compile_for


@pytest.fixture
def compiled_without_spills():
    """compile(plan, caps) -> the NVRTC module of the plan's kernel for the profile's target, compiled with ptxas
    verbose output; skips (with the reason) where the installed NVRTC is too old for the target, and asserts that
    ptxas reported no spill stores."""
    from humming import api
    from humming.core.compile.compiler import compile_cuda

    def compile_plan(plan, caps):
        route = route_or_skip(caps)
        mod = compile_cuda(api.source(plan, caps), [plan.kernel_name], route.arch,
                           options=(*route.options, "--ptxas-options=-v"), cache=False)
        spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
        assert spills and max(spills) == 0, mod.log
        return mod
    return compile_plan
