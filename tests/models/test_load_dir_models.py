"""CPU: quantized checkpoint directories of tiny Llama, Qwen3, Qwen3-MoE and Mixtral models (GPTQ, two shards and
an index) load into transformers models on humming layers (humming.transformers.from_pretrained): every linear
layer a QuantLinear, every experts module a QuantMoE; logits equal those of the same model holding the
checkpoint's dequantized weights, and generate() runs."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import humming  # noqa: E402
from humming.checkpoints import load_dir  # noqa: E402
from humming.errors import SchemeError  # noqa: E402

from ._build import write_gptq_checkpoint  # noqa: E402

ARCHS = ["llama", "qwen3", "qwen3_moe", "mixtral"]


@pytest.mark.parametrize("arch", ARCHS)
def test_checkpoint_dir_runs_in_transformers(arch, tmp_path):
    ref = write_gptq_checkpoint(arch, str(tmp_path), seed=ARCHS.index(arch))
    ckpt = load_dir(tmp_path)
    assert ckpt.quant.method == "gptq" and len(ckpt) > 0
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float32)
    linears = [m for m in model.modules() if isinstance(m, humming.nn.QuantLinear)]
    assert len(linears) == len(ckpt.modules) > 0
    assert not any(type(m) is torch.nn.Linear and m is not model.lm_head for m in model.modules())
    if arch in ("qwen3_moe", "mixtral"):
        moes = [m for m in model.modules() if isinstance(m, humming.nn.QuantMoE)]
        assert len(moes) == 2 and len(ckpt.experts) == 2
    ids = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()
    out = model.generate(ids[:1, :4], max_new_tokens=5, do_sample=False)
    assert out.shape == (1, 9)


def test_load_dir_lazy_and_named_errors(tmp_path):
    write_gptq_checkpoint("qwen3_moe", str(tmp_path), seed=7)
    ckpt = load_dir(tmp_path)
    name = "model.layers.0.self_attn.q_proj"
    qw = ckpt[name]
    assert qw.scheme.weight == "uint4" and tuple(qw.shape) == (128, 128)
    gate = ckpt["model.layers.1.mlp.experts.{e}.gate_proj"]
    assert gate.num_experts == 8 and tuple(gate.shape) == (128, 128)
    assert "model.embed_tokens.weight" in ckpt.plain_tensors()
    with pytest.raises(KeyError, match="not a quantized module"):
        ckpt["model.layers.0.self_attn.nope"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(SchemeError, match="config.json is missing"):
        load_dir(tmp_path / "empty")


def test_quantize_model_in_place():
    import transformers

    from ._build import tiny_config

    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("qwen3_moe"), dtype=torch.float32).eval()
    ids = torch.randint(0, 256, (1, 10))
    with torch.no_grad():
        before = model(ids).logits
    humming.nn.quantize_model(model, "w8a16")
    assert isinstance(model.model.layers[0].mlp.experts, humming.nn.QuantMoE)
    assert isinstance(model.model.layers[0].self_attn.q_proj, humming.nn.QuantLinear)
    assert type(model.lm_head) is torch.nn.Linear  # skipped by default
    with torch.no_grad():
        after = model(ids).logits
    assert (after - before).abs().max() < 0.05 * before.abs().max()


def test_gpt_oss_mxfp4_checkpoint(tmp_path):
    """gpt-oss's stacked MXFP4 experts (interleaved gate/up, biases, clamped SwiGLU) become QuantMoE layers."""
    from ._build import write_gpt_oss_checkpoint

    ref = write_gpt_oss_checkpoint(str(tmp_path), seed=4)
    ckpt = load_dir(tmp_path)
    assert ckpt.quant.method == "mxfp4" and not ckpt.modules and len(ckpt.stacked) == 4
    gate_up = ckpt["model.layers.0.mlp.experts.gate_up_proj"]
    assert gate_up.num_experts == 4 and tuple(gate_up.shape) == (256, 128) and gate_up.bias is not None
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float32)
    moes = [m for m in model.modules() if isinstance(m, humming.nn.QuantMoE)]
    assert len(moes) == 2 and moes[0].interleaved and moes[0].activation == "swiglu_clamped"
    ids = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4), (got - want).abs().max()


# (layout, architecture, tolerance): block FP8 quantizes its activations per 128-column group to e4m3 (up to 1/16 per
# element), which the reference model (16-bit activations) does not: measured 5-6% of the largest logit
FAMILIES = [("awq", "qwen3", 1e-4), ("modelopt-nvfp4", "llama", 1e-4), ("fp8-block", "qwen3", 0.1),
            ("fp8-block", "qwen3_moe", 0.1), ("gptq-desc-act", "qwen3_moe", 1e-4)]


@pytest.mark.parametrize("layout, arch, tol", FAMILIES)
def test_other_checkpoint_families(layout, arch, tol, tmp_path):
    from ._build import write_checkpoint

    ref = write_checkpoint(arch, str(tmp_path), layout, seed=5)
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float32)
    assert len([m for m in model.modules() if isinstance(m, humming.nn.QuantLinear)]) == len(load_dir(tmp_path).modules)
    ids = torch.randint(0, 256, (2, 10))
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    err = (got - want).abs().max().item()
    assert err <= tol * want.abs().max().item() + 1e-5, f"{layout} {arch}: max error {err:.3g}"
    assert model.generate(ids[:1, :3], max_new_tokens=3, do_sample=False).shape == (1, 6)
