"""humming: quantized GEMM kernels for LLM inference, generated for any device a YAML profile describes.

Public API (imported lazily so that `import humming` stays cheap and works without a GPU):
  humming.device.info()                 what this device (or a named profile) can do, and why
  humming.quantize / QuantizedWeight    reference quantization (see humming.schemes, humming.formats)
  humming.reference_gemm                the oracle every kernel is checked against
  humming.plan / humming.gemm           plan, compile and run a kernel for the current device
  humming.moe_gemm / grouped_gemm / masked_gemm    mixture-of-experts GEMMs on expert-stacked weights
  humming.GemmOptions                   numerics a caller chooses (fast FP8 accumulation, W4A8 widening, ...)
  humming.tuning.override({...})        tuning knobs (kernel variants, thresholds) for an experiment
  humming.nn.QuantLinear / QuantMoE     drop-in torch modules; quantize_model / load_quantized for whole models
  humming.checkpoints.load_dir(path)    a quantized checkpoint directory as module name -> QuantizedWeight
  humming.transformers.from_pretrained  a transformers model of a quantized checkpoint on humming's kernels
"""
from __future__ import annotations

import importlib
from typing import Any

from humming.errors import (  # noqa: F401  (re-exported)
    CompileError,
    HummingError,
    LaunchError,
    ProfileError,
    SchemeError,
    ShapeError,
    UnsupportedOnDevice,
)

__version__ = "0.1.0"

# name -> (module, attribute or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "device": ("humming.device", None),
    "formats": ("humming.formats", None),
    "schemes": ("humming.schemes", None),
    "checkpoints": ("humming.checkpoints", None),
    "nn": ("humming.nn", None),
    "transformers": ("humming.transformers", None),
    "Scheme": ("humming.core.quant.schemes", "Scheme"),
    "QuantizedWeight": ("humming.core.quant.quantize", "QuantizedWeight"),
    "quantize": ("humming.core.quant.quantize", "quantize"),
    "quantize_activation": ("humming.core.quant.quantize", "quantize_activation"),
    "quantize_activation_cuda": ("humming.actquant", "quantize_activation_cuda"),
    "reference_gemm": ("humming.core.quant.reference", "reference_gemm"),
    "plan": ("humming.api", "plan"),
    "gemm": ("humming.api", "gemm"),
    "moe": ("humming.moe", None),
    "moe_gemm": ("humming.moe", "moe_gemm"),
    "grouped_gemm": ("humming.moe", "grouped_gemm"),
    "masked_gemm": ("humming.moe", "masked_gemm"),
    "GemmOptions": ("humming.options", "GemmOptions"),
    "tuning": ("humming.core.tuning.knobs", None),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'humming' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))
