"""CPU: the MoE tcgen05 kernels (humming.core.families.moe_tcgen05: the tcgen05 WnA16 kernel over routed rows, int4
experts dequantized into shared memory, kind::f16, 128-row token tiles; and the tcgen05 W8A8 kernel over routed rows,
8-bit activation codes and weights, kind::f8f6f4 / kind::i8) plan from the declared forms, are selected only with
HUMMING_UNVERIFIED_KERNELS=1 (otherwise the MoE tile kernel's plan says why), compile with NVRTC 13 for every tcgen05
profile with exactly their kind and no spills, and pack act-order and padded experts. Never run: no Blackwell GPU is
lent."""
from __future__ import annotations

import re

import pytest
import torch

import humming
from humming.capabilities import get_profile, list_profiles
from humming.core import registry
from humming.core.compile.compiler import compile_cuda
from humming.core.compile.nvrtc import select_toolchain
from humming.core.families.moe_tcgen05.layout import prepare_tcgen05_experts
from humming.core.families.moe_tcgen05.planner import PATH, ROUTED_SMEM, W8A8_PATH, plan_moe_tcgen05
from humming.core.families.tcgen05.planner import STATIC_SMEM, UNVERIFIED_ENV
from humming.core.problem import Problem
from humming.core.registry import kernel_source
from humming.devices import get_backend
from humming.errors import UnsupportedOnDevice

PROFILES = [c for c in list_profiles(include_abstract=False) if c.find_mma(family="tcgen05")]


def _toolchain_or_skip(arch):
    try:
        return select_toolchain(arch, (13, 0))
    except UnsupportedOnDevice as exc:
        pytest.skip(str(exc).splitlines()[0])


def _problem(scheme="w4a16", tokens=4096, n=1536, k=2048, act="bf16", experts=8, top_k=2):
    return Problem(humming.schemes.get(scheme), tokens, n, k, act, form="indexed", experts=experts, top_k=top_k)


@pytest.mark.parametrize("act", ["f16", "bf16"])
@pytest.mark.parametrize("scheme,n,k,bn", [("w4a16", 1536, 2048, 256), ("w4a16[group_size=32]", 384, 2880, 128),
                                           ("w4a16[granularity=channel]", 2048, 768, 256)])
@pytest.mark.parametrize("caps", PROFILES, ids=[c.name for c in PROFILES])
def test_compiles_with_exactly_kind_f16(caps, scheme, n, k, bn, act):
    tc = _toolchain_or_skip(caps.target.arch)
    p = plan_moe_tcgen05(caps, humming.schemes.get(scheme), 4096, n, k, act, 8, 2)
    assert p.path == PATH and p.tiles.bn == bn and p.tiles.bm == 128 and p.kernel_name.startswith("hm_moe_tcgen05_")
    src = kernel_source(p, get_backend(caps), caps)
    for routed in ("SORTED[m0 + r]", "EXPERT_IDS[mb]", "a_row[lrow", "TOPK_W + slot", "C + (size_t)slot * n_out"):
        assert routed in src, routed
    mod = compile_cuda(src, [p.kernel_name], caps.target.arch, toolchain=tc, options=("--ptxas-options=-v",),
                       cache=False)
    assert max(int(r) for r in re.findall(r"Used (\d+) registers", mod.log)) <= 255, mod.log
    assert all(int(s) == 0 for s in re.findall(r"(\d+) bytes spill stores", mod.log)), mod.log
    static = max(int(s) for s in re.findall(r"(\d+) bytes smem", mod.log))
    assert static <= STATIC_SMEM + ROUTED_SMEM and p.smem_bytes + static <= caps.limits.smem_per_block_kb * 1024
    assert set(re.findall(r"\btcgen05\.mma[.\w:]*", mod.ptx)) == {"tcgen05.mma.cta_group::1.kind::f16"}
    for bad in ("wgmma", "mma.sync", "kind::f8f6f4", "kind::i8"):
        assert bad not in mod.ptx, bad


