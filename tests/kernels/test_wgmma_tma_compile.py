"""The warp-specialised TMA wgmma W8A8 kernel (humming.core.families.wgmma_8bit.generator_tma): planned by default for promoted
e4m3 where the profile declares wgmma, tma, mbarrier and setmaxnreg; compiles for sm_90a without spills or
serialized wgmmas; its PTX copies both operands with TMA tensor copies only; the lock-step kernel stays reachable."""
import re
from dataclasses import replace

import pytest

from humming import api
from humming.capabilities import list_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.wgmma_8bit.layout import WgmmaW8A8Layout
from humming.core.families.wgmma_8bit.planner import TMA_ENV, TMA_THREADS, plan_w8a8_wgmma
from humming.errors import ShapeError, UnsupportedOnDevice

TMA_COPY = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"


def _need_sm90a():
    try:
        select_toolchain("sm_90a")
    except Exception as exc:  # noqa: BLE001 - no NVRTC that knows sm_90a here
        pytest.skip(f"no NVRTC for sm_90a: {exc}")


def _caps(name="nvidia-h200"):
    return api.resolve_profile(name)


@pytest.mark.parametrize("scheme", ["w8a8-fp8", "w8a8-fp8-tensor", "w8a8-fp8-block"])
@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_tma_kernel_is_the_default_and_compiles(scheme, act):
    _need_sm90a()
    caps = _caps()
    p = api.plan(scheme, 1024, 2048, 4096, profile=caps, act=act)
    assert p.family == "wgmma" and p.tiles.bulk == 1 and p.threads == TMA_THREADS and p.tiles.bn == 128
    assert p.smem_bytes <= caps.limits.smem_per_block_kb * 1024
    assert any("warp-specialised" in r and "TMA" in r for r in p.reasons)
    src = api.source(p, caps)
    assert src.count("const __grid_constant__ TmaMap") == 2
    mod = compile_cuda(src, [p.kernel_name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    ptx = mod.ptx
    assert ptx.count(TMA_COPY) == 2  # one tensor copy per operand tile, in the producer's loop
    for ins in ("mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
                "setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
                "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3", "wgmma.wait_group.sync.aligned 0"):
        assert ins in ptx, ins
    assert "cp.async.cg" not in ptx and "bar.sync" in ptx  # no per-thread copies; one barrier after the init
    assert max(int(v) for v in re.findall(r"(\d+) bytes spill stores", mod.log)) == 0, mod.log
    assert not re.search(r"C75\d\d", mod.log), mod.log
    x_box, w_box = api.tma_boxes(p)
    assert x_box == (1024, 4096, 128, 128, 1) and w_box == (2048, 4096, 128, 128, 1)


def test_lock_step_kernel_remains(monkeypatch):
    """HUMMING_WGMMA_W8A8_TMA=0, fast accumulation, int8 and profiles without setmaxnreg keep the lock-step kernel;
    asking for TMA where it cannot run is refused with the reason."""
    caps = _caps()
    lay = WgmmaW8A8Layout("e4m3", 2048, 4096, "channel")
    assert plan_w8a8_wgmma(caps, lay, 1024, "f16").tiles.bulk == 1
    monkeypatch.setenv(TMA_ENV, "0")
    off = plan_w8a8_wgmma(caps, lay, 1024, "f16")
    assert off.tiles.bulk == 0 and off.threads == 256
    monkeypatch.delenv(TMA_ENV)
    fast = WgmmaW8A8Layout("e4m3", 2048, 4096, "channel", fast_accum=True)
    assert plan_w8a8_wgmma(caps, fast, 1024, "f16").tiles.bulk == 0
    with pytest.raises(ShapeError, match="promoted fp8"):
        plan_w8a8_wgmma(caps, WgmmaW8A8Layout("s8", 2048, 4096, "channel"), 1024, "f16", tma=True)
    no_reg = replace(caps, memory=replace(caps.memory, setmaxnreg=False))
    assert plan_w8a8_wgmma(no_reg, lay, 1024, "f16").tiles.bulk == 0
    with pytest.raises(UnsupportedOnDevice, match="setmaxnreg"):
        plan_w8a8_wgmma(no_reg, lay, 1024, "f16", tma=True)


def test_every_profile_declaring_it_compiles_it():
    """The kernel follows the declarations (wgmma e4m3, tma, mbarrier, setmaxnreg), not a device name."""
    _need_sm90a()
    names = [c.name for c in list_profiles(include_abstract=False)
             if c.find_mma(family="wgmma", a_type="e4m3") and c.memory.tma and c.memory.setmaxnreg]
    assert "nvidia-h200" in names
    for name in names:
        p = api.plan("w8a8-fp8", 512, 1024, 1024, profile=name)
        assert p.tiles.bulk == 1, name
        _, mod = api.compile_plan(p, _caps(name))
        assert TMA_COPY in mod.ptx
