"""The warp-specialised wgmma W4A8 kernel (a producer warpgroup copies and widens, two consumer warpgroups
multiply and promote, mbarriers link them): planning, NVRTC compilation for sm_90a and its PTX, and the
addressing statements it shares with the lock-step kernel's emulated ones (tests/kernels/test_wgmma_compile.py)."""
from __future__ import annotations

import re

import pytest

from humming import api
from humming.capabilities import list_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.wgmma_8bit.layout import WgmmaW4A8Layout
from humming.core.families.wgmma_8bit.planner import plan_w4a8_wgmma, wgmma_w4a8_ws_smem_bytes

H200 = "nvidia-h200"
ACC = {"s8": "s32", "e4m3": "f32"}


def _caps(name=H200):
    return api.resolve_profile(name)


def _need_sm90a():
    try:
        select_toolchain("sm_90a")
    except Exception as exc:  # no NVRTC that knows sm_90a
        pytest.skip(f"no NVRTC for sm_90a: {exc}")


def test_default_is_warp_specialised_where_declared(monkeypatch):
    caps = _caps()
    lay = WgmmaW4A8Layout("e4m3", 4096, 4096, 128, "int4")
    monkeypatch.delenv("HUMMING_WGMMA_WS", raising=False)
    p = plan_w4a8_wgmma(caps, lay, 1024, "f16")
    assert p.threads == 384 and "warp-specialised" in p.explain() and "HUMMING_WGMMA_WS=0" in p.explain()
    assert p.smem_bytes == wgmma_w4a8_ws_smem_bytes(p.tiles.stages) <= caps.limits.smem_per_block_kb * 1024
    monkeypatch.setenv("HUMMING_WGMMA_WS", "0")
    assert plan_w4a8_wgmma(caps, lay, 1024, "f16").threads == 256
    assert plan_w4a8_wgmma(caps, lay, 1024, "f16", ws=True).threads == 384


def test_every_wgmma_profile_declares_what_it_needs():
    for name in list_profiles():
        caps = _caps(name)
        if any(f.family == "wgmma" for f in caps.mma):
            assert caps.memory.mbarrier and caps.memory.setmaxnreg, name


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("a_type,fmt,group", [("s8", "int4", 128), ("e4m3", "int4", 128), ("e4m3", "e2m1", 32),
                                              ("s8", "int4", 32), ("e4m3", "int4", 64), ("s8", "int4", 4096)])
def test_compiles_and_ptx(a_type, fmt, group, act):
    _need_sm90a()
    caps = _caps()
    p = plan_w4a8_wgmma(caps, WgmmaW4A8Layout(a_type, 4096, 4096, group, fmt), 1024, act, scheme="w4a8", ws=True)
    assert p.kernel_name.startswith(f"hm_w4a8_wgmma_{a_type}_{act}_m128n128k128") and "w1211" in p.kernel_name
    src = api.source(p, caps)
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)\.(\w+)\.(\w+)\.(\w+)", ptx))
    assert shapes == {("m64n128k32", ACC[a_type], a_type, a_type)}
    for ins in ("mbarrier.init.shared::cta.b64", "mbarrier.arrive.shared::cta.b64", "mbarrier.try_wait.parity",
                "setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
                "fence.proxy.async.shared::cta", "cp.async.cg.shared.global", "st.shared.v4.u32", "ld.shared.v4.u32"):
        assert ins in ptx, ins
    assert "mma.sync" not in ptx and "ldmatrix" not in ptx and "bar.sync" in ptx  # one barrier: after the init
    assert ptx.count("bar.sync") == 1
    log = mod.log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", log)]
    assert regs and max(regs) <= 168 and spills and max(spills) <= 8, log  # 384 threads: 168 at launch
    assert "serialized" not in log, log


def test_shares_the_lock_step_kernels_addressing():
    """The statements whose emulation tests/kernels/test_wgmma_compile.py runs for the lock-step kernel have
    their counterparts here (copy rows step 16 and 32 instead of 32 and 64: 128 producer threads)."""
    caps = _caps()
    src = api.source(plan_w4a8_wgmma(caps, WgmmaW4A8Layout("e4m3", 1024, 1024, 128, "int4"), 256, "f16", ws=True),
                     caps)
    for text in ("const int lrow = p >> 3, lch = p & 7;", "const uint32_t lswz = swz128(lrow, lch);",
                 "copy_16_async(a_tile + i * 16 * 128,", "const int brow = p >> 2, bch = p & 3;",
                 "const uint32_t wswz0 = swz128(brow, 2 * bch), wswz1 = swz128(brow, 2 * bch + 1);",
                 "copy_16_async(raw + i * 128 * 16, b_src + ((size_t)32 * i * (K / 2) + k0 / 2), true);",
                 "lds_128(q, raw + i * 128 * 16);",
                 "st_shared_128(wb + i * 32 * 128 + wswz0, o[0], o[1], o[2], o[3]);",
                 "st_shared_128(wb + i * 32 * 128 + wswz1, o[4], o[5], o[6], o[7]);",
                 "mbar_wait(empty0 + 8 * (next % STAGES), ((next / STAGES) + 1) & 1);",
                 "mbar_wait(full0 + 8 * (kt % STAGES), (kt / STAGES) & 1);",
                 "const int row0 = m0 + cw * 16 + (lane >> 2);"):
        assert text in src, text


def test_refused_without_mbarrier(monkeypatch):
    from dataclasses import replace

    caps = _caps()
    caps = replace(caps, memory=replace(caps.memory, setmaxnreg=False))
    monkeypatch.delenv("HUMMING_WGMMA_WS", raising=False)
    p = plan_w4a8_wgmma(caps, WgmmaW4A8Layout("s8", 1024, 1024, 128, "int4"), 256, "f16")
    assert p.threads == 256  # the lock-step kernel: no setmaxnreg declared
