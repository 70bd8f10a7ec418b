"""CPU: config.json quantization_config of each checkpoint family read into the importers' layout, options and
activation scheme (humming.checkpoints.quant_config); what humming cannot represent is a SchemeError naming the
field."""
from __future__ import annotations

import pytest

from humming.checkpoints.quant_config import parse_quant_config
from humming.errors import SchemeError


def ct(weights, acts=None, fmt="pack-quantized", targets=("Linear",), ignore=("lm_head",)):
    return {"quant_method": "compressed-tensors", "format": fmt, "ignore": list(ignore),
            "config_groups": {"group_0": {"targets": list(targets), "weights": weights, "input_activations": acts}}}


W4 = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128}
W8 = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
FP8 = {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "channel"}


@pytest.mark.parametrize("cfg, layout, options, acts", [
    (ct(W4), "compressed-tensors", {"num_bits": 4, "group_size": 128, "format": "pack-quantized"}, None),
    (ct(W8, {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True, "symmetric": True}, "int-quantized"),
     "compressed-tensors", {"num_bits": 8, "format": "int-quantized"}, "w8a8-int8"),
    (ct(FP8, {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}, "float-quantized"),
     "compressed-tensors", {"num_bits": 8, "format": "float-quantized"}, "w8a8-fp8"),
    (ct(FP8, {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}, "float-quantized"),
     "compressed-tensors", {"num_bits": 8, "format": "float-quantized"}, "w8a8-fp8-tensor"),
    (ct({**FP8, "strategy": "block", "block_structure": [128, 128]}, None, "float-quantized"), "compressed-tensors",
     {"num_bits": 8, "block": (128, 128), "format": "float-quantized"}, None),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True, "sym": True}, "gptq",
     {"bits": 4, "group_size": 128, "sym": True}, None),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1, "checkpoint_format": "gptq_v2"}, "gptq_v2",
     {"bits": 8, "group_size": None, "sym": None}, None),
    ({"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}, "awq",
     {"group_size": 64}, None),
    ({"quant_method": "modelopt", "quant_algo": "nvfp4"}, "modelopt", {"quant_algo": "NVFP4"}, None),
    ({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
     "fp8-block", {"block": (128, 128)}, "w8a8-fp8-block"),
    ({"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}, "gpt-oss", {}, None),
])
def test_each_family(cfg, layout, options, acts):
    q = parse_quant_config(cfg)
    m = q.for_module("model.layers.0.mlp.down_proj")
    assert (m.layout, m.options, m.activations) == (layout, options, acts)


def test_targets_and_ignore():
    q = parse_quant_config(ct(W4, targets=("re:.*mlp.*",), ignore=("lm_head", "re:.*mlp.gate$")))
    assert q.for_module("model.layers.3.mlp.up_proj").layout == "compressed-tensors"
    assert q.ignored("lm_head") and q.ignored("model.layers.1.mlp.gate") and not q.ignored("model.layers.1.mlp.up_proj")
    with pytest.raises(SchemeError, match="no config_groups entry .* targets it"):
        q.for_module("model.layers.0.self_attn.q_proj")
    glob = parse_quant_config({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]})
    assert glob.ignored("model.layers.7.self_attn.q_proj") and not glob.ignored("model.layers.7.mlp.experts")


@pytest.mark.parametrize("cfg, field", [
    (None, "no quantization_config"),
    ({"quant_method": "bitsandbytes"}, "quant_method='bitsandbytes'"),
    ({"quant_method": "awq", "version": "gemv"}, "version='gemv'"),
    ({"quant_method": "awq", "bits": 3}, "bits=3"),
    ({"quant_method": "gptq", "checkpoint_format": "marlin"}, "checkpoint_format='marlin'"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "quant_algo='W4A8_AWQ'"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "weight_block_size=None"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "static"}, "activation_scheme"),
    (ct(W4, fmt="sparse-24-bitmask"), "sparse"),
    (ct(FP8, {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": True}), "input_activations"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "config_groups"),
])
def test_refusals_name_the_field(cfg, field):
    with pytest.raises(SchemeError, match=field.replace("(", r"\(").replace("[", r"\[")):
        parse_quant_config(cfg)
