"""Activation quantization writing the codes as their exact f16/bf16 values (the widened path of
humming.core.common.act_widen): the code-value formulas against torch's decoders for every byte, the kernels compile for
every spelling (hardware and software encoders), and the refusals."""
import pytest
import torch

from humming.actquant import quantize_activation_cuda
from humming.api import resolve_profile
from humming.core.actquant.generator import WIDE_CODE_VALUES, actquant_source, plan_actquant
from humming.core.actquant.runtime import _spelling
from humming.core.compile.compiler import compile_cuda
from humming.core.quant import schemes
from humming.core.routes.widened_ranges import CODE_DTYPES
from humming.errors import ShapeError, UnsupportedOnDevice


def _code_value(fmt: str, c: torch.Tensor) -> torch.Tensor:
    """WIDE_CODE_VALUES[fmt] evaluated in torch (the same bit moves, f16 arithmetic where the C uses f16_to_f32)."""
    if fmt == "int8":
        return ((c << 24).to(torch.int32) >> 24).to(torch.float32)
    if fmt == "e4m3":
        bits = ((c & 0x7F) << 7) | ((c & 0x80) << 8)
        return bits.to(torch.int16).view(torch.float16).to(torch.float32) * 256.0
    return (c << 8).to(torch.int16).view(torch.float16).to(torch.float32)


@pytest.mark.parametrize("fmt", sorted(WIDE_CODE_VALUES))
def test_code_value_formulas_are_exact_for_every_byte(fmt):
    c = torch.arange(256, dtype=torch.int32)
    want = c.to(torch.uint8).view(CODE_DTYPES[fmt]).to(torch.float32)
    got = _code_value(fmt, c)
    finite = torch.isfinite(want)
    assert torch.equal(got[finite], want[finite])
    for dtype in (torch.float16, torch.bfloat16):  # and the 16-bit types hold them
        assert torch.equal(want[finite].to(dtype).to(torch.float32), want[finite])


@pytest.mark.parametrize("profile", ["nvidia-h200", "nvidia-t4", "thead-zhenwu-810e"])
def test_wide_kernels_compile(profile):
    caps = resolve_profile(profile)
    arch = "sm_80" if profile == "thead-zhenwu-810e" else caps.target.arch
    for name in ("w8a8-int8", "w8a8-fp8", "w8a8-fp8-tensor"):
        for k, wide in ((8192, "f16"), (28672, "bf16"), (7, "f16")):
            p = plan_actquant(schemes.get(name), "bf16", k, wide=wide)
            src = actquant_source(p, _spelling(caps)(p.act, p.scale_format, caps))
            assert "uint16_t* __restrict__ codes" in src and "aq_code_value" in src and p.kernel_name.endswith(wide)
            assert any("exact" in r for r in p.reasons)
            compile_cuda(src, list(p.kernel_names), arch)
    narrow = plan_actquant(schemes.get("w8a8-fp8"), "f16", 8192)
    assert "unsigned char* __restrict__ codes" in actquant_source(narrow, _spelling(caps)(narrow.act, "f32", caps))


def test_wide_refusals():
    with pytest.raises(UnsupportedOnDevice, match="e2m1"):
        plan_actquant(schemes.get("w4a4-nvfp4"), "f16", 4096, wide="f16")
    with pytest.raises(ShapeError, match="codes_as"):
        quantize_activation_cuda(torch.randn(2, 64), "w8a8-fp8", codes_as=torch.float32)


def test_cpu_fallback_widens_the_reference():
    x = torch.randn(3, 64)
    qa = quantize_activation_cuda(x, "w8a8-fp8", codes_as=torch.bfloat16)
    ref = quantize_activation_cuda(x, "w8a8-fp8")
    assert qa.codes.dtype == torch.bfloat16
    assert torch.equal(qa.codes.float(), ref.codes.view(torch.float8_e4m3fn).float())
