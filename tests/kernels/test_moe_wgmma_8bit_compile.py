"""CPU: the MoE wgmma W8A8 kernel (humming.core.families.moe_wgmma_8bit: the lock-step wgmma W8A8 kernel over routed
rows, 8-bit activation codes and weights) is off by default (moe.wgmma_8bit_min_rows null until measured), plans where the
knob turns it on, compiles for sm_90a without spills, and packs padded experts. tests/gpu/test_moe_gpu.py checks its
results with the knob on."""
from __future__ import annotations

import pytest
import torch

import humming
from humming.core.families.moe_wgmma_8bit.layout import prepare_w4a8_experts, prepare_w8a8_experts
from humming.core.families.moe_wgmma_8bit.planner import PATH
from humming.core.problem import Problem
from humming.core.registry import family_of, kernel_source, select
from humming.core.tuning import knobs
from humming.devices import get_backend
from humming.devices.current import resolve_profile

ON = {"moe.wgmma_8bit_min_rows": 64}
NAME = "moe_wgmma_8bit"


def _problem(scheme="w8a8-fp8", tokens=4096, n=1536, k=2048, experts=8, top_k=2):
    return Problem(humming.schemes.get(scheme), tokens, n, k, "bf16", form="indexed", experts=experts, top_k=top_k)


def test_off_by_default_and_where_it_applies():
    caps = resolve_profile("nvidia-h200")
    assert select(_problem(), caps).family.name != NAME
    with knobs.override(ON):
        for scheme in ("w8a8-fp8", "w8a8-int8", "w8a8-fp8-block", "w4a8-mxfp4"):
            assert select(_problem(scheme), caps).family.name == NAME, scheme
        refused = {
            "rows": _problem(tokens=64),  # 16 rows per expert on average, under the knob's 64
            "w4a16": _problem("w4a16"),
            "int4 W4A8 (the register-A W4A8 form's)": _problem("w4a8-fp8"),
            "NVFP4 W4A4": _problem("w4a4-nvfp4"),
            "static activation scale": _problem("w8a8-fp8-tensor"),
            "blocks on a padded shape": _problem("w8a8-fp8-block", n=1536 + 16),
        }
        for why, other in refused.items():
            assert select(other, caps).family.name != NAME, why
        assert select(_problem(), resolve_profile("nvidia-a100")).family.name != NAME
        reasons = " ".join(select(_problem("w8a8-int8", n=96 * 2, k=2048), caps).plan.reasons)
        assert "padded to 256x2048" in reasons and "moe.wgmma_8bit_min_rows" in reasons


@pytest.mark.parametrize("scheme,n,k", [("w8a8-fp8", 1536, 2048), ("w8a8-int8", 2880, 2880),
                                        ("w8a8-fp8-block", 512, 7168), ("w4a8-mxfp4", 5760, 2880)])
def test_compiles_without_spills(scheme, n, k, compiled_without_spills):
    caps = resolve_profile("nvidia-h200")
    with knobs.override(ON):
        p = select(_problem(scheme, n=n, k=k), caps).plan
    assert p.path == PATH and family_of(p).name == NAME and p.kernel_name.startswith(("hm_moe_w8a8", "hm_moe_w4a8"))
    assert (p.tiles.bm, p.tiles.bulk, p.splits) == (128, 0, 1)
    src = kernel_source(p, get_backend(caps), caps)
    routed = ["SORTED[m0 + r]", "EXPERT_IDS[mb]", "my_rows[i] * KA", "TOPK_W + s", "C + (size_t)row_slot[h] * n_out"]
    routed.append("GS + (size_t)max(a_row[br], 0) * ktiles" if "block" in scheme else "GS + s / a_div")
    if "w4a8" in scheme:  # the raw packed codes copied and widened to e4m3 in shared memory
        routed += ["b_src + ((size_t)64 * i * (K / 2) + k0 / 2)", "e2m1n4_to_e4m3x4"]
    for text in routed:
        assert text in src, text
    assert "wgmma.mma_async" in compiled_without_spills(p, caps).ptx


