"""Shipped profiles: all load and validate, and inheritance gives the right answers."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from humming.capabilities import Capabilities, get_profile, list_profiles, load_profile_file
from humming.capabilities.yamlio import builtin_profile_dir, profile_files
from humming.errors import ProfileError

REQUIRED = ["nvidia-t4", "nvidia-a100", "nvidia-a10", "nvidia-l40s", "nvidia-h100", "nvidia-h200", "nvidia-h20",
            "nvidia-b200", "nvidia-b300", "nvidia-thor", "nvidia-rubin", "nvidia-rtx-5090", "nvidia-rtx-pro-6000",
            "nvidia-gb10", "thead-zhenwu-810e", "thead-zhenwu-m890"]
FAMILIES = ["nvidia-turing", "nvidia-ampere", "nvidia-ada", "nvidia-hopper", "nvidia-blackwell-datacenter",
            "nvidia-blackwell-consumer", "thead-ppu"]
BUILTIN_FILES = profile_files(builtin_profile_dir())


def test_at_least_16_device_profiles_and_the_families():
    profiles = {p.name: p for p in list_profiles()}
    for name in REQUIRED:
        assert name in profiles and not profiles[name].abstract
    for name in FAMILIES:
        assert profiles[name].abstract
    assert len(list_profiles(include_abstract=False)) >= 16


@pytest.mark.parametrize("path", BUILTIN_FILES, ids=[p.stem for p in BUILTIN_FILES])
def test_every_shipped_file_validates_on_its_own(path: Path):
    caps = load_profile_file(path)
    assert caps.name == get_profile(caps.name).name
    assert caps.vendor and caps.backend


@pytest.mark.parametrize("name", REQUIRED + FAMILIES)
def test_profile_is_complete_plain_data(name: str):
    caps = get_profile(name)
    data = caps.to_dict()
    json.dumps(data)  # plain data only
    assert data["name"] == name
    assert isinstance(hash(caps), int)
    assert pickle.loads(pickle.dumps(caps)) == caps
    assert len(set(caps.mma)) == len(caps.mma), "each instruction form once"
    if caps.verified and not caps.abstract:
        assert caps.missing() == ()
        assert isinstance(caps.target.arch, str) and isinstance(caps.limits.smem_per_block_kb, int)


def test_every_target_has_a_min_nvrtc_and_compute_capability():
    for caps in list_profiles():
        if caps.target.arch:
            assert caps.target.min_nvrtc >= (12, 8)
            assert caps.target.compute_capability == caps.match.compute_capability or caps.vendor != "nvidia"


def test_b300_inherits_blackwell_but_lacks_tcgen05_i8():
    b200, b300 = get_profile("nvidia-b200"), get_profile("nvidia-b300")
    assert "nvidia-blackwell-datacenter" in b300.lineage
    assert b200.has_tcgen05_kind("i8")
    assert not b300.has_tcgen05_kind("i8")
    for kind in ("f16", "tf32", "f8f6f4", "mxf8f6f4", "mxf4", "mxf4nvf4"):
        assert b300.has_tcgen05_kind(kind)
    assert b300.target.arch == "sm_103a" and b300.target.family == "sm_103f"
    assert b300.target.compute_capability == (10, 3) and b300.target.min_nvrtc == (12, 9)
    assert not b300.find_mma(family="tcgen05", a_type="s8", b_type="s8")
    legacy = b300.find_mma(family="mma_sync", a_type="s8", b_type="s8", acc_type="s32", shape=(16, 8, 32))
    assert len(legacy) == 1
    assert b300.formats.hidden == ("e3m4", "e0m3")


def test_rubin_lacks_hidden_formats_and_i8_and_needs_nvrtc_13_4():
    rubin = get_profile("nvidia-rubin")
    assert rubin.formats.hidden == ()
    assert not rubin.has_tcgen05_kind("i8")
    assert rubin.target.arch == "sm_107a" and rubin.target.min_nvrtc == (13, 4)
    assert rubin.limits.sms is None
    assert get_profile("nvidia-b200").formats.hidden == ("e3m4", "e0m3")


def test_h200_has_wgmma():
    h200 = get_profile("nvidia-h200")
    assert "wgmma" in h200.families()
    fp8 = h200.find_mma(family="wgmma", a_type="e4m3", b_type="e4m3", shape=(64, 128, 32))
    assert fp8 and fp8[0].n == 256 and 8 in fp8[0].n_values and 256 in fp8[0].n_values
    assert h200.find_mma(family="wgmma", a_type="f16", shape=(64, 12, 16)) == []  # N=12 is not a legal N
    assert h200.find_mma(family="wgmma", a_type="s8", b_type="s8", acc_type="s32")
    assert h200.memory.tma and h200.memory.setmaxnreg and h200.memory.stmatrix
    assert not h200.find_mma(family="tcgen05")
    assert not get_profile("nvidia-b200").find_mma(family="wgmma")


def test_t4_lacks_m16n8k16_and_bf16():
    t4 = get_profile("nvidia-t4")
    assert t4.find_mma(shape=(16, 8, 16)) == []
    assert t4.find_mma(a_type="bf16") == [] and t4.find_mma(a_type="tf32") == []
    assert t4.find_mma(a_type="f16", shape=(16, 8, 8), acc_type="f16")
    assert t4.find_mma(a_type="s8", shape=(8, 8, 16))
    assert not t4.memory.cp_async and t4.memory.ldmatrix and not t4.memory.stmatrix
    assert t4.target.arch == "sm_75" and t4.limits.sms == 40 and t4.limits.smem_per_block_kb == 64


def test_810e_lacks_fp8_and_int4_tensor_cores():
    ppu = get_profile("thead-zhenwu-810e")
    assert ppu.vendor == "thead" and ppu.backend == "thead_ppu"
    for t in ("e4m3", "e5m2", "e2m1", "s4", "u4", "tf32"):
        assert ppu.find_mma(a_type=t) == [] and ppu.find_mma(b_type=t) == []
    assert ppu.find_mma(family="mma_sync", a_type="f16", shape=(16, 8, 16))
    assert ppu.find_mma(family="mma_sync", a_type="bf16", shape=(16, 8, 16))
    assert ppu.find_mma(family="mma_sync", a_type="s8", b_type="s8", shape=(16, 8, 32))
    assert ppu.target.arch == "sm_80" and ppu.target.compute_capability == (8, 0)
    assert ppu.target.compiler == "vendor_nvcc" and ppu.target.fallback_compiler == "nvrtc"
    assert ppu.memory.cp_async and ppu.memory.ldmatrix
    assert ppu.limits.sms is None and ppu.limits.smem_per_block_kb == 256
    assert any("unconfirmed" in n and "smem" in n for n in ppu.notes)
    for ext in ("ppu_mma_m16n16k16", "ppu_ldmatrix_swizzle", "ppu_bulk_copy"):
        assert ppu.has_extension(ext)
    mma16 = ppu.extension("ppu_mma_m16n16k16")
    assert mma16.data["b_channel_order"] == [0, 2, 4, 6, 1, 3, 5, 7]
    assert mma16.b_channel_order == [0, 2, 4, 6, 1, 3, 5, 7]
    ppu_forms = ppu.find_mma(family="ppu_mma")
    assert ppu_forms and all(f.extension == "ppu_mma_m16n16k16" and f.shape == (16, 16, 16) for f in ppu_forms)


def test_m890_is_unverified_with_unknowns_null():
    m890 = get_profile("thead-zhenwu-m890")
    assert m890.verified is False
    assert m890.target.arch is None and m890.target.compute_capability is None
    assert m890.mma == () and m890.limits.sms is None and m890.limits.memory_gb == 144
    assert "target.arch" in m890.missing()
    assert m890.notes


def test_blackwell_tcgen05_k_is_256_bits_of_a():
    b200 = get_profile("nvidia-b200")
    k = {ins.kind: ins.k for ins in b200.find_mma(family="tcgen05")}
    assert k == {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64, "mxf4nvf4": 64}
    assert b200.memory.tmem_kb == 256 and not b200.memory.setmaxnreg


def test_consumer_blackwell_block_scaled_mma_sync():
    rtx = get_profile("nvidia-rtx-5090")
    assert not rtx.find_mma(family="tcgen05") and not rtx.find_mma(family="wgmma") and rtx.memory.tmem_kb is None
    nv = rtx.find_mma(family="mma_sync", kind="mxf4nvf4")
    pairs = {(i.scale_format, i.scale_vec, i.min_nvrtc) for i in nv}
    assert pairs == {("ue8m0", (2,), None), ("ue4m3", (4,), None), ("ue8m0", (4,), (13, 1))}
    assert rtx.find_mma(kind="mxf8f6f4", a_type="e2m1", b_type="e4m3")[0].scale_vec == (1,)
    assert rtx.find_mma(kind="f8f6f4", a_type="e3m2", b_type="e2m3", shape=(16, 8, 32))
    assert get_profile("nvidia-gb10").target.arch == "sm_121a"
    assert not get_profile("nvidia-b200").find_mma(family="mma_sync", kind="f8f6f4")


def test_thor_and_ada_and_a10():
    thor = get_profile("nvidia-thor")
    assert thor.has_tcgen05_kind("i8") and thor.target.arch == "sm_110a" and thor.target.min_nvrtc == (13, 0)
    l40s = get_profile("nvidia-l40s")
    assert l40s.find_mma(a_type="e4m3", b_type="e5m2", acc_type="f16", shape=(16, 8, 32))
    assert not l40s.memory.stmatrix
    assert get_profile("nvidia-a10").target.arch == "sm_86"
    assert not get_profile("nvidia-a100").find_mma(a_type="e4m3")


def test_h20_h200_h100_differ_only_in_limits():
    h20, h200, h100 = (get_profile(n) for n in ("nvidia-h20", "nvidia-h200", "nvidia-h100"))
    assert h20.mma == h200.mma == h100.mma
    assert (h20.limits.sms, h200.limits.sms) == (78, 132)
    assert h20.limits.peak_tflops == {"f16": 148}
    assert h200.limits.memory_tb_s == 4.8 and h100.limits.memory_tb_s == 3.35


def test_unknown_profile_lists_close_names():
    with pytest.raises(ProfileError, match=r"unknown profile 'nvidia-h2000'; did you mean 'nvidia-h200'"):
        get_profile("nvidia-h2000")


def test_capabilities_import_no_torch_and_no_cuda():
    code = ("import sys, humming.capabilities as c; c.list_profiles(); "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'cuda'))]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
    root = Path(__file__).resolve().parents[2] / "humming" / "capabilities"
    for path in root.glob("*.py"):
        text = path.read_text()
        assert "import torch" not in text and "from cuda" not in text and "import cuda" not in text, path


def test_capabilities_are_frozen():
    caps = get_profile("nvidia-h200")
    with pytest.raises(AttributeError):
        caps.name = "x"  # type: ignore[misc]
    assert isinstance(caps, Capabilities)
