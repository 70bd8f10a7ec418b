"""GPU: tiny Llama / Qwen3-MoE / Mixtral GPTQ checkpoint directories (tests/models/_build.py), and the AWQ, ModelOpt
NVFP4, DeepSeek block-FP8, gpt-oss MXFP4 and compressed-tensors ones, loaded by
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


# (layout, architecture, tolerance as a fraction of the largest logit): the checkpoint families of
# tests/models/test_load_dir_models.py on the GPU; block FP8 quantizes its activations per 128 columns to e4m3,
# which the reference model (16-bit activations) does not (5-6% measured on the CPU); the DeepSeek-layout MoE model's
# block-FP8 experts run the MoE tile kernel on activations rescaled to 16 bits; GPTQ desc_act experts each their own
# column order (the gate/up rows permuted per slot, the down projection folded into the intermediate order).
GPU_FAMILIES = [("awq", "qwen3", 0.03), ("modelopt-nvfp4", "llama", 0.03), ("fp8-block", "qwen3", 0.1),
                ("fp8-block", "qwen3_moe", 0.1), ("gptq-desc-act", "qwen3_moe", 0.03)]


@pytest.mark.parametrize("layout, arch, tol", GPU_FAMILIES)
def test_checkpoint_family_on_gpu(layout, arch, tol, tmp_path):
    from tests.models._build import write_checkpoint

    ref = write_checkpoint(arch, str(tmp_path), layout, seed=5).to("cuda", torch.float16)
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float16, device="cuda")
    ids = torch.randint(0, 256, (2, 10), device="cuda")
    with torch.no_grad():
        got, want = model(ids).logits.float(), ref(ids).logits.float()
        compiled = torch.compile(model, fullgraph=True)(ids).logits.float()
    err = (got - want).abs().max().item()
    assert err <= tol * want.abs().max().item() + 0.02, f"{layout} {arch}: max error {err:.3g}"
    assert (compiled - got).abs().max().item() <= 0.02 * got.abs().max().item() + 0.02, f"{layout} {arch}: compiled"
    assert model.generate(ids[:1, :3], max_new_tokens=4, do_sample=False).shape == (1, 7)


def test_gpt_oss_mxfp4_on_gpu(tmp_path):
    from tests.models._build import write_gpt_oss_checkpoint

    ref = write_gpt_oss_checkpoint(str(tmp_path), seed=4).to("cuda", torch.float16)
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float16, device="cuda")
    ids = torch.randint(0, 256, (2, 12), device="cuda")
    with torch.no_grad():
        got, want = model(ids).logits.float(), ref(ids).logits.float()
    err = (got - want).abs().max().item()
    assert err <= 0.03 * want.abs().max().item() + 0.02, f"gpt-oss: max error {err:.3g}"
    assert model.generate(ids[:1, :3], max_new_tokens=4, do_sample=False).shape == (1, 7)


@pytest.mark.parametrize("preset, tol", [("W4A16", 0.03), ("FP8_DYNAMIC", 0.05), ("W8A8", 0.06)])
def test_compressed_tensors_model_on_gpu(preset, tol, tmp_path):
    pytest.importorskip("compressed_tensors")
    from tests.models.test_ct_models import compressed_checkpoint

    ref = compressed_checkpoint(preset, tmp_path).to("cuda", torch.float16)
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float16, device="cuda")
    ids = torch.randint(0, 256, (2, 10), device="cuda")
    with torch.no_grad():
        got, want = model(ids).logits.float(), ref(ids).logits.float()
    err = (got - want).abs().max().item()
    assert err <= tol * want.abs().max().item() + 0.02, f"{preset}: max error {err:.3g}"
    assert model.generate(ids[:1, :3], max_new_tokens=4, do_sample=False).shape == (1, 7)
