"""humming.plan, humming.gemm, humming.quantize and humming.nn.QuantLinear refuse arguments they cannot run with a
named error (ShapeError / SchemeError) whose suggested fix works; quantization that loses whole groups to zero
warns once with the count. CPU only (plans against a named profile, gemm through the reference)."""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
import torch

import humming
from humming.core.quant import arguments
from humming.core.quant.group_checks import LostGroupsWarning
from humming.errors import SchemeError, ShapeError

PROFILE = "nvidia-h100"


@pytest.fixture(scope="module")
def qw():
    torch.manual_seed(0)
    return humming.quantize(torch.randn(256, 512), "w4a16")


# ------------------------------------------------------------------------------------------------ plan
@pytest.mark.parametrize("bad, fixed", [(1.5, 2), ("16", 16), (16.0, 16), (" 32 ", 32)])
def test_plan_non_int_sizes_name_a_fix_that_works(bad, fixed):
    with pytest.raises(ShapeError, match=r"M must be an int") as e:
        humming.plan("w4a16", bad, 256, 512, profile=PROFILE)
    hint = int(re.search(r"pass M=(\d+)", str(e.value)).group(1))
    assert hint == fixed
    assert humming.plan("w4a16", hint, 256, 512, profile=PROFILE).kernel_name


@pytest.mark.parametrize("bad", [None, True, False, [16], object()])
def test_plan_refuses_other_types(bad):
    with pytest.raises(ShapeError, match=r"M must be an int"):
        humming.plan("w4a16", bad, 256, 512, profile=PROFILE)


@pytest.mark.parametrize("m, n, k, name", [(0, 256, 512, "M"), (-1, 256, 512, "M"), (16, 0, 512, "N"),
                                           (16, -64, 512, "N"), (16, 256, 0, "K"), (16, 256, -128, "K"),
                                           (1024, 0, 4096, "N")])
def test_plan_refuses_sizes_below_one(m, n, k, name):
    with pytest.raises(ShapeError, match=rf"{name} must be at least 1"):
        humming.plan("w4a16", m, n, k, profile=PROFILE)


def test_plan_fp8_with_n_zero_is_a_named_error_not_zero_division():
    with pytest.raises(ShapeError, match="N must be at least 1"):
        humming.plan("w4a8-fp8", 1024, 0, 4096, profile=PROFILE)


@pytest.mark.parametrize("m", [2**31, 2**40])
def test_plan_refuses_m_beyond_a_c_int(m):
    with pytest.raises(ShapeError, match=r"32-bit C int.*split x"):
        humming.plan("w4a16", m, 256, 512, profile=PROFILE)
    assert humming.plan("w4a16", 2**31 - 1, 256, 512, profile=PROFILE).kernel_name


def test_plan_takes_numpy_and_tensor_ints():
    p = humming.plan("w4a16", np.int64(16), np.int32(256), torch.tensor(512), profile=PROFILE)
    assert p.kernel_name == humming.plan("w4a16", 16, 256, 512, profile=PROFILE).kernel_name


@pytest.mark.parametrize("bad", [0, -2, -128, 1.5, True])
def test_plan_refuses_bad_group_sizes(bad):
    with pytest.raises(SchemeError, match="group_size must be a positive int") as e:
        humming.plan("w4a16", 16, 256, 512, profile=PROFILE, group_size=bad)
    g = int(re.search(r"pass group_size=(\d+)", str(e.value)).group(1))
    assert humming.plan("w4a16", 16, 256, 512, profile=PROFILE, group_size=g).kernel_name


def test_gptq_minus_one_means_per_channel():
    assert humming.quantize(torch.randn(64, 320), "w4a16", group_size=-1).scales.shape == (64, 1)
    assert humming.plan("w4a16", 16, 256, 512, profile=PROFILE, group_size=-1).layout.scale_group in (0, 512)


def test_gemm_rows_beyond_a_c_int_are_refused():
    arguments.rows(arguments.MAX_DIM)
    with pytest.raises(ShapeError, match="32-bit C int"):
        arguments.rows(arguments.MAX_DIM + 1)


# ------------------------------------------------------------------------------------------------ gemm
def test_gemm_refuses_a_0d_x(qw):
    with pytest.raises(ShapeError, match="0-d tensor; pass x.reshape"):
        humming.gemm(torch.tensor(1.0), qw)


def test_gemm_refuses_a_0d_x_on_the_prepared_path(qw):
    """Once a (weight, dtype, device) is prepared only cheap checks run; a 0-d x is still a named error."""
    fake = humming.quantize(torch.randn(64, 128), "w4a16")
    fake.__dict__["_humming_prepared"] = {(torch.float32, torch.device("cpu"), None, None): 0}
    with pytest.raises(ShapeError, match="0-d tensor"):
        humming.gemm(torch.tensor(1.0), fake)
    with pytest.raises(ShapeError, match="expects K=128"):
        humming.gemm(torch.randn(2, 64), fake)


def test_gemm_refuses_a_tensor_as_the_weight():
    with pytest.raises(ShapeError, match=r"QuantizedWeight, got torch.Tensor; quantize it first"):
        humming.gemm(torch.randn(4, 512), torch.randn(256, 512))


@pytest.mark.parametrize("weight", [None, "w4a16", 3])
def test_gemm_refuses_other_weights(weight):
    with pytest.raises(ShapeError, match="QuantizedWeight"):
        humming.gemm(torch.randn(4, 512), weight)


