"""The decode steps bench/bench_model.py replays as a CUDA graph (DecodeSteps: greedy steps on a static KV cache,
inputs in fixed tensors) choose the same tokens as transformers' generate(), for a 16-bit model and for the same
model on humming layers; on the CPU the steps run eagerly (the reference backend), which is what the graph records."""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import humming  # noqa: E402

_SPEC = importlib.util.spec_from_file_location("bench_model", Path(__file__).resolve().parents[2] / "bench" / "bench_model.py")
bench_model = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench_model)


def _llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


@pytest.mark.parametrize("quantized", [False, True], ids=["16bit", "humming"])
def test_steps_choose_generates_tokens(quantized):
    model = _llama()
    if quantized:
        model = humming.nn.quantize_model(copy.deepcopy(model), "w8a16")
    ids = torch.randint(0, 512, (3, 8))
    steps = 5
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=steps + 1, min_new_tokens=steps + 1, do_sample=False, pad_token_id=0)
    stepper = bench_model.DecodeSteps(model, ids, steps)
    assert torch.equal(stepper.token, ref[:, 8:9])  # the prompt's next token (the prefill)
    tokens = torch.cat(stepper.run(), dim=1)
    assert torch.equal(tokens, ref[:, 9:]), (tokens, ref[:, 9:])
    stepper.reset()  # the prompt again: the same tokens
    assert torch.equal(torch.cat(stepper.run(), dim=1), tokens)
