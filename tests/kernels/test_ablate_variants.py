"""The ablation tool's variants (scripts/ablate.py) still fit the kernels they were written for: each substitution
matches the generated source of today's H200 plans exactly where it should, and the patched source compiles with NVRTC
for sm_90a (so a device run spends its time timing, not failing on a pattern the generator outgrew); and the tool
installs its variant where the runtime gets its kernels' sources."""
import os
import re
import sys

import pytest

import humming
from humming import api
from humming.api import resolve_profile
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.runtime import compiled
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import ablate  # noqa: E402

# (scheme, M, N): the kernel family; the variants written for it (the small register-A form at 16 tokens with
# split-K clusters, the x_smem stream kernel at M=1, the two-warpgroup W4A16 form's stream-K plan at M=128 and its
# plain plan at M=1024, the register-A W4A8 kernel's wide form at M=4096)
CASES = {
    ("w4a16", 16, 28672): ["nomem_rs", "l2only_rs", "nodecode_rs", "nowgmma_rs", "noscale_rs", "noloop_rs", "half_rs",
                           "xonce_rs", "nosync_rs", "signed_rs", "mmasync_rs", "wsmem_rs", "pair_rs",
                           "nomem_rs+nowgmma_rs+nodecode_rs", "pf5", "lb7", "noxstage_rs", "l2w_rs"],
    ("w4a16", 1, 28672): ["empty", "noxstage", "notables", "nomem", "l2only", "empty_stream", "noloop_stream",
                          "ret_start_stream", "ret_prewait_stream"],
    ("w4a16", 128, 28672): ["nofix_sk", "noepi_sk", "claimlast", "busypoll"],
    ("w4a16", 1024, 8192): ["pf6_2wg", "pf8_2wg", "noscale_2wg", "nodecode_2wg", "half_2wg", "l2w_2wg", "u20_2wg",
                            "noepi_2wg", "nowalk_2wg"],
    ("w4a8-fp8", 768, 8192): ["politets_sk8", "politeall_sk8"],  # the wide W4A8 form's stream-K plan
    ("w4a8-fp8", 4096, 8192): ["nowiden_rs8", "promote1_rs8", "nowiden_rs8+promote1_rs8",
                               "unheld_rs8", "undesc0_rs8", "nofence_rs8", "fenceall_rs8", "membar_rs8",
                               "latearrive_rs8", "pingpong0", "pingpong3", "nox_rs8", "noepi_rs8", "earlywait_rs8",
                               "laterelease_rs8", "pairwait_rs8", "pairrelease_rs8", "pairwait_rs8+pairrelease_rs8",
                               "half_rs8", "quarter_rs8", "nol2next_rs8", "l2nextx_rs8", "tmpf_rs8"],
}


@pytest.mark.parametrize("scheme, m, n, variant", [(*case, v) for case, vs in CASES.items() for v in vs])
def test_variant_applies_and_compiles(scheme, m, n, variant):
    caps = resolve_profile("nvidia-h200")
    route = get_backend(caps).compile_route(caps)
    try:
        select_toolchain(route.arch, route.min_nvrtc)
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])
    plan = humming.plan(scheme, m, n, 8192, profile="nvidia-h200")
    src = api.source(plan, caps)
    for pattern, repl in ablate._substitutions(variant):
        src, count = re.subn(pattern, repl, src)
        assert count >= 1, f"{variant}: {pattern!r} no longer matches {plan.kernel_name}"
    mod = compile_cuda(src, [plan.kernel_name], route.arch, options=route.options, cache=False)
    assert mod.cubin


def test_patched_source_is_what_the_runtime_generates(monkeypatch):
    """ablate.py installs its variant where the runtime gets its kernels' sources (humming.api.source too)."""
    plan = humming.plan("w4a16", 1, 28672, 8192, profile="nvidia-h200")
    caps = resolve_profile("nvidia-h200")
    base = api.source(plan, caps)
    monkeypatch.setattr(compiled, "kernel_source", ablate.patched("l2only"))
    patched = api.source(plan, caps)
    assert patched != base and patched == ablate.apply("l2only", base)
    with pytest.raises(KeyError):
        ablate.apply("l2only_rs", base)  # a pattern of another kernel: named, not silently skipped


def test_unknown_variant_is_refused():
    with pytest.raises(KeyError, match="unknown variant"):
        ablate._substitutions("l2only+nosuchthing")
