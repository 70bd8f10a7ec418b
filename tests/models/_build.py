"""Tiny transformers models built from their configs (nothing downloaded) and quantized checkpoint directories of
them: random GPTQ tensors (tests/checkpoints/_writers.py, AutoGPTQ's packing loop) for every linear layer and every
expert projection, the rest of the model's tensors as they are, in two shards with an index and a config.json
naming the quantization; and the same model with the checkpoint's dequantized weights as the reference."""
from __future__ import annotations

import json
import os

import numpy as np
import torch

from tests.checkpoints._writers import gptq_tensors

GROUP = 64


def tiny_config(arch: str):
    import transformers

    common = dict(vocab_size=256, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=128, tie_word_embeddings=False)
    if arch == "llama":
        return transformers.LlamaConfig(intermediate_size=256, **common)
    if arch == "qwen3":
        return transformers.Qwen3Config(intermediate_size=256, head_dim=32, **common)
    if arch == "qwen3_moe":
        return transformers.Qwen3MoeConfig(moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2,
                                           decoder_sparse_step=1, head_dim=32, intermediate_size=256,
                                           norm_topk_prob=True, **common)
    if arch == "mixtral":
        return transformers.MixtralConfig(intermediate_size=128, num_local_experts=4, num_experts_per_tok=2, **common)
    raise ValueError(arch)


def _gptq(n: int, k: int, rng) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Random 4-bit asymmetric GPTQ (v1) tensors of an [n, k] weight and its dequantized value."""
    g = k // GROUP
    q = rng.integers(0, 16, size=(k, n))
    z = rng.integers(1, 16, size=(g, n))
    s = rng.uniform(0.002, 0.02, size=(g, n)).astype(np.float16)
    g_idx = np.arange(k) // GROUP
    w = s.astype(np.float64)[g_idx, :] * (q - z[g_idx, :])
    return gptq_tensors(q, z - 1, s, 4), torch.from_numpy(w.T.astype(np.float32))


def _checkpoint_experts_name(arch: str, layer: int, e: int, proj: str) -> str:
    if arch == "mixtral":  # the hub's Mixtral naming (transformers renames it to mlp.experts on load)
        return f"model.layers.{layer}.block_sparse_moe.experts.{e}.{ {'gate': 'w1', 'up': 'w3', 'down': 'w2'}[proj]}"
    return f"model.layers.{layer}.mlp.experts.{e}.{proj}_proj"


def write_gptq_checkpoint(arch: str, path: str, seed: int = 0) -> torch.nn.Module:
    """A GPTQ checkpoint of a tiny ``arch`` model in ``path``; returns the reference model (float32) holding the
    checkpoint's dequantized weights."""
    import transformers

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = tiny_config(arch)
    ref = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    tensors: dict[str, torch.Tensor] = {}
    quantized: set[str] = set()
    for name, module in ref.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
            t, w = _gptq(module.out_features, module.in_features, rng)
            tensors.update({f"{name}.{k}": v for k, v in t.items()})
            module.weight.data.copy_(w)
            quantized.add(name + ".weight")
        elif hasattr(module, "gate_up_proj") and module.gate_up_proj.dim() == 3:
            layer = int(name.split(".")[2])
            e_count, two_i, hidden = module.gate_up_proj.shape
            inter = two_i // 2
            for e in range(e_count):
                for proj, (n, k) in (("gate", (inter, hidden)), ("up", (inter, hidden)), ("down", (hidden, inter))):
                    t, w = _gptq(n, k, rng)
                    prefix = _checkpoint_experts_name(arch, layer, e, proj)
                    tensors.update({f"{prefix}.{kk}": v for kk, v in t.items()})
                    if proj == "down":
                        module.down_proj.data[e].copy_(w)
                    else:
                        rows = slice(0, inter) if proj == "gate" else slice(inter, two_i)
                        module.gate_up_proj.data[e, rows].copy_(w)
            quantized |= {f"{name}.gate_up_proj", f"{name}.down_proj"}
    for name, value in ref.state_dict().items():
        if name not in quantized:
            if arch == "mixtral":
                name = name.replace(".mlp.", ".block_sparse_moe.")
            tensors[name] = value.detach().clone().contiguous()
    _save_sharded(tensors, path)
    cfg = config.to_dict()
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False,
                                  "sym": False, "checkpoint_format": "gptq"}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return ref


def _save_sharded(tensors: dict[str, torch.Tensor], path: str) -> None:
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    names = sorted(tensors)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:])):
        file = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(path, file))
        weight_map.update({n: file for n in part})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def gpt_oss_config():
    import transformers

    return transformers.GptOssConfig(vocab_size=256, hidden_size=128, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=4096, tie_word_embeddings=False)


def write_gpt_oss_checkpoint(path: str, seed: int = 0) -> torch.nn.Module:
    """A gpt-oss-layout checkpoint of a tiny GptOss model in ``path``: the experts' MXFP4 ``*_blocks`` [E, N, K/32,
    16] / ``*_scales`` [E, N, K/32] (N x K: gate_up 2I x H with gate and up interleaved, down H x I; random codes and
    exponents) and their biases, the rest in bf16 as the release keeps it; quantization_config quant_method mxfp4.
    Returns the reference model holding the dequantized experts."""
    import transformers

    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    ref = transformers.AutoModelForCausalLM.from_config(gpt_oss_config(), dtype=torch.float32).eval()
    tensors: dict[str, torch.Tensor] = {}
    stacked: set[str] = set()
    fp4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
    for name, module in ref.named_modules():
        if type(module).__name__ != "GptOssExperts":
            continue
        for proj in ("gate_up_proj", "down_proj"):
            w_t = getattr(module, proj)  # [E, K, N]: transformers keeps x @ W
            e, k, n = w_t.shape
            codes = torch.randint(0, 16, (e, n, k), generator=g, dtype=torch.uint8)
            exps = torch.randint(119, 124, (e, n, k // 32), generator=g, dtype=torch.uint8)
            w = fp4[codes.long()] * torch.pow(2.0, exps.float() - 127).repeat_interleave(32, -1)
            w_t.data.copy_(w.transpose(1, 2))
            packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).reshape(e, n, k // 32, 16)
            tensors[f"{name}.{proj}_blocks"] = packed.contiguous()
            tensors[f"{name}.{proj}_scales"] = exps.contiguous()
            getattr(module, proj + "_bias").data.normal_(0, 0.02, generator=g)
            stacked.add(f"{name}.{proj}")
    for name, value in ref.state_dict().items():
        if name not in stacked:
            tensors[name] = value.detach().clone().contiguous()
    _save_sharded(tensors, path)
    cfg = ref.config.to_dict()
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    return ref
