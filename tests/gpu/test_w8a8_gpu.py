"""W8A8 on the 8-bit mma.sync kernel, against the reference (activation quantization included). Planned for
the profiles whose path it is (Ada, Ampere, Turing, B300's legacy INT8, sm_120) and run on this GPU."""
import pytest
import torch

import humming

from .conftest import rel_error

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("native_8bit")]  # the 8-bit kernels, not widened

CASES = [("nvidia-l40s", "w8a8-int8"), ("nvidia-l40s", "w8a8-fp8"), ("nvidia-l40s", "w8a8-fp8-tensor"),
         ("nvidia-a100", "w8a8-int8"), ("nvidia-t4", "w8a8-int8"), ("nvidia-b300", "w8a8-int8"),
         ("nvidia-rtx-5090", "w8a8-fp8"), ("nvidia-a100", "w4a8-int8"), ("nvidia-t4", "w4a8-int8"),
         ("nvidia-b300", "w4a8-int8"), ("nvidia-l40s", "w4a8-int8[group_size=32]"), ("nvidia-l40s", "w4a8-fp8"),
         ("nvidia-l40s", "w4a8-mxfp4"), ("nvidia-rtx-5090", "w4a8-fp8"),
         (None, "w8a8-int8"), (None, "w8a8-fp8"), (None, "w4a8-int8"), (None, "w4a8-fp8"), (None, "w4a8-mxfp4"),
         (None, "w4a8-int8[act_order=true]"),
         ("nvidia-l40s", "w8a8-fp8-block"), ("nvidia-rtx-5090", "w8a8-fp8-block"), ("nvidia-b200", "w8a8-fp8-block"),
         (None, "w8a8-fp8-block")]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("profile,scheme", CASES)
def test_w8a8(profile, scheme, dtype):
    if dtype == torch.bfloat16 and profile == "nvidia-t4":
        pytest.skip("the T4 profile declares no bf16")
    n, k = 512, 2048
    bias = torch.randn(n, device="cuda", dtype=dtype)
    qw = humming.quantize(torch.randn(n, k, device="cuda") * 0.05, humming.schemes.get(scheme), bias=bias)
    for m in (1, 7, 33, 200):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        out = humming.gemm(x, qw, profile=profile)
        torch.cuda.synchronize()
        assert out.shape == (m, n) and out.dtype == dtype and not torch.isnan(out).any()
        ref = humming.reference_gemm(x, qw, out_dtype=torch.float32)
        err = rel_error(out, ref)
        assert err <= 5e-3, f"{profile} {scheme} M={m}: relative error {err:.2e}"