def test_gemm_numpy_x_names_the_conversion_and_it_works(qw):
    x = torch.randn(4, 512)
    with pytest.raises(ShapeError, match=r"numpy.ndarray; pass torch.from_numpy\(x\)"):
        humming.gemm(x.numpy(), qw)
    assert humming.gemm(torch.from_numpy(x.numpy()), qw).shape == (4, 256)


@pytest.mark.parametrize("x", [None, [1.0, 2.0], 1.0])
def test_gemm_refuses_non_tensor_x(qw, x):
    with pytest.raises(ShapeError, match="x must be a torch.Tensor"):
        humming.gemm(x, qw)


# ------------------------------------------------------------------------------------------------ quantize
@pytest.mark.parametrize("bad", [0, -2, -128, 1.5, True, "128"])
def test_quantize_refuses_bad_group_sizes_with_a_fix_that_works(bad):
    w = torch.randn(64, 320)
    with pytest.raises(SchemeError, match="group_size must be a positive int") as e:
        humming.quantize(w, "w4a16", group_size=bad)
    msg = str(e.value)
    g = int(re.search(r"pass group_size=(\d+)", msg).group(1))
    assert humming.quantize(w, "w4a16", group_size=g).scales.shape == (64, 320 // g)
    scheme = re.search(r"scheme='([^']+)'", msg).group(1)
    assert humming.quantize(w, scheme).scales.shape == (64, 1)


def test_k_not_divisible_suggests_fixes_that_work():
    w = torch.randn(64, 320)
    with pytest.raises(ShapeError, match="does not divide K=320") as e:
        humming.quantize(w, "w4a16")
    msg = str(e.value)
    assert "group_size=None" not in msg
    g = int(re.search(r"pass group_size=(\d+)", msg).group(1))
    assert 320 % g == 0 and humming.quantize(w, "w4a16", group_size=g).group_size == g
    scheme = re.search(r"scheme='([^']+)'", msg).group(1)
    assert humming.quantize(w, scheme).scales.shape == (64, 1)


def test_weights_lost_to_zero_warn_once_with_the_count():
    w = torch.randn(64, 256)
    w[:8] = 1e-30  # rows 0..7: 8 rows x 2 groups of 128 far below the f16 scales' smallest step
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        humming.quantize(w, "w4a16")
    lost = [c for c in caught if issubclass(c.category, LostGroupsWarning)]
    assert len(lost) == 1 and "16 of 128 groups" in str(lost[0].message)
    scheme = re.search(r"scheme='([^']+)'", str(lost[0].message)).group(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LostGroupsWarning)
        qw = humming.quantize(w, scheme)  # the suggested f32 scales keep them
    assert bool((qw.dequantize()[:8] != 0).all())


@pytest.mark.parametrize("scheme", humming.schemes.names())
def test_no_warning_for_ordinary_or_all_zero_weights(scheme):
    w = torch.randn(64, 256)
    w[:4] = 0.0  # groups that were zero already lose nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error", LostGroupsWarning)
        humming.quantize(w, scheme)


# ------------------------------------------------------------------------------------------------ layers
def test_quant_linear_refuses_a_tensor_weight():
    with pytest.raises(ShapeError, match="QuantLinear takes a humming QuantizedWeight"):
        humming.nn.QuantLinear(torch.randn(256, 512))


def test_quant_linear_refuses_expert_stacked_weights():
    stacked = humming.quantize(torch.randn(2, 64, 128), "w4a16")
    with pytest.raises(ShapeError, match="experts"):
        humming.nn.QuantLinear(stacked)


def test_quant_linear_forward_refuses_numpy(qw):
    layer = humming.nn.QuantLinear(qw)
    x = torch.randn(3, 512)
    with pytest.raises(ShapeError, match=r"torch.from_numpy\(x\)"):
        layer(x.numpy())
    with pytest.raises(ShapeError, match="0-d tensor"):
        layer(torch.tensor(1.0))
    assert layer(x).shape == (3, 256)


def test_quant_linear_from_linear_refuses_other_modules():
    with pytest.raises(ShapeError, match="torch.nn.Linear"):
        humming.nn.QuantLinear.from_linear(torch.randn(8, 128), "w4a16")
    with pytest.raises(SchemeError, match="group_size must be a positive int"):
        humming.nn.QuantLinear.from_linear(torch.nn.Linear(128, 8), "w4a16", group_size=0)


def test_warmup_refuses_bad_ms_before_preparing(qw):
    from humming.api import warmup

    with pytest.raises(ShapeError, match="M must be at least 1"):
        warmup(qw, torch.float16, [16, 0])
    with pytest.raises(ShapeError, match="M must be an int"):
        warmup(qw, torch.float16, [1.5])
    with pytest.raises(ShapeError, match="QuantizedWeight"):
        warmup(torch.randn(8, 8), torch.float16, [16])


def test_the_warning_counts_groups_that_really_dequantize_to_zero():
    """One bit with integer zero points has the levels 0 and scale: a group whose values all round to the zero code
    is lost however large its scale; the warning's count is the dequantized weight's."""
    torch.manual_seed(0)
    w = torch.randn(256, 512) * 0.05
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qw = humming.quantize(w, "w2a16-zp[weight=uint1]")
    lost = [c for c in caught if issubclass(c.category, LostGroupsWarning)]
    zero_groups = int((qw.dequantize().reshape(256, -1, qw.group_size) == 0).all(-1).sum())
    if zero_groups:
        assert len(lost) == 1 and f"{zero_groups} of {256 * 512 // qw.group_size} groups" in str(lost[0].message)
    else:
        assert not lost
