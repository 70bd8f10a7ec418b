"""Activation quantization on the GPU, bit for bit what ``humming.quantize_activation`` computes: see
``humming.core.actquant.runtime``."""
from humming.core.actquant.runtime import (  # noqa: F401  (the public names)
    activation_quant_source,
    plan_activation_quant,
    quantize_activation_cuda,
)

__all__ = ["quantize_activation_cuda", "plan_activation_quant", "activation_quant_source"]
