"""Randomized GEMMs on the GPU (tests/random_cases.py: a fixed seed list, so a failure reproduces with its seed):
schemes x N x K (odd multiples of 16 among them: padded weights) x M (0 included) x f16/bf16 x bias, on fresh random
data into NaN-poisoned outputs, against humming.reference_gemm. Zero wrong results and zero exceptions."""
import pytest
import torch

import humming
from tests.random_cases import SEEDS, case

from .conftest import rel_error

pytestmark = pytest.mark.gpu
_DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}


@pytest.mark.parametrize("seed", SEEDS)
def test_random_gemm(seed):
    c = case(seed)
    dtype = _DTYPES[c.dtype]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(c.n, c.k, device="cuda", generator=gen) * 0.05
    bias = torch.randn(c.n, device="cuda", generator=gen).to(dtype) if c.bias else None
    qw = humming.quantize(w, c.scheme)
    x = torch.randn(c.m, c.k, device="cuda", generator=gen).to(dtype)
    y = humming.gemm(x, qw, bias=bias)
    torch.cuda.synchronize()
    assert y.shape == (c.m, c.n) and y.dtype == dtype, f"{c}: output {tuple(y.shape)} {y.dtype}"
    if c.m == 0:
        return
    assert not torch.isnan(y).any(), f"{c}: NaN in the output (unwritten or wrong)"
    ref = humming.reference_gemm(x, qw, bias=bias, out_dtype=torch.float32)
    err = rel_error(y, ref)
    assert err <= (1e-2 if dtype == torch.bfloat16 else 5e-3), f"{c}: relative error {err:.2e}"
