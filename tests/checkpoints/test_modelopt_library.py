"""ModelOpt's own NVFP4 and FP8 weight quantization (``NVFP4QTensor.quantize`` / ``FP8QTensor.quantize``, the
tensors its HF export writes as weight / weight_scale / weight_scale_2) imported by humming.checkpoints.modelopt and
checked against ModelOpt's ``dequantize``.

FP8: bit for bit. NVFP4: ModelOpt multiplies the e4m3 block scale by the per-tensor scale first (one fp32 rounding),
then by the code (a second); humming multiplies code by block scale (exact) and then by the per-tensor scale (one
rounding), so the two may differ by one fp32 ulp; the codes and scales themselves are ModelOpt's."""
from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("modelopt")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from modelopt.torch.quantization.qtensor import FP8QTensor, NVFP4QTensor

from humming.checkpoints import modelopt  # noqa: E402


def _weight(seed: int, n: int = 192, k: int = 512) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * torch.logspace(-3, 3, n).unsqueeze(1)  # rows of very different sizes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nvfp4_within_one_ulp_of_modelopt(seed):
    codes, block_scale, tensor_scale = NVFP4QTensor.quantize(_weight(seed), 16)
    want = codes.dequantize(dtype=torch.float32, scale=block_scale, double_scale=tensor_scale, block_sizes={-1: 16})
    qw = modelopt.from_nvfp4(codes._quantized_data, block_scale, tensor_scale.float().reshape(()))
    assert qw.scheme.name.startswith("w4a16-nvfp4") and qw.shape == (192, 512)
    got = qw.dequantize(torch.float32)
    assert torch.equal(got == 0, want == 0)
    ulp = torch.finfo(torch.float32).eps
    assert ((got - want).abs() <= want.abs() * ulp).all()


def test_nvfp4_with_input_scale_is_w4a4():
    codes, block_scale, tensor_scale = NVFP4QTensor.quantize(_weight(5), 16)
    qw = modelopt.from_nvfp4(codes._quantized_data, block_scale, tensor_scale.float().reshape(()),
                             input_scale=torch.tensor(0.02))
    assert qw.scheme.act is not None and float(qw.input_scale) == pytest.approx(0.02)


@pytest.mark.parametrize("seed", [0, 3])
def test_fp8_bit_exact(seed):
    codes, scale = FP8QTensor.quantize(_weight(seed))
    want = codes.dequantize(dtype=torch.float32, scale=scale)
    qw = modelopt.from_fp8(codes._quantized_data, scale.float())
    assert torch.equal(qw.dequantize(torch.float32), want)
