"""transformers models on humming kernels, from the quantized checkpoints users have (the ``transformers`` extra).

    model = humming.transformers.from_pretrained("path/to/Qwen3-8B-AWQ", dtype=torch.float16, device="cuda")
    out = model.generate(input_ids, max_new_tokens=32)

The model is built from the directory's config.json by transformers (its own modeling code; the quantization_config
left out, so transformers' own quantizers do not run), its linear and mixture-of-experts modules replaced by humming's
(humming.nn.load_quantized) and every other tensor loaded from the checkpoint. Which checkpoint families and
architectures were run where: docs/models.md."""
from __future__ import annotations

import os

import torch

from humming.errors import SchemeError

__all__ = ["from_pretrained", "model_from_config"]


def _transformers():
    try:
        import transformers
    except ImportError:
        raise SchemeError("humming.transformers needs the transformers package (pip install 'humming[transformers]')") \
            from None
    return transformers


def model_from_config(config, dtype: torch.dtype = torch.bfloat16) -> torch.nn.Module:
    """A transformers causal LM of ``config`` (a PretrainedConfig) with uninitialised weights in ``dtype``."""
    transformers = _transformers()
    config = type(config).from_dict({k: v for k, v in config.to_dict().items() if k != "quantization_config"})
    with torch.device("cpu"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def from_pretrained(path: str | os.PathLike, *, dtype: torch.dtype = torch.bfloat16,
                    device: str | torch.device | None = None, strict: bool = True) -> torch.nn.Module:
    """The quantized checkpoint directory ``path`` as a transformers causal LM running humming's kernels, in
    ``dtype``, moved to ``device`` (CUDA runs the kernels; CPU the reference)."""
    from humming.checkpoints.directory import load_dir
    from humming.nn_model import load_quantized

    transformers = _transformers()
    ckpt = load_dir(path)
    config = transformers.AutoConfig.from_pretrained(os.fspath(path))
    model = model_from_config(config, dtype)
    load_quantized(model, ckpt, strict=strict)
    if device is not None:
        model.to(device)
    return model
