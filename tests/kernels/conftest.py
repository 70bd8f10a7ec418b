"""Shared by the kernel compile tests."""
import re

import pytest


@pytest.fixture
def native_8bit_defaults(monkeypatch):
    """unset(*envs): the planners' defaults for the 8-bit kernel tests: ``envs`` unset, and W8A8 / W4A8 kept on the
    native 8-bit kernels (not the widened weight-only path, humming.core.common.act_widen)."""
    def unset(*envs: str) -> None:
        for env in envs:
            monkeypatch.delenv(env, raising=False)
        monkeypatch.setenv("HUMMING_ACT_WIDEN", "0")
    return unset


@pytest.fixture
def compiled_without_spills():
    """compile(plan, caps) -> the NVRTC module of the plan's kernel for the profile's target, compiled with ptxas
    verbose output; skips (with the reason) where the installed NVRTC is too old for the target, and asserts that
    ptxas reported no spill stores."""
    from humming import api
    from humming.core.compile.compiler import compile_cuda
    from humming.core.compile.nvrtc import select_toolchain
    from humming.devices import get_backend
    from humming.errors import UnsupportedOnDevice

    def compile_plan(plan, caps):
        route = get_backend(caps).compile_route(caps)
        try:
            select_toolchain(route.arch, route.min_nvrtc)
        except UnsupportedOnDevice as exc:
            pytest.skip(str(exc).splitlines()[0])
        mod = compile_cuda(api.source(plan, caps), [plan.kernel_name], route.arch,
                           options=(*route.options, "--ptxas-options=-v"), cache=False)
        spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", mod.log)]
        assert spills and max(spills) == 0, mod.log
        return mod
    return compile_plan
