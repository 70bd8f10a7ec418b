"""The compile route with and without PPU_SDK, and the vendor nvcc runner (with stand-in executables)."""
from __future__ import annotations

import json
import os
import stat
import struct
import sys
from pathlib import Path

import pytest

from humming import api
from humming.capabilities import get_profile
from humming.devices import get_backend
from humming.devices.thead_ppu import backend as ppu_backend
from humming.devices.thead_ppu.backend import compile_with_vendor_nvcc, cubin_machine
from humming.errors import CompileError, UnsupportedOnDevice

from .conftest import ppu_source, write_810e_variant

# A stand-in for $PPU_SDK/bin/nvcc: records its argv and the source it was given, then writes an ELF
# header whose e_machine is 0x10E (what PPU SDK cubins carry) to the -o path. FAKE_NVCC_MODE selects failures.
FAKE_NVCC = f"""#!{sys.executable}
import json, os, struct, sys
args = sys.argv[1:]
out = args[args.index("-o") + 1]
src = args[-1]
log = os.environ.get("FAKE_NVCC_LOG")
if log:
    with open(log, "w") as f:
        json.dump({{"argv": args, "source": open(src).read(), "path": os.environ.get("PATH", "")}}, f)
mode = os.environ.get("FAKE_NVCC_MODE", "ok")
if mode == "fail":
    sys.stderr.write("kernel.cu(3): error: unknown instruction ppu.bogus\\n")
    sys.exit(2)
if mode == "nocubin":
    sys.exit(0)
with open(out, "wb") as f:
    if mode == "garbage":
        f.write(b"not an elf")
    else:
        f.write(b"\\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack("<HH", 2, 0x10E) + bytes(44))
"""


def _sdk(tmp_path: Path, executable: bool = True, with_nvcc: bool = True) -> Path:
    sdk = tmp_path / "ppu-sdk"
    (sdk / "bin").mkdir(parents=True)
    if with_nvcc:
        nvcc = sdk / "bin" / "nvcc"
        nvcc.write_text(FAKE_NVCC)
        mode = nvcc.stat().st_mode
        nvcc.chmod(mode | stat.S_IXUSR if executable else mode & ~(stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH))
    return sdk


@pytest.fixture
def caps():
    return get_profile("thead-zhenwu-810e")


def test_without_ppu_sdk_the_route_is_nvrtc_for_sm80(caps):
    route = get_backend(caps).compile_route(caps)
    assert route.compiler == "nvrtc" and route.arch == "sm_80" and route.options == ()
    assert route.min_nvrtc == (12, 8)
    assert "PPU_SDK is not set" in route.reason and "portable" in route.reason


def test_sdk_without_nvcc_falls_back_and_says_why(caps, tmp_path, monkeypatch):
    monkeypatch.setenv("PPU_SDK", str(_sdk(tmp_path, with_nvcc=False)))
    route = get_backend(caps).compile_route(caps)
    assert route.compiler == "nvrtc" and "has no bin/nvcc" in route.reason


@pytest.mark.skipif(os.name != "posix", reason="execute bits are POSIX")
def test_sdk_nvcc_not_executable_falls_back(caps, tmp_path, monkeypatch):
    monkeypatch.setenv("PPU_SDK", str(_sdk(tmp_path, executable=False)))
    route = get_backend(caps).compile_route(caps)
    assert route.compiler == "nvrtc" and "is not executable" in route.reason


def test_non_executable_nvcc_is_rejected_by_the_check(tmp_path, monkeypatch):
    sdk = _sdk(tmp_path)
    monkeypatch.setenv("PPU_SDK", str(sdk))
    monkeypatch.setattr(ppu_backend.os, "access", lambda path, mode: False)
    nvcc, why = ppu_backend.vendor_nvcc()
    assert nvcc is None and "is not executable" in why


def test_with_ppu_sdk_the_route_is_the_vendor_nvcc(caps, tmp_path, monkeypatch):
    sdk = _sdk(tmp_path)
    monkeypatch.setenv("PPU_SDK", str(sdk))
    route = get_backend(caps).compile_route(caps)
    assert route.compiler == "vendor_nvcc" and route.arch == "sm_80"
    assert str(sdk / "bin" / "nvcc") in route.reason and "vendor extensions enabled" in route.reason
    assert route.options[:3] == ("-cubin", "-O3", "-std=c++17")
    assert "-arch=sm_80" in route.options and "-DHUMMING_PPU_EXTENSIONS=1" in route.options


def test_vendor_flags_follow_the_profile_and_environment(caps, tmp_path, monkeypatch, profile_dir):
    monkeypatch.setenv("PPU_SDK", str(_sdk(tmp_path)))
    monkeypatch.setenv("HUMMING_PPU_NVCC_FLAGS", "-lineinfo '-Xptxas=-v'")
    route = get_backend(caps).compile_route(caps)
    assert route.options[-2:] == ("-lineinfo", "-Xptxas=-v")
    monkeypatch.setenv("HUMMING_PPU_EXTENSIONS", "0")
    assert "-DHUMMING_PPU_EXTENSIONS=1" not in get_backend(caps).compile_route(caps).options
    monkeypatch.delenv("HUMMING_PPU_EXTENSIONS")
    write_810e_variant(profile_dir, lambda doc: doc.pop("vendor_extensions"))
    plain = get_profile("thead-zhenwu-810e")
    route = get_backend(plain).compile_route(plain)
    assert route.compiler == "vendor_nvcc" and "-DHUMMING_PPU_EXTENSIONS=1" not in route.options
    assert "vendor extensions" not in route.reason


