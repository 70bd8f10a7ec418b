"""Importers for the quantized checkpoints users bring: each returns a canonical
:class:`~humming.core.quant.quantize.QuantizedWeight` whose ``dequantize()`` equals the layout's documented formula.

==========================  ==================================================  ==========================
layout                      tensors under ``prefix``                            function
==========================  ==================================================  ==========================
``gptq`` / ``gptq_v2``      qweight, qzeros, scales[, g_idx, bias]              :func:`gptq.from_gptq`
``awq``                     qweight, qzeros, scales[, bias]                     :func:`awq.from_awq`
``compressed-tensors``      weight_packed, weight_scale[, weight_zero_point,    :mod:`compressed_tensors`
                            weight_g_idx, weight_shape, weight_global_scale,
                            input_global_scale] (pack-quantized, nvfp4, mxfp4,
                            mxfp6); or fp8/int8 ``weight`` (float-, int-,
                            naive-quantized, mxfp8 with E8M0 weight_scale)
``modelopt``                weight, weight_scale[, weight_scale_2, input_scale] :mod:`modelopt`
``mx``                      weight, weight_scale (E8M0)                         :func:`mx.from_mx`
``gpt-oss``                 blocks, scales                                      :func:`gpt_oss.from_gpt_oss`
``fp8-block`` (DeepSeek)    weight, weight_scale_inv (128x128 blocks)           :func:`fp8_block.from_fp8_block`
torchao tensors             an MXTensor / NVFP4Tensor object (qdata, scale)     :func:`torchao_tensors.from_torchao`
==========================  ==================================================  ==========================

Entry points::

    qw = humming.checkpoints.load_safetensors("model.safetensors", "model.layers.0.mlp.down_proj", layout="gptq",
                                              bits=4)
    qw = humming.checkpoints.import_tensors(state_dict, "model.layers.0.mlp.down_proj", layout="awq")

Mixture-of-experts layers import as one expert-stacked QuantizedWeight (``num_experts``, the layout in
:mod:`humming.core.quant.experts`). gpt-oss stores its experts stacked already; the other layouts store one linear
layer per expert, gathered by a prefix with ``{e}`` where the expert index goes (:mod:`humming.checkpoints.experts`)::

    gate = humming.checkpoints.load_experts(path, "model.layers.0.mlp.experts.{e}.gate_proj", layout="gptq")
    down = humming.checkpoints.import_experts(state_dict, "model.layers.3.mlp.experts.{e}.down_proj", "fp8-block")

Layout options are passed through (gptq: bits, group_size, sym; compressed-tensors: num_bits, group_size, block, format;
modelopt: quant_algo; mx: element_format; gpt-oss: expert, bias_name; fp8-block: block). ``activations="w4a8-fp8"``
(a preset) sets how activations are quantized (checkpoints store weights; the default keeps what the layout implies,
16-bit activations for weight-only layouts). Malformed tensors raise ShapeError, missing tensors and
unsupported options SchemeError, each naming the tensor and what was expected.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch

from humming.checkpoints import awq, compressed_tensors, fp8_block, gpt_oss, gptq, modelopt, mx
from humming.checkpoints.awq import from_awq
from humming.checkpoints.compressed_tensors import from_nvfp4 as from_compressed_tensors_nvfp4
from humming.checkpoints.compressed_tensors import from_pack_quantized
from humming.checkpoints.directory import Checkpoint, load_dir
from humming.checkpoints.experts import harmonize, name_pattern, resolve_experts, template_parts
from humming.checkpoints.fp8_block import from_fp8_block
from humming.checkpoints.gpt_oss import from_gpt_oss
from humming.checkpoints.gptq import from_gptq
from humming.checkpoints.modelopt import from_nvfp4 as from_modelopt_nvfp4
from humming.checkpoints.mx import from_mx
from humming.checkpoints.torchao_tensors import from_torchao
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import SchemeError

__all__ = [
    "LAYOUTS",
    "load_dir",
    "Checkpoint",
    "load_safetensors",
    "import_tensors",
    "import_experts",
    "load_experts",
    "read_safetensors",
    "from_gptq",
    "from_awq",
    "from_pack_quantized",
    "from_compressed_tensors_nvfp4",
    "from_modelopt_nvfp4",
    "from_mx",
    "from_torchao",
    "from_gpt_oss",
    "from_fp8_block",
    "gptq",
    "awq",
    "compressed_tensors",
    "modelopt",
    "mx",
    "gpt_oss",
    "fp8_block",
]

LAYOUTS: dict[str, Callable[..., QuantizedWeight]] = {
    "gptq": gptq.load,
    "gptq_v2": functools.partial(gptq.load, version=2),
    "awq": awq.load,
    "compressed-tensors": compressed_tensors.load,
    "modelopt": modelopt.load,
    "mx": mx.load,
    "gpt-oss": gpt_oss.load,
    "fp8-block": fp8_block.load,
}
_LAYOUT_ALIASES = {
    "gptq-v2": "gptq_v2", "gptqv2": "gptq_v2", "gptq_v1": "gptq", "autogptq": "gptq",
    "autoawq": "awq",
    "compressed_tensors": "compressed-tensors", "ct": "compressed-tensors", "llm-compressor": "compressed-tensors",
    "nvfp4-pack-quantized": "compressed-tensors", "pack-quantized": "compressed-tensors",
    "modelopt-nvfp4": "modelopt", "modelopt_nvfp4": "modelopt", "modelopt-fp8": "modelopt",
    "ocp-mx": "mx", "ocp_mx": "mx", "mxfp4": "mx", "mxfp6": "mx", "mxfp8": "mx",
    "gpt_oss": "gpt-oss", "gptoss": "gpt-oss",
    "fp8_block": "fp8-block", "block-fp8": "fp8-block", "deepseek": "fp8-block", "deepseek-fp8": "fp8-block",
    "deepseek-v3": "fp8-block", "finegrained-fp8": "fp8-block",
}
_MX_LAYOUT_FORMATS = {"mxfp4": "e2m1", "mxfp6": "e2m3", "mxfp8": "e4m3"}


def _resolve_layout(layout: str) -> tuple[str, dict]:
    key = layout.strip().lower()
    extra: dict = {}
    if key in _MX_LAYOUT_FORMATS:
        extra["element_format"] = _MX_LAYOUT_FORMATS[key]
    key = _LAYOUT_ALIASES.get(key, key)
    if key not in LAYOUTS:
        raise SchemeError(f"unknown checkpoint layout {layout!r}; use one of {', '.join(LAYOUTS)}")
    return key, extra


def import_tensors(tensors: Mapping[str, torch.Tensor], prefix: str, layout: str, *,
                   activations: str | None = None, **options) -> QuantizedWeight:
    """Import the layer ``prefix`` of ``layout`` from a mapping of tensor names to tensors."""
    key, extra = _resolve_layout(layout)
    extra.update(options)
    try:
        result = LAYOUTS[key](tensors, prefix, **extra)
    except TypeError as e:  # an option the layout does not take
        if "unexpected keyword" in str(e):
            raise SchemeError(f"layout {key!r}: {e}") from None
        raise
    return result if activations is None else result.with_activations(activations)


def import_experts(tensors: Mapping[str, torch.Tensor], prefix: str, layout: str, *,
                   experts: int | Sequence[int] | None = None, activations: str | None = None,
                   **options) -> QuantizedWeight:
    """Import one projection of a mixture-of-experts layer stored one linear layer per expert, as one expert-stacked
    QuantizedWeight. ``prefix`` has ``{e}`` where the expert index goes
    (``"model.layers.0.mlp.experts.{e}.gate_proj"``); ``experts``: how many (0..E-1) or which indices to stack
    (default: every expert present, which must be 0..E-1). Each expert is imported as :func:`import_tensors` would,
    the imports are given one scheme where they differ only in form (:func:`experts.harmonize`), then stacked."""
    ids = resolve_experts(tensors, prefix, experts)
    before, after = template_parts(prefix)
    dense = [import_tensors(tensors, f"{before}{e}{after}", layout, **options) for e in ids]
    stacked = QuantizedWeight.stack(harmonize(dense))
    return stacked if activations is None else stacked.with_activations(activations)


def _files(path: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    if isinstance(path, (str, os.PathLike)):
        p = os.fspath(path)
        if os.path.isdir(p):
            found = sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".safetensors"))
            if not found:
                raise SchemeError(f"no .safetensors file in directory {p}")
            return found
        if not os.path.exists(p):
            raise SchemeError(f"checkpoint file {p} does not exist")
        return [p]
    return [os.fspath(p) for p in path]


def read_safetensors(path, prefix: str = "", *, device: str | torch.device = "cpu",
                     keep: Callable[[str], object] | None = None) -> dict[str, torch.Tensor]:
    """Tensors whose names start with ``prefix`` (and pass ``keep``, when given) from a .safetensors file, a
    directory of shards, or a list of files (only those tensors are read)."""
    try:
        from safetensors import safe_open
    except ImportError:  # pragma: no cover - depends on the environment
        raise SchemeError("reading .safetensors files needs the 'safetensors' package (pip install safetensors)") \
            from None
    out: dict[str, torch.Tensor] = {}
    for f in _files(path):
        with safe_open(f, framework="pt", device=str(device)) as fh:
            for name in fh.keys():
                if name.startswith(prefix) and (keep is None or keep(name)):
                    out[name] = fh.get_tensor(name)
    return out


def load_safetensors(path, prefix: str, layout: str, *, device: str | torch.device = "cpu",
                     activations: str | None = None, **options) -> QuantizedWeight:
    """Read the layer ``prefix`` from safetensors file(s) and import it (see :func:`import_tensors`)."""
    tensors = read_safetensors(path, prefix, device=device)
    if not tensors:
        raise SchemeError(f"no tensor named {prefix}* in {path}")
    return import_tensors(tensors, prefix, layout, activations=activations, **options)


def load_experts(path, prefix: str, layout: str, *, experts: int | Sequence[int] | None = None,
                 device: str | torch.device = "cpu", activations: str | None = None, **options) -> QuantizedWeight:
    """Read one projection of a mixture-of-experts layer (``prefix`` with ``{e}``, see :func:`import_experts`) from
    safetensors file(s), only the tensors of that projection, and import it expert-stacked."""
    pattern = name_pattern(prefix)
    tensors = read_safetensors(path, template_parts(prefix)[0], device=device, keep=pattern.match)
    if not tensors:
        raise SchemeError(f"no tensor matches {prefix}* in {path}")
    return import_experts(tensors, prefix, layout, experts=experts, activations=activations, **options)
