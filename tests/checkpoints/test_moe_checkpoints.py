"""Mixture-of-experts checkpoints: each layout's per-expert tensors import as one expert-stacked QuantizedWeight
whose experts are bit for bit the per-expert dense imports (and dequantize to the layouts' formulas); DeepSeek-V3
block FP8; gpt-oss stacked blocks; discovery of the experts and its errors; safetensors files."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import humming
from humming.checkpoints import from_fp8_block, import_experts, import_tensors, load_experts, read_safetensors
from humming.errors import SchemeError, ShapeError

from . import test_awq, test_compressed_tensors, test_gpt_oss, test_gptq, test_modelopt, test_mx
from ._writers import ml_values

E = 3
TEMPLATE = "model.layers.0.mlp.experts.{e}.gate_proj"
TENSORS = ("packed", "scales", "zeros", "global_scale", "g_idx", "bias", "input_scale")


def same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                                                                     b.contiguous().reshape(-1).view(torch.uint8))


def assert_expert_is(stacked, e: int, dense) -> None:
    one = stacked.expert(e)
    assert one.shape == dense.shape and not [k for k, v in one.scheme.to_flat().items()
                                             if k != "name" and v != dense.scheme.to_flat()[k]]
    for name in TENSORS:
        assert same(getattr(one, name), getattr(dense, name)), name


def name_all(per_expert: list[dict], template: str = TEMPLATE, sep: str = ".") -> dict[str, torch.Tensor]:
    out = {}
    for e, tensors in enumerate(per_expert):
        out.update({f"{template.format(e=e)}{sep}{k}": v for k, v in tensors.items()})
    out["model.layers.0.mlp.experts.0.up_proj.weight"] = torch.zeros(2, 2)  # another projection: not gathered
    out["model.layers.0.mlp.gate.weight"] = torch.zeros(2, 2)  # the router
    return out


def fp8_block(n=200, k=384, block=(128, 128), seed=0, scale_dtype=torch.float32):
    """DeepSeek-V3 layout: e4m3 weight [N, K] and weight_scale_inv [ceil(N/bn), ceil(K/bk)]; the formula by numpy."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 256, size=(n, k)).astype(np.uint8)
    codes = np.where(np.isfinite(ml_values(codes, "e4m3")), codes, 0)
    bn, bk = block
    s = rng.uniform(1e-4, 1e-2, size=(-(-n // bn), -(-k // bk))).astype(np.float32)
    s = torch.from_numpy(s).to(scale_dtype)
    sv = s.float().numpy().astype(np.float64)
    w = ml_values(codes, "e4m3") * np.repeat(np.repeat(sv, bn, axis=0), bk, axis=1)[:n, :k]
    t = {"weight": torch.from_numpy(codes).view(torch.float8_e4m3fn), "weight_scale_inv": s}
    return t, torch.from_numpy(w.astype(np.float32))


def cases():
    """(layout, per-expert tensors, formula weights, options)."""
    gptq = [test_gptq.build(4, seed=30 + e)[:2] for e in range(E)]
    awq = [test_awq.build(seed=40 + e) for e in range(E)]
    ct = [test_compressed_tensors.pack_quantized(4, asym=True, seed=50 + e) for e in range(E)]
    ct_sym = [test_compressed_tensors.pack_quantized(8, group=None, seed=55 + e) for e in range(E)]
    ct_nv = [test_compressed_tensors.nvfp4(seed=60 + e) for e in range(E)]
    mo_nv = [test_modelopt.nvfp4(seed=70 + e) for e in range(E)]
    mx = []
    for e in range(E):
        packed, scale, w, _ = test_mx.build("e2m1", seed=80 + e)
        mx.append(({"weight": packed, "weight_scale": scale}, w))
    ds = [fp8_block(seed=90 + e) for e in range(E)]
    return {
        "gptq": ("gptq", gptq, dict(bits=4)),
        "awq": ("awq", awq, {}),
        "ct-pack": ("compressed-tensors", ct, {}),
        "ct-int8-channel": ("compressed-tensors", ct_sym, {}),
        "ct-nvfp4": ("compressed-tensors", ct_nv, {}),
        "modelopt-nvfp4": ("modelopt", mo_nv, {}),
        "mx": ("mx", mx, {}),
        "deepseek-fp8": ("deepseek", ds, {}),
    }


@pytest.mark.parametrize("case", list(cases()))
def test_stacked_import_is_the_per_expert_import(case):
    layout, per_expert, opts = cases()[case]
    tensors = name_all([t for t, _ in per_expert])
    stacked = import_experts(tensors, TEMPLATE, layout, **opts)
    assert stacked.num_experts == E
    dense = [import_tensors(tensors, TEMPLATE.format(e=e), layout, **opts) for e in range(E)]
    for e in range(E):
        assert dense[e].num_experts is None and dense[e].scheme == stacked.scheme
        assert_expert_is(stacked, e, dense[e])
    deq = stacked.dequantize()
    assert torch.equal(deq, torch.stack([d.dequantize() for d in dense]))
    formula = torch.stack([w for _, w in per_expert])
    if case == "ct-nvfp4":  # the layout divides by its global scale; the canonical form multiplies by 1 / it
        torch.testing.assert_close(deq, formula, rtol=2e-7, atol=0)
    else:
        assert torch.equal(deq, formula)


def test_two_level_scales_and_input_scales_are_per_expert():
    per_expert = [test_modelopt.nvfp4(seed=100 + e) for e in range(E)]
    stacked = import_experts(name_all([t for t, _ in per_expert]), TEMPLATE, "modelopt")
    assert stacked.scheme.act == "e2m1" and tuple(stacked.global_scale.shape) == (E,)
    assert [stacked.global_scale[e].item() for e in range(E)] == [t["weight_scale_2"].item() for t, _ in per_expert]
    assert tuple(stacked.input_scale.shape) == (E,) and stacked.input_scale.dtype == torch.float32
    ct = [test_compressed_tensors.nvfp4(seed=110 + e) for e in range(E)]
    st = import_experts(name_all([t for t, _ in ct]), TEMPLATE, "compressed-tensors")
    assert tuple(st.global_scale.shape) == (E,) and tuple(st.input_scale.shape) == (E,)
    fp8 = [{"weight": torch.randn(32, 64).to(torch.float8_e4m3fn), "weight_scale": torch.tensor(0.125 * (e + 1)),
            "input_scale": torch.tensor(0.5 + e)} for e in range(E)]
    st8 = import_experts(name_all(fp8), TEMPLATE, "modelopt")
    assert st8.scheme.act_scale.mode == "static_tensor" and st8.input_scale.tolist() == [0.5, 1.5, 2.5]
    assert torch.equal(st8.dequantize()[2], fp8[2]["weight"].float() * 0.375)


def test_deepseek_v3_block_fp8():
    t, w = fp8_block(seed=1)
    qw = import_tensors({"l.weight": t["weight"], "l.weight_scale_inv": t["weight_scale_inv"]}, "l", "deepseek-fp8")
    assert qw.scheme == humming.schemes.get("w8a8-fp8-block") and torch.equal(qw.dequantize(), w)
    assert qw.num_experts is None and tuple(qw.scales.shape) == (2, 3)
    per_expert = [fp8_block(seed=2 + e) for e in range(E)]
    # experts stored stacked in one tensor import as one stacked weight too
    stacked = from_fp8_block(torch.stack([p["weight"] for p, _ in per_expert]),
                             torch.stack([p["weight_scale_inv"] for p, _ in per_expert]))
    assert stacked.num_experts == E and torch.equal(stacked.dequantize(), torch.stack([w for _, w in per_expert]))
    for e, (p, _) in enumerate(per_expert):
        assert_expert_is(stacked, e, from_fp8_block(p["weight"], p["weight_scale_inv"]))
    bf, wb = fp8_block(n=64, k=128, block=(64, 128), seed=3, scale_dtype=torch.bfloat16)
    small = from_fp8_block(bf["weight"], bf["weight_scale_inv"], block=[64, 128])
    assert small.scheme.weight_scale.block == (64, 128) and small.scheme.act_scale.group_size == 128
    assert small.scales.dtype == torch.float32 and torch.equal(small.dequantize(), wb)
    with pytest.raises(ShapeError, match=r"weight_scale_inv must have shape \[2, 3\]"):
        from_fp8_block(t["weight"], t["weight_scale_inv"][:, :2])
    with pytest.raises(ShapeError, match="weight must be float8_e4m3fn"):
        from_fp8_block(t["weight"].view(torch.uint8), t["weight_scale_inv"])
    # ml_dtypes agrees on the codes: the dequantized weight over the scales is the e4m3 value
    codes = t["weight"].view(torch.uint8).numpy()
    vals = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert torch.equal(qw.values(), torch.from_numpy(vals))


def test_gpt_oss_stacked_is_the_per_expert_import():
    blocks, scales, w = test_gpt_oss.build(e=E, seed=3)
    bias = torch.randn(E, 16)
    stacked = import_tensors({"m.experts.down_proj_blocks": blocks, "m.experts.down_proj_scales": scales,
                              "m.experts.down_proj_bias": bias}, "m.experts.down_proj", "gpt-oss")
    assert stacked.num_experts == E and torch.equal(stacked.dequantize(), w) and torch.equal(stacked.bias, bias)
    for e in range(E):
        assert_expert_is(stacked, e, humming.checkpoints.from_gpt_oss(blocks[e], scales[e], bias=bias[e]))


def test_experts_differing_only_in_form_share_one_scheme():
    # GPTQ detects symmetry per expert: a symmetric expert among asymmetric ones keeps zero points 2**(b-1)
    sym = test_gptq.build(4, sym=True, seed=120)
    asym = [test_gptq.build(4, seed=121 + e) for e in range(2)]
    stacked = import_experts(name_all([sym[0], asym[0][0], asym[1][0]]), TEMPLATE, "gptq")
    assert stacked.scheme.weight == "uint4" and stacked.scheme.zero_point == "int"
    assert torch.equal(stacked.zeros[0], torch.full_like(stacked.zeros[0], 8))
    assert torch.equal(stacked.dequantize(), torch.stack([sym[1], asym[0][1], asym[1][1]]))
    # desc_act per expert: a natural order among act-order experts becomes an explicit g_idx
    natural, shuffled = test_gptq.build(4, seed=130), test_gptq.build(4, desc_act=True, seed=131)
    mixed = import_experts(name_all([natural[0], shuffled[0]]), TEMPLATE, "gptq")
    assert mixed.scheme.act_order and torch.equal(mixed.g_idx[0], torch.arange(256, dtype=torch.int32) // 64)
    assert torch.equal(mixed.dequantize(), torch.stack([natural[1], shuffled[1]]))
    # a difference of substance is an error
    with pytest.raises(SchemeError, match="differ on group_size"):
        import_experts(name_all([test_gptq.build(4, group=64)[0], test_gptq.build(4, group=128)[0]]), TEMPLATE,
                       "gptq")


def test_which_experts():
    per_expert = [test_awq.build(seed=140 + e) for e in range(4)]
    tensors = name_all([t for t, _ in per_expert])
    some = import_experts(tensors, TEMPLATE, "awq", experts=[1, 3])
    assert some.num_experts == 2 and torch.equal(some.dequantize()[1], per_expert[3][1])
    assert import_experts(tensors, TEMPLATE, "awq", experts=2).num_experts == 2
    gap = {k: v for k, v in tensors.items() if ".experts.2." not in k}
    with pytest.raises(SchemeError, match=r"experts 2 of 0..3 are missing .* pass experts="):
        import_experts(gap, TEMPLATE, "awq")
    with pytest.raises(SchemeError, match=r"must contain \{e\} once"):
        import_experts(tensors, "model.layers.0.mlp.experts.0.gate_proj", "awq")
    with pytest.raises(SchemeError, match="no tensor matches the expert prefix"):
        import_experts(tensors, "model.layers.1.mlp.experts.{e}.gate_proj", "awq")
    with pytest.raises(SchemeError, match="names no expert"):
        import_experts(tensors, TEMPLATE, "awq", experts=[])
    with pytest.raises(SchemeError, match="experts.7.gate_proj.qweight' is missing"):
        import_experts(tensors, TEMPLATE, "awq", experts=[0, 7])
    w4a8 = import_experts(tensors, TEMPLATE, "awq", activations="w4a8-fp8")
    assert w4a8.num_experts == 4 and w4a8.scheme.act == "e4m3"


def test_load_experts_reads_one_projection(tmp_path):
    per_expert = [fp8_block(n=64, k=128, seed=150 + e) for e in range(E)]
    tensors = name_all([t for t, _ in per_expert])
    tensors.update({k.replace("gate_proj", "up_proj"): v.clone() for k, v in tensors.items() if "gate_proj" in k})
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    qw = load_experts(path, TEMPLATE, "deepseek-fp8")
    assert qw.num_experts == E and torch.equal(qw.dequantize(), torch.stack([w for _, w in per_expert]))
    keep = humming.checkpoints.experts.name_pattern(TEMPLATE).match
    read = read_safetensors(path, "model.layers.0.mlp.experts.", keep=keep)
    assert sorted(read) == sorted(k for k in tensors if ".gate_proj." in k)
    with pytest.raises(SchemeError, match="no tensor matches"):
        load_experts(path, "model.layers.9.mlp.experts.{e}.gate_proj", "deepseek-fp8")
