"""Every layout survives a trip through .safetensors files; the file entry point finds tensors by prefix."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import humming
from humming.checkpoints import import_tensors, load_safetensors, read_safetensors
from humming.errors import SchemeError

from . import test_awq, test_compressed_tensors, test_gpt_oss, test_gptq, test_modelopt, test_mx


def layer_cases():
    g, _, _ = test_gptq.build(3, desc_act=True, seed=11)
    a, _ = test_awq.build(seed=12)
    c, _ = test_compressed_tensors.pack_quantized(4, asym=True, seed=13)
    nv, _ = test_compressed_tensors.nvfp4(seed=14)
    m, _ = test_modelopt.nvfp4(seed=15)
    packed, e, _, _ = test_mx.build("e2m3", seed=16)
    blocks, scales, _ = test_gpt_oss.build(seed=17)
    return [
        ("gptq", g, dict(bits=3, group_size=64), "."),
        ("awq", a, {}, "."),
        ("compressed-tensors", c, {}, "."),
        ("compressed-tensors", nv, {}, "."),
        ("modelopt", m, {}, "."),
        ("mx", {"weight": packed, "weight_scale": e}, dict(element_format="e2m3"), "."),
        ("gpt-oss", {"blocks": blocks, "scales": scales}, {}, "_"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_roundtrip_through_safetensors(tmp_path, case):
    layout, tensors, opts, sep = layer_cases()[case]
    prefix = "model.layers.3.mlp.down_proj"
    named = {f"{prefix}{sep}{k}": v.contiguous() for k, v in tensors.items()}
    named["model.layers.3.mlp.up_proj.weight"] = torch.zeros(2, 2)  # a neighbour that must be ignored
    path = tmp_path / "model.safetensors"
    save_file(named, str(path))
    from_file = load_safetensors(path, prefix, layout, **opts)
    in_memory = import_tensors(named, prefix, layout, **opts)
    assert from_file.scheme == in_memory.scheme
    assert torch.equal(from_file.dequantize(), in_memory.dequantize())


def test_directory_of_shards_and_errors(tmp_path):
    t, w, _ = test_gptq.build(4, seed=18)
    save_file({"a.qweight": t["qweight"], "a.scales": t["scales"]}, str(tmp_path / "model-00001.safetensors"))
    save_file({"a.qzeros": t["qzeros"], "a.g_idx": t["g_idx"]}, str(tmp_path / "model-00002.safetensors"))
    qw = load_safetensors(tmp_path, "a", "gptq", activations="w4a8-fp8")
    assert torch.equal(qw.dequantize(), w) and qw.scheme.act == "e4m3"
    assert set(read_safetensors(tmp_path, "a.q")) == {"a.qweight", "a.qzeros"}
    with pytest.raises(SchemeError, match="no tensor named b"):
        load_safetensors(tmp_path, "b", "gptq")
    with pytest.raises(SchemeError, match="unknown checkpoint layout"):
        load_safetensors(tmp_path, "a", "exl2")
    with pytest.raises(SchemeError, match="does not exist"):
        load_safetensors(tmp_path / "missing.safetensors", "a", "gptq")
    with pytest.raises(SchemeError, match="unexpected keyword"):
        load_safetensors(tmp_path, "a", "gptq", element_format="e2m1")


def test_public_module():
    assert humming.checkpoints.load_safetensors is load_safetensors
    assert set(humming.checkpoints.LAYOUTS) == {"gptq", "gptq_v2", "awq", "compressed-tensors", "modelopt", "mx",
                                                "gpt-oss", "fp8-block"}
