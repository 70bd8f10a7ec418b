"""CPU: a tiny transformers Qwen3 quantized and compressed by the real compressed-tensors library (its
apply_quantization_config, calculate_qparams and ModelCompressor), saved with the config.json quantization_config
the library writes, runs in transformers on humming layers (humming.transformers.from_pretrained): logits equal
those of the library's own model after decompression (which quantizes its activations as the scheme declares), for
weight-only int4 (W4A16), FP8 with dynamic per-token FP8 activations (FP8_DYNAMIC) and int8 with dynamic per-token
int8 activations (W8A8: the library's fake quantization scales a token by amax / 127.5, humming's kernels, as
vLLM's, by amax / 127)."""
from __future__ import annotations

import pytest
import torch

ct = pytest.importorskip("compressed_tensors")
pytest.importorskip("transformers")

from compressed_tensors.compressors import ModelCompressor  # noqa: E402
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationConfig,
    QuantizationStatus,
    preset_name_to_scheme,
)

import humming  # noqa: E402
from tests.checkpoints.test_ct_library import calibrate  # noqa: E402

from ._build import tiny_config  # noqa: E402


def compressed_checkpoint(preset: str, path) -> torch.nn.Module:
    """The library's model of a tiny Qwen3 compressed into ``path``, decompressed again (its forward quantizes the
    activations as the scheme says)."""
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(5)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("qwen3"), dtype=torch.float32).eval()
    config = QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(preset, ["Linear"])},
                                ignore=["lm_head"], quantization_status=QuantizationStatus.FROZEN)
    calibrate(model, config)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    path.mkdir(exist_ok=True)
    save_file(state, str(path / "model.safetensors"))
    model.config.save_pretrained(str(path))
    compressor.update_config(str(path))
    compressor.decompress_model(model)
    return model


@pytest.mark.parametrize("preset, scheme_act, tol", [("W4A16", None, 1e-5), ("FP8_DYNAMIC", "e4m3", 1e-5),
                                                     ("W8A8", "int8", 0.03)])
def test_compressed_tensors_model(preset, scheme_act, tol, tmp_path):
    ref = compressed_checkpoint(preset, tmp_path)
    ckpt = humming.checkpoints.load_dir(tmp_path)
    assert ckpt.quant.method == "compressed-tensors" and len(ckpt.modules) == 14
    qw = ckpt["model.layers.0.mlp.down_proj"]
    assert qw.scheme.act == scheme_act  # the checkpoint's activation scheme, from its config
    model = humming.transformers.from_pretrained(tmp_path, dtype=torch.float32)
    ids = torch.randint(0, 256, (2, 10))
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
    assert (got - want).abs().max() <= tol * want.abs().max(), (got - want).abs().max()
    assert model.generate(ids[:1, :3], max_new_tokens=4, do_sample=False).shape == (1, 7)
