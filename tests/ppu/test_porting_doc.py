"""The worked example of docs/porting.md, exactly as written there: a made-up CUDA-compatible accelerator defined
only by YAML in a temporary HUMMING_PROFILE_PATH goes through validate -> info -> plan -> NVRTC compile."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml

from humming import api
from humming.capabilities import DetectedDevice, get_profile, list_profiles, match_device, reload_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

from .conftest import ROOT

DOC = ROOT / "docs" / "porting.md"
MARKER = "<!-- worked-example-profile -->"


def example_yaml() -> str:
    text = DOC.read_text()
    found = re.search(re.escape(MARKER) + r"\s*```yaml\n(.*?)```", text, flags=re.S)
    assert found, f"{DOC} lost its worked example (a ```yaml block after {MARKER})"
    return found.group(1)


@pytest.fixture
def example(profile_dir):
    body = example_yaml()
    name = yaml.safe_load(body)["name"]
    path = profile_dir / f"{name}.yaml"
    path.write_text(body)
    reload_profiles()
    return name, path


def _cli(*args, profile_dir):
    env = {**os.environ, "HUMMING_SKIP_DETECT": "1", "HUMMING_PROFILE_PATH": str(profile_dir)}
    env.pop("HUMMING_DEVICE_PROFILE", None)
    return subprocess.run([sys.executable, "-m", "humming", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_example_is_a_new_device_of_a_new_vendor(example):
    name, _ = example
    builtin = [p.name for p in list_profiles() if p.source.startswith(str(ROOT / "device_profiles"))]
    assert name not in builtin
    caps = get_profile(name)
    assert caps.vendor == "nimbus" and caps.backend == "nvidia" and caps.target.arch == "sm_80"
    assert caps.source.endswith(f"{name}.yaml") and "device_profiles" not in caps.source
    found = match_device(DetectedDevice("nvidia", "Nimbus N1 Accelerator", (8, 0), 48))
    assert found.profile.name == name and found.how == "name"


def test_validate_info_plan_in_the_cli(example, profile_dir):
    name, path = example
    checked = _cli("profile", "validate", str(path), profile_dir=profile_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"ok    {path}: {name} (device, target sm_80, 3 MMA forms)" in checked.stdout
    info = _cli("info", "--profile", name, profile_dir=profile_dir)
    assert info.returncode == 0, info.stderr
    assert "target:    sm_80" in info.stdout and "w4a16            mma_sync" in info.stdout
    plan = _cli("plan", "--profile", name, "--scheme", "w4a16", "--m", "64", "--n", "1024", "--k", "2048",
                "--source", profile_dir=profile_dir)
    assert plan.returncode == 0, plan.stderr
    assert f"on {name}: mma_sync" in plan.stdout and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in plan.stdout


@pytest.mark.parametrize("scheme, act, m", [("w4a16", "f16", 64), ("w8a16-zp", "bf16", 1)])
def test_plan_and_compile_with_nvrtc(example, scheme, act, m):
    name, _ = example
    caps = get_profile(name)
    plan = api.plan(scheme, m, 1024, 2048, profile=name, act=act)
    assert plan.profile == name and plan.family == "mma_sync"
    assert any("48 SMs" in r for r in plan.reasons)  # the split-K choice uses the example's SM count
    route = get_backend(caps).compile_route(caps)
    assert route.compiler == "nvrtc" and route.arch == "sm_80"
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:  # pragma: no cover - no NVRTC installed
        pytest.skip(str(exc))
    mod = compile_cuda(api.source(plan, caps), [plan.kernel_name], route.arch, min_nvrtc=route.min_nvrtc)
    assert mod.cubin[:4] == b"\x7fELF" and mod.arch == "sm_80"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{act}.{act}.f32" in mod.ptx
    assert "wgmma" not in mod.ptx and "tcgen05" not in mod.ptx


def test_forcing_the_example_profile(example, monkeypatch):
    name, _ = example
    monkeypatch.setenv("HUMMING_DEVICE_PROFILE", name)
    from humming.device import current_profile

    assert current_profile().name == name
