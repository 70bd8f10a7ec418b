"""torchao's MX and NVFP4 weight tensors imported by humming.checkpoints.from_torchao, checked against torchao itself:
weights quantized by torchao (``MXTensor.to_mx``, ``NVFP4Tensor.to_nvfp4``), imported from their fields, and
``qw.dequantize()`` compared with torchao's own ``dequantize``.

MX: bit for bit (each value is one code times one power of two). NVFP4 with a per-tensor scale: torchao multiplies
the e4m3 scale by the per-tensor scale first (one fp32 rounding), then by the code (a second); humming multiplies
code by e4m3 scale (exact) and then by the per-tensor scale (one rounding), so the two may differ by one fp32 ulp."""
from __future__ import annotations

import warnings

import pytest
import torch

torchao = pytest.importorskip("torchao")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

import humming  # noqa: E402
from humming.checkpoints import from_torchao  # noqa: E402
from humming.errors import SchemeError, ShapeError  # noqa: E402

ELEMENTS = {"mxfp4": torch.float4_e2m1fn_x2, "mxfp6-e2m3": DTYPE_FP6_E2M3, "mxfp6-e3m2": DTYPE_FP6_E3M2,
            "mxfp8-e4m3": torch.float8_e4m3fn, "mxfp8-e5m2": torch.float8_e5m2}


def _weight(seed: int, n: int = 192, k: int = 512) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # rows of very different magnitudes: the per-block exponents span a wide range
    return torch.randn(n, k, generator=g) * torch.logspace(-3, 3, n).unsqueeze(1)


@pytest.mark.parametrize("name", list(ELEMENTS))
def test_mx_tensor_bit_exact(name):
    t = MXTensor.to_mx(_weight(len(name)), ELEMENTS[name], 32)
    qw = from_torchao(t)
    assert qw.shape == (192, 512) and qw.scheme.weight_scale.group_size == 32
    assert torch.equal(qw.dequantize(torch.float32), t.dequantize(torch.float32))


@pytest.mark.parametrize("per_tensor_scale", [None, 0.37, 1e-3])
def test_nvfp4_tensor(per_tensor_scale):
    w = _weight(7)
    pts = None if per_tensor_scale is None else torch.tensor(per_tensor_scale)
    t = NVFP4Tensor.to_nvfp4(w, per_tensor_scale=pts)
    qw = from_torchao(t)
    ours, theirs = qw.dequantize(torch.float32), t.dequantize(torch.float32)
    if pts is None:
        assert torch.equal(ours, theirs)
    else:  # one fp32 rounding in a different place (module docstring)
        ulp = torch.finfo(torch.float32).eps * theirs.abs()
        assert ((ours - theirs).abs() <= ulp).all()
        assert (ours != theirs).float().mean() < 0.5


def test_imported_weight_runs_the_reference_gemm():
    t = MXTensor.to_mx(_weight(3, 128, 256), torch.float4_e2m1fn_x2, 32)
    qw = from_torchao(t)
    x = torch.randn(4, 256)
    assert torch.allclose(humming.reference_gemm(x, qw, out_dtype=torch.float32),
                          x @ t.dequantize(torch.float32).T, rtol=1e-5, atol=1e-3)


def test_refusals_are_named():
    with pytest.raises(SchemeError, match="MXTensor or NVFP4Tensor, got Tensor"):
        from_torchao(torch.zeros(4, 4))
    t = NVFP4Tensor.to_nvfp4(_weight(1, 128, 64), is_swizzled_scales=True)
    with pytest.raises(ShapeError, match="swizzled for cuBLAS"):
        from_torchao(t)
