"""CPU: the engine-shaped adapter (humming.integrations) driven as an inference engine drives a quantization
method: a GPTQ checkpoint's tensors handed over per module (and per expert), processed once, applied; column- and
row-parallel linears over 2 and 4 ranks and MoE layers split by intermediate size or by experts add up (concatenate
/ sum) to the unsplit layer, which equals the reference on the dequantized weights."""
from __future__ import annotations

import json
import types

import pytest
import torch

pytest.importorskip("safetensors")
pytest.importorskip("transformers")

from humming.checkpoints import load_dir  # noqa: E402
from humming.core.moe.reference import reference_moe_layer  # noqa: E402
from humming.errors import SchemeError, ShapeError  # noqa: E402
from humming.integrations import LinearMethod, MoEMethod, can_implement  # noqa: E402
from tests.models._build import write_gptq_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_moe_gptq")
    write_gptq_checkpoint("qwen3_moe", str(path), seed=9)
    ckpt = load_dir(path)
    return ckpt, json.loads((path / "config.json").read_text())["quantization_config"]


def module_tensors(ckpt, prefix):
    names = [n for n in ckpt.weight_map if n.startswith(prefix + ".")]
    return ckpt._read(names)


def linear(ckpt, config, prefix, **kw):
    method, layer = LinearMethod(config, prefix, **kw), types.SimpleNamespace()
    method.create_weights(layer)
    for name, t in module_tensors(ckpt, prefix).items():
        method.load_weight(layer, name, t)
    method.process_weights_after_loading(layer)
    assert not hasattr(layer, "humming_tensors")  # the checkpoint layout is freed
    return method, layer


def test_can_implement(checkpoint):
    _, config = checkpoint
    ok, why = can_implement(config, profile="nvidia-h100")
    assert ok and "gptq" in why and "nvidia-h100" in why
    ok, why = can_implement({"quant_method": "awq", "version": "gemv"})
    assert not ok and "gemv" in why


