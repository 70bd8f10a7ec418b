"""The synthetic wgmma loop of scripts/wgmma_ceiling.py (GPU timing of the W4A8 wide form's loop shape): every default
configuration and the extras combine into kernels that NVRTC compiles for sm_90a, with the stated wgmma shape and A
source, as many wgmmas a stage as the configuration says, and bad configurations refused. (The timing itself runs on
the device; docs/performance.md, twenty-seventh session, has its numbers.)"""
import os
import re
import sys

import pytest

from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.errors import UnsupportedOnDevice

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import wgmma_ceiling  # noqa: E402


@pytest.fixture(autouse=True)
def _nvrtc():
    try:
        select_toolchain("sm_90a")
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


EXTRA_CONFIGS = ("rs:64:4:promote:lds+side", "rs:64:4:promote:widen+release+stagger+fullwait",
                 "rs:64:4:promote:widen+mulshift+rand", "ss:64:4:promote:widen+side")


@pytest.mark.parametrize("config", [*wgmma_ceiling.DEFAULT_CONFIGS, *EXTRA_CONFIGS])
def test_config_compiles_with_its_shape(config):
    mode, n, chains, promotion, extras = wgmma_ceiling.parse(config)
    src, name = wgmma_ceiling.kernel_source(mode, n, chains, promotion, extras)
    assert f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3" in src
    loop = src[src.index("for (int st = 0; st < stages; ++st)"):]
    assert len(re.findall(rf"\bmma{n}\(", loop)) == 4 * chains  # four k32 steps per chain and stage
    a_operand = ", a[0], desc_b" if mode == "rs" else ", desc_a + 0, desc_b"  # A from registers / a descriptor
    assert a_operand in loop
    threads = 384 if "side" in extras else 256
    assert f"__launch_bounds__({threads}, 1)" in src
    mod = compile_cuda(src, [name], "sm_90a", options=("--ptxas-options=-v",), cache=False)
    assert mod.cubin


def test_ideal_cycles_follow_the_fp8_peak():
    # two warpgroups x 4 chains x 4 steps of m64n64k32 = 2^21 MACs a stage at 4096 MACs a cycle
    assert wgmma_ceiling.ideal_cycles(64, 4) == 1024 == wgmma_ceiling.ideal_cycles(256, 1)


@pytest.mark.parametrize("bad", ["xs:64:4:acc", "rs:64:4:sum", "rs:64:4:acc:fast", "ss:64:4:acc:lds",
                                 "rs:64:4:acc:lds+widen", "rs:64"])
def test_bad_configs_are_refused(bad):
    with pytest.raises(SystemExit):
        wgmma_ceiling.parse(bad)


def test_too_many_accumulators_are_refused():
    with pytest.raises(ValueError, match="128"):
        wgmma_ceiling.kernel_source("rs", 128, 4, "acc")