def test_profile_choosing_nvrtc_or_no_fallback(profile_dir, tmp_path, monkeypatch):
    (profile_dir / "ppu-nvrtc.yaml").write_text(
        "name: ppu-nvrtc-only\nextends: thead-zhenwu-810e\nmatch: {names: ['*NVRTCONLY*']}\n"
        "target: {compiler: nvrtc, fallback_compiler: null}\n")
    (profile_dir / "ppu-sdk-only.yaml").write_text(
        "name: ppu-sdk-only\nextends: thead-zhenwu-810e\nmatch: {names: ['*SDKONLY*']}\n"
        "target: {fallback_compiler: null}\n")
    from humming.capabilities import reload_profiles

    reload_profiles()
    nvrtc_only = get_profile("ppu-nvrtc-only")
    monkeypatch.setenv("PPU_SDK", str(_sdk(tmp_path)))
    route = get_backend(nvrtc_only).compile_route(nvrtc_only)
    assert route.compiler == "nvrtc" and "target.compiler" in route.reason
    monkeypatch.delenv("PPU_SDK")
    sdk_only = get_profile("ppu-sdk-only")
    with pytest.raises(UnsupportedOnDevice, match="compiles only with the PPU SDK nvcc and PPU_SDK is not set"):
        get_backend(sdk_only).compile_route(sdk_only)


def test_compile_with_vendor_nvcc_runs_the_sdk_compiler(caps, tmp_path, monkeypatch):
    sdk = _sdk(tmp_path)
    log = tmp_path / "nvcc-call.json"
    monkeypatch.setenv("PPU_SDK", str(sdk))
    monkeypatch.setenv("FAKE_NVCC_LOG", str(log))
    plan = api.plan("w4a16", 64, 1024, 2048, profile=caps)
    source = ppu_source(plan, caps)
    cubin = compile_with_vendor_nvcc(source, caps)
    assert cubin_machine(cubin) == 0x10E
    assert get_backend(caps).compile_source(source, caps) == cubin  # what api.compile_plan would call
    call = json.loads(log.read_text())
    assert call["source"] == source
    argv = call["argv"]
    assert argv[0] == "-cubin" and "-arch=sm_80" in argv and "-DHUMMING_PPU_EXTENSIONS=1" in argv
    assert argv[argv.index("-o") + 1].endswith(".cubin") and argv[-1].endswith(".cu")
    assert call["path"].split(os.pathsep)[0] == str(sdk / "bin")


@pytest.mark.parametrize("mode, message", [
    ("fail", "PPU SDK nvcc rejected the source for sm_80 \\(exit status 2\\)"),
    ("nocubin", "exited 0 but wrote no cubin"),
    ("garbage", "not an ELF cubin"),
])
def test_compile_with_vendor_nvcc_failures_are_compile_errors(caps, tmp_path, monkeypatch, mode, message):
    monkeypatch.setenv("PPU_SDK", str(_sdk(tmp_path)))
    monkeypatch.setenv("FAKE_NVCC_MODE", mode)
    source = '// the source\nextern "C" __global__ void k() {}\n'
    with pytest.raises(CompileError, match=message) as err:
        compile_with_vendor_nvcc(source, caps)
    if mode == "fail":
        assert "unknown instruction ppu.bogus" in err.value.log and "unknown instruction" in str(err.value)
        assert err.value.source_path and Path(err.value.source_path).read_text() == source


def test_compile_with_vendor_nvcc_without_the_sdk_is_refused(caps):
    with pytest.raises(UnsupportedOnDevice, match="not the PPU SDK nvcc"):
        compile_with_vendor_nvcc('extern "C" __global__ void k() {}', caps)


def test_cubin_machine():
    nvidia = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8) + struct.pack("<HH", 2, 190) + bytes(44)
    assert cubin_machine(nvidia) == 190 and cubin_machine(b"junk") is None


def test_compile_plan_uses_nvrtc_without_the_sdk(caps):
    """api.compile_plan on CPU: NVRTC cubin for sm_80 (nothing is loaded until a launch)."""
    plan = api.plan("w4a16", 64, 1024, 2048, profile=caps)
    try:
        _, module = api.compile_plan(plan, caps)
    except UnsupportedOnDevice as exc:  # pragma: no cover - no NVRTC installed
        pytest.skip(str(exc))
    assert module.arch == "sm_80" and module.cubin[:4] == b"\x7fELF"
    assert "mma.sync.aligned.m16n8k16" in module.ptx and "ppu." not in module.ptx