def test_packs_padded_experts():
    torch.manual_seed(3)
    qw = humming.quantize(torch.randn(3, 208, 2880) * 0.05, "w8a8-int8", bias=torch.randn(3, 208))
    ew = prepare_w8a8_experts(qw, torch.bfloat16)
    assert (ew.layout.n, ew.layout.k) == (256, 2944) and ew.num_experts == 3
    assert ew.qweight.dtype == torch.uint8 and ew.stride(ew.qweight) == 256 * 2944  # bytes between two experts
    assert ew.channel_scale.shape == (3, 256) and ew.bias.shape == (3, 256) and ew.scales is None
    codes = ew.qweight.view(3, 256, 2944)
    assert torch.equal(codes[1, :208, :2880], qw.expert(1).codes().to(torch.uint8))  # as stored; padding zero
    assert not codes[:, 208:].any() and not codes[:, :, 2880:].any()
    torch.testing.assert_close(ew.channel_scale[2, :208], qw.expert(2).scale_values().reshape(-1).float())
    block = humming.quantize(torch.randn(2, 256, 384) * 0.05, "w8a8-fp8-block")
    ew = prepare_w8a8_experts(block, torch.bfloat16)
    assert ew.scales.shape == (2, 2, 3) and ew.channel_scale is None and ew.stride(ew.scales) == 6
    mxfp4 = humming.quantize(torch.randn(2, 208, 2880) * 0.05, "w4a8-mxfp4")
    ew = prepare_w4a8_experts(mxfp4, torch.bfloat16)
    assert (ew.layout.n, ew.layout.k, ew.layout.group) == (256, 2944, 32) and ew.layout.weight_format == "e2m1"
    assert ew.qweight.dtype == torch.uint8 and ew.stride(ew.qweight) == 256 * 2944 // 2  # packed bytes per expert
    assert ew.scales.shape == (2, 2944 // 32, 256) and ew.scales.dtype == torch.float32


def _codes_to_float(codes: torch.Tensor, a_type: str) -> torch.Tensor:
    return (codes.view(torch.int8) if a_type == "s8" else codes.view(torch.float8_e4m3fn)).float()


def emulate_kernel(ew, codes: torch.Tensor, gs: torch.Tensor, routing, a_div: int, n_out: int, topk_w, bn: int,
                   block: bool) -> torch.Tensor:
    """The MoE wgmma W8A8 kernel's arithmetic in torch, through the same flat buffers and pointer arithmetic as its
    source: B + expert * b_stride (bytes), CS / BIAS + expert * N, S + expert * s_stride + (n0 / 128) * ktiles + kt,
    GS + s / a_div (or (s / a_div) * ktiles + kt), ES[expert]; padding rows and columns past n_out not stored."""
    n, k = ew.layout.n, ew.layout.k
    a_type, ktiles, ka = ew.layout.a_type, k // 128, codes.shape[1]
    flat_b, b_stride = ew.qweight.reshape(-1), ew.stride(ew.qweight)
    cs = None if ew.channel_scale is None else ew.channel_scale.reshape(-1)
    bias = None if ew.bias is None else ew.bias.reshape(-1).float()
    flat_s = None if ew.scales is None else ew.scales.reshape(-1)
    out = torch.full((routing.num_slots, n_out), float("nan"))
    for mb in range(routing.capacity // 128):
        m0, expert = mb * 128, int(routing.expert_ids[mb])
        if m0 >= int(routing.num_padded[0]) or expert < 0:
            continue
        slots = routing.sorted_ids[m0:m0 + 128].tolist()
        rows = [s // a_div if s < routing.num_slots else -1 for s in slots]
        a = torch.zeros(128, k)
        for r, row in enumerate(rows):
            if row >= 0:
                a[r, :ka] = _codes_to_float(codes[row], a_type)
        w = _codes_to_float(flat_b[expert * b_stride:(expert + 1) * b_stride].reshape(n, k), a_type)
        for n0 in range(0, n, bn):
            if block:
                acc = torch.zeros(128, bn)
                for kt in range(ktiles):
                    part = a[:, kt * 128:(kt + 1) * 128] @ w[n0:n0 + bn, kt * 128:(kt + 1) * 128].T
                    ts = torch.tensor([float(gs[max(row, 0) * ktiles + kt]) for row in rows])
                    wsc = float(flat_s[expert * ew.stride(ew.scales) + (n0 // 128) * ktiles + kt])
                    acc += part * (ts * wsc)[:, None]
                rs = torch.full((128,), float(ew.expert_scale[expert]))
            else:
                acc = a @ w[n0:n0 + bn].T
                rs = torch.tensor([float(ew.expert_scale[expert]) * (float(gs[row]) if row >= 0 else 0.0)
                                   for row in rows])
            for j in range(bn):
                col = n0 + j
                if col >= n_out:
                    continue
                c = float(cs[expert * n + col]) if cs is not None else 1.0
                b = float(bias[expert * n + col]) if bias is not None else 0.0
                for r, s in enumerate(slots):
                    if s < routing.num_slots:
                        wt = float(topk_w.reshape(-1)[s]) if topk_w is not None else 1.0
                        out[s, col] = (float(acc[r, j]) * float(rs[r]) * c + b) * wt
    return out


@pytest.mark.parametrize("scheme,n,k,bn", [("w8a8-int8", 208, 400, 256), ("w8a8-fp8", 144, 272, 128),
                                           ("w8a8-fp8-block", 256, 384, 128)])
def test_kernel_indexing_emulated_matches_the_reference(scheme, n, k, bn):
    """The prepared experts read through the kernel's own strides and the routing's slots give the reference MoE
    GEMM (the activation codes and scales as the runtime quantizes them): the packer and the kernel agree."""
    from humming.core.moe.reference import reference_moe_gemm
    from humming.core.quant.quantize import quantize_activation

    torch.manual_seed(11)
    e, tokens, top_k = 4, 9, 2
    qw = humming.quantize(torch.randn(e, n, k) * 0.05, scheme, bias=torch.randn(e, n).half())
    ew = prepare_w8a8_experts(qw, torch.float16)  # (the bias as stored: f16)
    x = torch.randn(tokens, k)
    ids = torch.stack([torch.randperm(e)[:top_k] for _ in range(tokens)]).to(torch.int32)
    ids[0, 1] = ids[0, 0]  # an expert repeated within a token's top-k
    tw = torch.rand(tokens, top_k)
    qa = quantize_activation(x, qw.scheme)
    routing = humming.moe.route(ids, e, 128)
    got = emulate_kernel(ew, qa.codes, qa.scale_values().float().reshape(-1), routing, top_k, n, tw, bn,
                         "block" in scheme)
    want = reference_moe_gemm(x, qw, ids, tw).reshape(tokens * top_k, n).float()
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _natural_scales(table: torch.Tensor) -> torch.Tensor:
    """The W4A8 kernel's scale table [K/group, N] back in natural column order: in each 128-column tile, the thread
    of lane % 4 = q reads table column 32 q + 2 j + e for its accumulator column 8 j + 2 q + e (W4A8_ACC_DECL)."""
    out = torch.empty_like(table)
    for n0 in range(0, table.shape[1], 128):
        for q in range(4):
            for j in range(16):
                for e in range(2):
                    out[:, n0 + 8 * j + 2 * q + e] = table[:, n0 + 32 * q + 2 * j + e]
    return out


def test_w4a8_kernel_indexing_emulated_matches_the_reference():
    """MXFP4 x FP8 experts: the packed codes at B + expert * b_stride (bytes; byte j of a row holds k = 2j in its low
    nibble), the group scales at S + expert * s_stride in the kernel's column order, the routed rows' e4m3 codes and
    token scales give the reference MoE GEMM."""
    from humming.core.moe.reference import reference_moe_gemm
    from humming.core.quant.quantize import quantize_activation

    torch.manual_seed(5)
    e, n, k, tokens, top_k = 3, 144, 320, 7, 2
    qw = humming.quantize(torch.randn(e, n, k) * 0.05, "w4a8-mxfp4")
    ew = prepare_w4a8_experts(qw, torch.bfloat16)
    np_, kp, group = ew.layout.n, ew.layout.k, ew.layout.group
    x = torch.randn(tokens, k)
    ids = torch.stack([torch.randperm(e)[:top_k] for _ in range(tokens)]).to(torch.int32)
    qa = quantize_activation(x, qw.scheme)
    codes, gs = _codes_to_float(qa.codes, "e4m3"), qa.scale_values().float().reshape(-1)
    routing = humming.moe.route(ids, e, 128)
    flat_b, flat_s = ew.qweight.reshape(-1), ew.scales.reshape(-1)
    lut = torch.tensor([v for v in E2M1] + [-v for v in E2M1])
    out = torch.full((routing.num_slots, n), float("nan"))
    for mb in range(routing.capacity // 128):
        expert = int(routing.expert_ids[mb])
        if mb * 128 >= int(routing.num_padded[0]) or expert < 0:
            continue
        raw = flat_b[expert * ew.stride(ew.qweight):(expert + 1) * ew.stride(ew.qweight)].reshape(np_, kp // 2)
        nibbles = torch.stack([raw & 0xF, raw >> 4], dim=-1).reshape(np_, kp).long()
        w = lut[nibbles]
        table = flat_s[expert * ew.stride(ew.scales):(expert + 1) * ew.stride(ew.scales)].reshape(kp // group, np_)
        w = w * _natural_scales(table).t().repeat_interleave(group, dim=1)
        for s in routing.sorted_ids[mb * 128:(mb + 1) * 128].tolist():
            if s < routing.num_slots:
                a = torch.zeros(kp)
                a[:k] = codes[s // top_k]
                out[s] = (a @ w.t())[:n] * float(ew.expert_scale[expert]) * float(gs[s // top_k])
    want = reference_moe_gemm(x, qw, ids).reshape(tokens * top_k, n).float()
    torch.testing.assert_close(out, want, rtol=2e-3, atol=2e-3)
