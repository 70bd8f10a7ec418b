"""torch modules backed by humming kernels: QuantLinear (humming.nn_linear), QuantMoE (humming.nn_moe), and whole
models: quantize_model / load_quantized (humming.nn_model)."""
from humming.nn_linear import QuantLinear
from humming.nn_model import load_quantized, quantize_model
from humming.nn_moe import QuantMoE

__all__ = ["QuantLinear", "QuantMoE", "quantize_model", "load_quantized"]
