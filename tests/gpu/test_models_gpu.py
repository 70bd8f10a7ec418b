"""GPU: tiny Llama / Qwen3-MoE / Mixtral GPTQ checkpoint directories (tests/models/_build.py) loaded by
humming.transformers.from_pretrained onto the GPU run humming's kernels: logits match the same model holding the
checkpoint's dequantized weights, and greedy generate() runs. The MoE models run in fp16: in bf16 the rounding of a
random tiny model's hidden states flips near-tied expert choices between the two models (the MoE kernels' bf16
results are checked with fixed routings in test_moe_gpu.py / test_moe_register_a_gpu.py)."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
pytest.importorskip("transformers")

import humming  # noqa: E402
from tests.models._build import write_gptq_checkpoint  # noqa: E402


@pytest.mark.parametrize("arch, dtype", [("llama", torch.float16), ("llama", torch.bfloat16),
                                         ("qwen3_moe", torch.float16), ("mixtral", torch.float16)])
def test_checkpoint_model_on_gpu(arch, dtype, tmp_path):
    ref = write_gptq_checkpoint(arch, str(tmp_path), seed=11).to("cuda", dtype)
    model = humming.transformers.from_pretrained(tmp_path, dtype=dtype, device="cuda")
    ids = torch.randint(0, 256, (3, 16), device="cuda")
    with torch.no_grad():
        got, want = model(ids).logits.float(), ref(ids).logits.float()
    err = (got - want).abs().max().item()
    assert err <= 0.03 * want.abs().max().item() + 0.02, f"{arch} {dtype}: max error {err:.3g}"
    out = model.generate(ids[:2, :5], max_new_tokens=6, do_sample=False)
    assert out.shape == (2, 11)


def test_compiled_model_and_quantized_activations_on_gpu(tmp_path):
    """torch.compile(fullgraph=True) on the GPU: a whole tiny Qwen3-MoE on humming layers (humming::gemm and
    humming::moe_gemm custom ops), and QuantLinear with quantized activations (W8A8-FP8, W4A8-INT8)."""
    write_gptq_checkpoint("qwen3_moe", str(tmp_path), seed=12)
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float16, device="cuda")
    ids = torch.randint(0, 256, (2, 12), device="cuda")
    with torch.no_grad():
        eager = model(ids).logits.float()
        compiled = torch.compile(model, fullgraph=True)(ids).logits.float()
    assert (compiled - eager).abs().max().item() <= 0.02 * eager.abs().max().item()
    for scheme in ("w8a8-fp8", "w4a8-int8"):
        torch._dynamo.reset()
        layer = humming.nn.QuantLinear.from_linear(torch.nn.Linear(1024, 512).cuda().half(), scheme)
        x = torch.randn(16, 1024, device="cuda", dtype=torch.float16)
        want = layer(x)
        got = torch.compile(layer, fullgraph=True)(x)
        assert torch.allclose(got.float(), want.float(), atol=1e-3, rtol=1e-3), scheme
