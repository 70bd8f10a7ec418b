"""CPU: torch.compile(fullgraph=True) of whole transformers models on humming layers (Llama, Qwen3-MoE, Mixtral from
GPTQ checkpoint directories) and of QuantLinear with quantized activations equals the eager model: the layers trace
(CPU: the reference as torch operations; CUDA: the humming::gemm / humming::moe_gemm custom ops)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import humming  # noqa: E402

from ._build import write_gptq_checkpoint  # noqa: E402


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "mixtral"])
def test_whole_model_compiles(arch, tmp_path):
    torch._dynamo.reset()
    write_gptq_checkpoint(arch, str(tmp_path), seed=2)
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float32)
    ids = torch.randint(0, 256, (2, 10))
    with torch.no_grad():
        eager = model(ids).logits
        compiled = torch.compile(model, fullgraph=True)(ids).logits
    assert torch.allclose(compiled, eager, atol=1e-5), (compiled - eager).abs().max()


@pytest.mark.parametrize("scheme", ["w4a16", "w8a8-int8", "w4a8-fp8", "w8a8-fp8"])
def test_quant_linear_compiles_every_scheme(scheme):
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = humming.nn.QuantLinear.from_linear(torch.nn.Linear(256, 128), scheme)
    x = torch.randn(3, 256)
    want = layer(x)  # (eager first: quantized activations trace through a custom op this call registers)
    assert torch.equal(torch.compile(layer, fullgraph=True)(x), want)
