"""Tiny transformers models built from their configs (nothing downloaded) and quantized checkpoint directories of
them: random quantized tensors in a checkpoint family's layout (tests/checkpoints/_writers.py: AutoGPTQ's and
AutoAWQ's packing loops, DeepSeek-V3's block FP8, ModelOpt's NVFP4) for every linear layer and every expert
projection, the rest of the model's tensors as they are, in two shards with an index and a config.json naming the
quantization; and the same model with the checkpoint's dequantized weights as the reference."""
from __future__ import annotations

import json
import os

import numpy as np
import torch

from tests.checkpoints._writers import (
    FP4_VALUES,
    awq_pack,
    e4m3_bytes,
    gptq_tensors,
    ml_values,
    pack_nibbles,
    random_e4m3_scales,
)

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


def _gptq(n: int, k: int, rng, desc_act: bool = False, order=None) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Random 4-bit asymmetric GPTQ (v1) tensors of an [n, k] weight and its dequantized value; ``desc_act``: the
    groups are taken in a column order (``order``, else a random one), as GPTQ's act-order writes: from the
    Hessian of the weight's input, so projections of one input (an expert's gate and up) share it."""
    g = k // GROUP
    q = rng.integers(0, 16, size=(k, n))
    z = rng.integers(1, 16, size=(g, n))
    s = rng.uniform(0.002, 0.02, size=(g, n)).astype(np.float16)
    g_idx = np.arange(k) // GROUP
    if desc_act:
        g_idx = np.empty(k, dtype=np.int64)
        g_idx[rng.permutation(k) if order is None else order] = np.arange(k) // GROUP
    w = s.astype(np.float64)[g_idx, :] * (q - z[g_idx, :])
    return gptq_tensors(q, z - 1, s, 4, g_idx=g_idx if desc_act else None), torch.from_numpy(w.T.astype(np.float32))


def _awq(n: int, k: int, rng) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Random AutoAWQ GEMM-packed tensors (4-bit, zero points, group 64) and the dequantized weight."""
    g = k // GROUP
    q, z = rng.integers(0, 16, size=(k, n)), rng.integers(0, 16, size=(g, n))
    s = rng.uniform(0.002, 0.02, size=(g, n)).astype(np.float16)
    gi = np.arange(k) // GROUP
    w = (q - z[gi, :]) * s.astype(np.float64)[gi, :]
    t = {"qweight": torch.from_numpy(awq_pack(q)), "qzeros": torch.from_numpy(awq_pack(z)), "scales": torch.from_numpy(s)}
    return t, torch.from_numpy(w.T.astype(np.float32))


def _fp8_block(n: int, k: int, rng) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """DeepSeek-V3 block FP8 of a random weight: e4m3 codes and float32 weight_scale_inv (amax / 448) per 128 x 128
    block, and the dequantized weight."""
    raw = rng.standard_normal((n, k)) * 0.02
    blocks = np.pad(np.abs(raw), ((0, -n % 128), (0, -k % 128))).reshape(-(-n // 128), 128, -(-k // 128), 128)
    sv = (blocks.max(axis=(1, 3)) / 448.0).astype(np.float32)
    full = np.repeat(np.repeat(sv.astype(np.float64), 128, 0), 128, 1)[:n, :k]
    codes = e4m3_bytes(raw / full)
    w = ml_values(codes.view(torch.uint8).numpy(), "e4m3") * full
    t = {"weight": codes, "weight_scale_inv": torch.from_numpy(sv)}
    return t, torch.from_numpy(w.astype(np.float32))


def _modelopt_nvfp4(n: int, k: int, rng) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Random ModelOpt NVFP4 weights (no input_scale: weight-only) and the dequantized weight."""
    codes = rng.integers(0, 16, size=(n, k))
    st, sv = random_e4m3_scales(rng, (n, k // 16))
    ws2 = np.float32(rng.uniform(1e-4, 1e-3))
    w = (np.array(FP4_VALUES, dtype=np.float32)[codes] * np.repeat(sv, 16, axis=1).astype(np.float32)) * ws2
    t = {"weight": torch.from_numpy(pack_nibbles(codes)), "weight_scale": st, "weight_scale_2": torch.tensor(ws2)}
    return t, torch.from_numpy(w.astype(np.float32))


# layout: (tensor maker, quantization_config)
LAYOUTS = {
    "gptq": (_gptq, {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False, "sym": False,
                     "checkpoint_format": "gptq"}),
    "gptq-desc-act": (lambda n, k, rng, order=None: _gptq(n, k, rng, desc_act=True, order=order),
                      {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": True, "sym": False,
                       "checkpoint_format": "gptq"}),
    "awq": (_awq, {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm"}),
    "fp8-block": (_fp8_block, {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [128, 128]}),
    "modelopt-nvfp4": (_modelopt_nvfp4, {"quant_method": "modelopt", "quant_algo": "NVFP4"}),
}


def _checkpoint_experts_name(arch: str, layer: int, e: int, proj: str) -> str:
    if arch == "mixtral":  # the hub's Mixtral naming (transformers renames it to mlp.experts on load)
        return f"model.layers.{layer}.block_sparse_moe.experts.{e}.{ {'gate': 'w1', 'up': 'w3', 'down': 'w2'}[proj]}"
    return f"model.layers.{layer}.mlp.experts.{e}.{proj}_proj"


def write_gptq_checkpoint(arch: str, path: str, seed: int = 0) -> torch.nn.Module:
    """A GPTQ checkpoint of a tiny ``arch`` model in ``path`` (see write_checkpoint)."""
    return write_checkpoint(arch, path, "gptq", seed)


def write_checkpoint(arch: str, path: str, layout: str = "gptq", seed: int = 0) -> torch.nn.Module:
    """A checkpoint of a tiny ``arch`` model in ``layout`` (LAYOUTS) in ``path``; returns the reference model
    (float32) holding the checkpoint's dequantized weights."""
    make, quant_config = LAYOUTS[layout]
    import transformers

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = tiny_config(arch)
    ref = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    tensors: dict[str, torch.Tensor] = {}
    quantized: set[str] = set()
    for name, module in ref.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
            t, w = make(module.out_features, module.in_features, rng)
            tensors.update({f"{name}.{k}": v for k, v in t.items()})
            module.weight.data.copy_(w)
            quantized.add(name + ".weight")
        elif hasattr(module, "gate_up_proj") and module.gate_up_proj.dim() == 3:
            layer = int(name.split(".")[2])
            e_count, two_i, hidden = module.gate_up_proj.shape
            inter = two_i // 2
            for e in range(e_count):
                # act-order: the expert's gate and up share their input's column order
                shared = {"order": rng.permutation(hidden)} if layout == "gptq-desc-act" else {}
                for proj, (n, k) in (("gate", (inter, hidden)), ("up", (inter, hidden)), ("down", (hidden, inter))):
                    t, w = make(n, k, rng, **(shared if proj != "down" else {}))
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
    cfg["quantization_config"] = dict(quant_config)
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
