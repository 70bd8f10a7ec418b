"""torch modules backed by humming kernels: QuantLinear (humming.nn_linear), QuantMoE (humming.nn_moe), whole models:
quantize_model / load_quantized (humming.nn_model), and the tensor- / expert-parallel layers over torch.distributed
(humming.nn_parallel)."""
from humming.nn_linear import QuantLinear
from humming.nn_model import load_quantized, quantize_model
from humming.nn_moe import QuantMoE
from humming.nn_parallel import ColumnParallelQuantLinear, ParallelQuantMoE, RowParallelQuantLinear

__all__ = ["QuantLinear", "QuantMoE", "quantize_model", "load_quantized", "ColumnParallelQuantLinear",
           "RowParallelQuantLinear", "ParallelQuantMoE"]