@pytest.mark.parametrize("parallel, world", [("column", 2), ("row", 2), ("column", 4)])
def test_linear_tensor_parallel(checkpoint, parallel, world):
    ckpt, config = checkpoint
    prefix = "model.layers.1.self_attn.o_proj"
    x = torch.randn(5, 128)
    want = x @ ckpt[prefix].dequantize().T
    method, layer = linear(ckpt, config, prefix)
    assert torch.allclose(method.apply(layer, x), want, atol=1e-5)
    outs = []
    for rank in range(world):
        m, lay = linear(ckpt, config, prefix, tp_rank=rank, tp_size=world, parallel=parallel)
        part = x if parallel == "column" else x[:, rank * 128 // world:(rank + 1) * 128 // world]
        outs.append(m.apply(lay, part))
    got = torch.cat(outs, dim=1) if parallel == "column" else sum(outs)
    assert torch.allclose(got, want, atol=1e-4)


@pytest.mark.parametrize("split", [None, ("tp", 2), ("ep", 2), ("ep", 4)])
def test_moe(checkpoint, split):
    ckpt, config = checkpoint
    prefix, experts = "model.layers.0.mlp.experts", 8
    tensors = {n: t for n, t in ckpt._read([n for n in ckpt.weight_map if n.startswith(prefix + ".")]).items()}
    x = torch.randn(6, 128)
    ids = torch.stack([torch.randperm(experts)[:2] for _ in range(6)]).to(torch.int32)
    tw = torch.softmax(torch.randn(6, 2), dim=1)
    gate, up = ckpt[prefix + ".{e}.gate_proj"], ckpt[prefix + ".{e}.up_proj"]
    from humming.core.quant.slicing import cat_rows

    want = reference_moe_layer(x, cat_rows([gate, up]), ckpt[prefix + ".{e}.down_proj"], ids, tw)
    world = split[1] if split else 1
    total = 0
    for rank in range(world):
        kw = {} if not split else ({"tp_rank": rank, "tp_size": world} if split[0] == "tp" else
                                   {"ep_rank": rank, "ep_size": world})
        method, layer = MoEMethod(config, prefix, experts, **kw), types.SimpleNamespace()
        method.create_weights(layer)
        for name, t in tensors.items():
            e, proj = name[len(prefix) + 1:].split(".")[:2]
            method.load_weight(layer, name, t, expert_id=int(e),
                               shard_id={"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}[proj])
        method.process_weights_after_loading(layer)
        if split and split[0] == "ep":  # only this rank's experts were kept, and the map routes to them
            assert layer.humming_moe.num_experts == experts // world
            assert layer.humming_moe.expert_map.tolist() == [e - rank * experts // world
                                                              if e // (experts // world) == rank else -1
                                                              for e in range(experts)]
        total = total + method.apply(layer, x, tw, ids)
    assert torch.allclose(total, want, atol=1e-4), (total - want).abs().max()


def test_moe_expert_parallel_rank_needs_only_its_experts(checkpoint):
    """An expert-parallel rank given only its own experts' tensors (as an engine's loader filters them) builds its
    part; another rank's tensors are dropped as they arrive; a bad split is named."""
    ckpt, config = checkpoint
    prefix, experts, world, rank = "model.layers.0.mlp.experts", 8, 4, 2
    names = [n for n in ckpt.weight_map if n.startswith(prefix + ".")]
    proj_ids = {"gate_proj": "w1", "up_proj": "w3", "down_proj": "w2"}
    method, layer = MoEMethod(config, prefix, experts, ep_rank=rank, ep_size=world), types.SimpleNamespace()
    method.create_weights(layer)
    for name, t in ckpt._read(names).items():
        e, proj = name[len(prefix) + 1:].split(".")[:2]
        method.load_weight(layer, name, t, expert_id=int(e), shard_id=proj_ids[proj])
        assert {int(key.split(".")[0]) for key in layer.humming_expert_tensors} <= {4, 5}
    method.process_weights_after_loading(layer)
    assert layer.humming_moe.num_experts == 2
    with pytest.raises(ShapeError, match="multiple of the world size"):
        MoEMethod(config, prefix, experts, ep_rank=0, ep_size=3)
    with pytest.raises(ShapeError, match="ep_rank 4 is outside"):
        MoEMethod(config, prefix, experts, ep_rank=4, ep_size=4)


def test_errors(checkpoint):
    ckpt, config = checkpoint
    with pytest.raises(ShapeError, match="parallel="):
        LinearMethod(config, "model.layers.0.self_attn.q_proj", tp_size=2)
    method, layer = LinearMethod(config, "model.layers.0.self_attn.q_proj"), types.SimpleNamespace()
    method.create_weights(layer)
    with pytest.raises(SchemeError, match="no checkpoint tensor was loaded"):
        method.process_weights_after_loading(layer)
    method.load_weight(layer, "qweight", torch.zeros(16, 128, dtype=torch.int32))
    with pytest.raises(SchemeError, match="model.layers.0.self_attn.q_proj: .*missing"):
        method.process_weights_after_loading(layer)
    moe = MoEMethod(config, "model.layers.0.mlp.experts", 8)
    with pytest.raises(ShapeError, match="shard_id"):
        moe.load_weight(types.SimpleNamespace(humming_expert_tensors={}), "qweight", torch.zeros(1), 0, "w4")
    with pytest.raises(ShapeError, match="split a scale group"):  # K 128 in 4 slices of 32: half a group of 64
        linear(ckpt, config, "model.layers.1.self_attn.o_proj", tp_rank=0, tp_size=4, parallel="row")
    with pytest.raises(ShapeError, match="row-parallel over 3 ranks"):
        linear(ckpt, config, "model.layers.1.self_attn.o_proj", tp_rank=0, tp_size=3, parallel="row")