def test_selected_only_with_unverified_kernels(monkeypatch):
    caps = get_profile("nvidia-b200")
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    chosen = registry.select(_problem(), caps)
    assert chosen.family.name == "moe_wna16"
    assert any("MoE tcgen05 kernel" in r and UNVERIFIED_ENV in r for r in chosen.plan.reasons)
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    assert registry.select(_problem(), caps).family.name == "moe_tcgen05"
    # decode (2 rows per expert), zero points, quantized activations, the H200: the other MoE kernels
    assert registry.select(_problem(tokens=8), caps).family.name == "moe_wna16"
    for scheme in ("w4a16-zp", "w8a16", "w4a8-fp8"):
        assert registry.select(_problem(scheme), caps).family.name != "moe_tcgen05", scheme
    assert registry.select(_problem(), get_profile("nvidia-h200")).family.name == "moe_register_a"


def test_packs_act_order_and_padded_experts():
    torch.manual_seed(7)
    qw = humming.quantize(torch.randn(3, 208, 2880) * 0.05, "w4a16", group_size=64, act_order=True)
    ew = prepare_tcgen05_experts(qw, torch.bfloat16)
    assert (ew.layout.n, ew.layout.k) == (256, 2944) and ew.num_experts == 3 and ew.perm.shape == (3, 2880)
    assert ew.scales.shape == (3, 2944 // 64, 256) and ew.qweight.shape == (3, 256 * 2944 // 8)


W8A8_CASES = [(caps, scheme) for caps in PROFILES for scheme in ("w8a8-fp8", "w8a8-int8")
              if not (scheme == "w8a8-int8" and not caps.find_mma(family="tcgen05", a_type="s8"))]


@pytest.mark.parametrize("caps,scheme", W8A8_CASES, ids=[f"{c.name}-{s}" for c, s in W8A8_CASES])
def test_w8a8_form_compiles_with_exactly_its_kind(caps, scheme, monkeypatch, compiled_without_spills):
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    chosen = registry.select(_problem(scheme, n=336, k=2880), caps)  # padded to 384 x 2944
    p = chosen.plan
    assert chosen.family.name == "moe_tcgen05_w8a8" and p.path == W8A8_PATH and p.tiles.bm == 128
    assert p.kernel_name.startswith("hm_moe_w8a8_tcgen05_") and "padded to 384x2944" in " ".join(p.reasons)
    src = kernel_source(p, get_backend(caps), caps)
    for routed in ("SORTED[m0 + r]", "EXPERT_IDS[mb]", "my_rows[i] * KA", "TOPK_W + slot", "GS + slot / a_div",
                   "C + (size_t)slot * n_out", "i * 16 * 128"):
        assert routed in src, routed
    mod = compiled_without_spills(p, caps)
    static = max(int(s) for s in re.findall(r"(\d+) bytes smem", mod.log))
    assert static <= STATIC_SMEM + ROUTED_SMEM and p.smem_bytes + static <= caps.limits.smem_per_block_kb * 1024
    kind = "kind::i8" if scheme == "w8a8-int8" else "kind::f8f6f4"
    assert set(re.findall(r"\btcgen05\.mma[.\w:]*", mod.ptx)) == {f"tcgen05.mma.cta_group::1.{kind}"}
    for bad in ("wgmma", "mma.sync", "kind::f16"):
        assert bad not in mod.ptx, bad


def test_w8a8_form_selected_only_with_unverified_kernels(monkeypatch):
    caps = get_profile("nvidia-b200")
    monkeypatch.delenv(UNVERIFIED_ENV, raising=False)
    chosen = registry.select(_problem("w8a8-fp8"), caps)
    assert chosen.family.name == "moe_mma_8bit"  # (the verified 8-bit MoE kernel, from 128 rows per expert)
    assert any("MoE tcgen05 W8A8 kernel" in r and UNVERIFIED_ENV in r for r in chosen.plan.reasons)
    monkeypatch.setenv(UNVERIFIED_ENV, "1")
    assert registry.select(_problem("w8a8-fp8"), caps).family.name == "moe_tcgen05_w8a8"
    # decode, block scales, static activation scales, W4A8: the other MoE kernels
    for problem in (_problem("w8a8-fp8", tokens=8), _problem("w8a8-fp8-block"), _problem("w8a8-fp8-tensor"),
                    _problem("w4a8-fp8"), _problem("w4a8-mxfp4")):
        assert registry.select(problem, caps).family.name != "moe_tcgen05_w8a8", problem.scheme.name
