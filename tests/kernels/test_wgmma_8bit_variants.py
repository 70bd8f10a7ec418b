"""The wgmma 8-bit family's warp-specialised variants (humming.core.families.wgmma_8bit), one tuning knob each:

- the warp-specialised W4A8 kernel (a producer warpgroup copies and widens, two consumer warpgroups multiply and
  promote, mbarriers link them; knob wgmma_8bit.w4a8_warp_specialised, false: the lock-step kernel);
- the warp-specialised TMA W8A8 kernel (generator_tma: planned by default for promoted e4m3 where the profile declares
  wgmma, tma, mbarrier and setmaxnreg; knob wgmma_8bit.w8a8_tma, false: the lock-step kernel);
- the W4A8 kernel's TMA copies (knob wgmma_8bit.w4a8_tma, off by default).

For each: the default where declared, the knob, the planner argument that forces it, the refusal without the
declarations; NVRTC compilation for sm_90a and the PTX (the TMA W8A8 kernel copies both operands with TMA tensor
copies only, without spills or serialized wgmmas); the addressing statements the warp-specialised W4A8 kernel shares
with the lock-step kernel's emulated ones (tests/kernels/test_wgmma_compile.py)."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from humming import api
from humming.capabilities import list_profiles
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.wgmma_8bit.layout import WgmmaW4A8Layout, WgmmaW8A8Layout
from humming.core.families.wgmma_8bit.planner import (
    TMA_KNOB,
    TMA_THREADS,
    W4A8_TMA_KNOB,
    WS_KNOB,
    plan_w4a8_wgmma,
    plan_w8a8_wgmma,
    wgmma_w4a8_tma_smem_bytes,
    wgmma_w4a8_ws_smem_bytes,
)
from humming.core.tuning import knobs
from humming.errors import ShapeError, UnsupportedOnDevice

H200 = "nvidia-h200"
ACC = {"s8": "s32", "e4m3": "f32"}
TMA_COPY = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"


def _caps(name=H200):
    return api.resolve_profile(name)


def _need_sm90a():
    try:
        select_toolchain("sm_90a")
    except Exception as exc:  # noqa: BLE001 - no NVRTC that knows sm_90a here
        pytest.skip(f"no NVRTC for sm_90a: {exc}")


def _without(caps, **memory):
    """The profile with some memory capabilities undeclared."""
    return replace(caps, memory=replace(caps.memory, **memory))


# ---------------------------------------------------------------------------------------------- the variants
@dataclass(frozen=True)
class Variant:
    knob: str
    shipped: bool  # the knob's value in device_profiles/tuning/defaults.yaml (the H200 profile adds none)
    plan: Callable  # plan(caps, **forced) -> the planner's plan of the variant's case
    force: dict  # the planner's argument that asks for the variant whatever the knob says
    on: Callable  # on(plan, caps) -> whether the plan is the variant (asserting its details when it is)
    undeclared: dict  # memory capabilities whose absence takes the variant away
    refusal: str  # what forcing it without them raises (UnsupportedOnDevice; "" where forcing is not refused)


def _w4a8(caps, **kw):
    return plan_w4a8_wgmma(caps, WgmmaW4A8Layout("e4m3", 4096, 4096, 128, "int4"), 1024, "f16", **kw)


def _w4a8_ws_on(p, caps) -> bool:
    if p.threads != 384:
        assert p.threads == 256, p.explain()  # the lock-step kernel
        return False
    assert "warp-specialised" in p.explain() and f"{WS_KNOB} false" in p.explain()  # (how to turn it off)
    smem = wgmma_w4a8_tma_smem_bytes if p.tiles.bulk else wgmma_w4a8_ws_smem_bytes
    assert p.smem_bytes == smem(p.tiles.stages) <= caps.limits.smem_per_block_kb * 1024
    return True


def _w8a8(caps, **kw):
    return plan_w8a8_wgmma(caps, WgmmaW8A8Layout("e4m3", 2048, 4096, "channel"), 1024, "f16", **kw)


def _w8a8_tma_on(p, caps) -> bool:
    if p.tiles.bulk != 1:
        assert p.tiles.bulk == 0 and p.threads == 256, p.explain()  # the lock-step kernel
        return False
    assert p.threads == TMA_THREADS and p.tiles.bn == 128
    assert any("warp-specialised" in r and "TMA" in r for r in p.reasons), p.explain()
    return True


def _w4a8_tma_on(p, caps) -> bool:
    assert p.threads == 384, p.explain()  # (the warp-specialised kernel either way)
    if not p.tiles.bulk:
        assert "cp.async" in p.explain()
        return False
    assert "TMA tensor copies of A and of the packed 4-bit weights" in p.explain()
    assert p.smem_bytes == wgmma_w4a8_tma_smem_bytes(p.tiles.stages) <= caps.limits.smem_per_block_kb * 1024
    return True


VARIANTS = {
    "w4a8_warp_specialised": Variant(WS_KNOB, True, _w4a8, {"ws": True}, _w4a8_ws_on, {"setmaxnreg": False}, ""),
    "w8a8_tma": Variant(TMA_KNOB, True, _w8a8, {"tma": True}, _w8a8_tma_on, {"setmaxnreg": False}, "setmaxnreg"),
    "w4a8_tma": Variant(W4A8_TMA_KNOB, False, _w4a8, {"tma": True}, _w4a8_tma_on, {"tma": False}, "tma"),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_default_where_declared_the_knob_and_the_argument(name):
    v = VARIANTS[name]
    caps = _caps()
    assert knobs.value(v.knob, caps) is v.shipped
    assert v.on(v.plan(caps), caps) is v.shipped  # the default: the knob's shipped value where declared
    for value in (True, False):
        with knobs.override({v.knob: value}):
            assert v.on(v.plan(caps), caps) is value
            assert v.on(v.plan(caps, **v.force), caps)  # the argument asks for it whatever the knob says


@pytest.mark.parametrize("name", VARIANTS)
def test_not_planned_without_the_declarations(name):
    v = VARIANTS[name]
    caps = _without(_caps(), **v.undeclared)
    with knobs.override({v.knob: True}):
        assert not v.on(v.plan(caps), caps)
        if v.refusal:
            with pytest.raises(UnsupportedOnDevice, match=v.refusal):
                v.plan(caps, **v.force)


# ---------------------------------------------------------------------------------------------- W4A8: warp-specialised
def test_every_wgmma_profile_declares_what_the_warp_specialised_w4a8_kernel_needs():
    for name in list_profiles():
        caps = _caps(name)
        if any(f.family == "wgmma" for f in caps.mma):
            assert caps.memory.mbarrier and caps.memory.setmaxnreg, name


def test_w4a8_warp_specialised_refused_without_setmaxnreg():
    caps = _without(_caps(), setmaxnreg=False)
    p = plan_w4a8_wgmma(caps, WgmmaW4A8Layout("s8", 1024, 1024, 128, "int4"), 256, "f16")
    assert p.threads == 256  # the lock-step kernel: no setmaxnreg declared


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("a_type,fmt,group", [("s8", "int4", 128), ("e4m3", "int4", 128), ("e4m3", "e2m1", 32),
                                              ("s8", "int4", 32), ("e4m3", "int4", 64), ("s8", "int4", 4096)])
def test_w4a8_warp_specialised_compiles_and_ptx(a_type, fmt, group, act):
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


def test_w4a8_warp_specialised_shares_the_lock_step_kernels_addressing():
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


# ---------------------------------------------------------------------------------------------- W8A8: TMA
@pytest.mark.parametrize("scheme", ["w8a8-fp8", "w8a8-fp8-tensor", "w8a8-fp8-block"])
@pytest.mark.parametrize("act", ["f16", "bf16"])
def test_w8a8_tma_kernel_is_the_default_and_compiles(scheme, act):
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


def test_w8a8_lock_step_kernel_remains():
    """The knob wgmma_8bit.w8a8_tma false, fast accumulation, int8 and profiles without setmaxnreg keep the lock-step
    kernel; asking for TMA where it cannot run is refused with the reason."""
    caps = _caps()
    lay = WgmmaW8A8Layout("e4m3", 2048, 4096, "channel")
    assert plan_w8a8_wgmma(caps, lay, 1024, "f16").tiles.bulk == 1
    with knobs.override({TMA_KNOB: False}):
        off = plan_w8a8_wgmma(caps, lay, 1024, "f16")
    assert off.tiles.bulk == 0 and off.threads == 256
    fast = WgmmaW8A8Layout("e4m3", 2048, 4096, "channel", fast_accum=True)
    assert plan_w8a8_wgmma(caps, fast, 1024, "f16").tiles.bulk == 0
    with pytest.raises(ShapeError, match="promoted fp8"):
        plan_w8a8_wgmma(caps, WgmmaW8A8Layout("s8", 2048, 4096, "channel"), 1024, "f16", tma=True)
    no_reg = _without(caps, setmaxnreg=False)
    assert plan_w8a8_wgmma(no_reg, lay, 1024, "f16").tiles.bulk == 0
    with pytest.raises(UnsupportedOnDevice, match="setmaxnreg"):
        plan_w8a8_wgmma(no_reg, lay, 1024, "f16", tma=True)


def test_every_profile_declaring_the_w8a8_tma_kernel_compiles_it():
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
