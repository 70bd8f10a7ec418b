"""The checks at the API boundary (humming.core.quant.arguments): a bias of the wrong length, dtype or device, x and
the weights on different devices (x on the CPU never silently runs the reference for GPU weights), preparation
arguments, QuantLinear's bias and input, the MoE forms' weights; W4A8 / W8A8 weights whose N is no multiple of 64
named before packing; symmetric int1 and e0m3 weights refused with a scheme that works. CPU only: a second device
is the "meta" device, and CUDA devices appear as torch.device objects handed to the check functions."""
from __future__ import annotations

import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import humming
from humming import api
from humming.core.quant import arguments
from humming.core.quant.quantize import QuantizedWeight
from humming.errors import DeviceMismatchError, HummingError, SchemeError, ShapeError

META = torch.device("meta")


@pytest.fixture(scope="module")
def qw():
    torch.manual_seed(0)
    return humming.quantize(torch.randn(512, 256) * 0.05, "w4a16")


@pytest.fixture(scope="module")
def stacked():
    torch.manual_seed(1)
    return humming.quantize(torch.randn(4, 64, 128) * 0.05, "w4a16", group_size=32)


def _hot(n: int = 512, k: int = 256) -> QuantizedWeight:
    """A weight whose (float32, cpu) preparation is faked: gemm takes the per-call path (cheap checks only) and would
    reach the kernel's launch after them (handle -1: an error other than the checks' if it got there)."""
    fake = humming.quantize(torch.randn(n, k), "w4a16")
    fake.__dict__["_humming_prepared"] = {(torch.float32, torch.device("cpu"), None, None): -(10**9)}
    return fake


# ------------------------------------------------------------------------------------------------ bias
@pytest.mark.parametrize("first_call", [True, False], ids=["first-call", "prepared"])
def test_short_bias_is_refused_with_the_length(qw, first_call):
    """The issue: N=512 and a bias of 7 elements (the kernel would read past its end)."""
    w = qw if first_call else _hot()
    with pytest.raises(ShapeError, match=r"bias must be 1-D with N=512 elements.*got shape \(7,\)"):
        humming.gemm(torch.randn(3, 256), w, bias=torch.randn(7))


def test_bias_of_one_row_names_reshape_and_it_works(qw):
    b = torch.randn(1, 512)
    with pytest.raises(ShapeError, match=r"pass bias\.reshape\(-1\)"):
        humming.gemm(torch.randn(3, 256), qw, bias=b)
    x = torch.randn(3, 256)
    torch.testing.assert_close(humming.gemm(x, qw, bias=b.reshape(-1)), humming.reference_gemm(x, qw, bias=b[0]))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64, torch.bool])
@pytest.mark.parametrize("first_call", [True, False], ids=["first-call", "prepared"])
def test_bias_dtype(qw, dtype, first_call):
    w = qw if first_call else _hot()
    with pytest.raises(ShapeError, match=r"bias must be float16, bfloat16 or float32, got .*bias\.to\(x\.dtype\)"):
        humming.gemm(torch.randn(3, 256), w, bias=torch.zeros(512, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_bias_dtypes_taken(qw, dtype):
    x = torch.randn(2, 256)
    b = torch.randn(512).to(dtype)
    torch.testing.assert_close(humming.gemm(x, qw, bias=b), humming.reference_gemm(x, qw, bias=b))


@pytest.mark.parametrize("bad", [[0.0] * 512, 1.0, "bias"])
def test_bias_must_be_a_tensor(qw, bad):
    with pytest.raises(ShapeError, match="bias must be a torch.Tensor"):
        humming.gemm(torch.randn(3, 256), qw, bias=bad)


def test_numpy_bias_names_the_conversion(qw):
    with pytest.raises(ShapeError, match=r"torch\.from_numpy\(bias\)"):
        humming.gemm(torch.randn(3, 256), qw, bias=np.zeros(512, dtype=np.float32))


@pytest.mark.parametrize("first_call", [True, False], ids=["first-call", "prepared"])
def test_bias_on_another_device(qw, first_call):
    w = qw if first_call else _hot()
    with pytest.raises(DeviceMismatchError, match=r"bias is on meta, not on x's device \(cpu\); pass bias\.to\('cpu'\)"):
        humming.gemm(torch.randn(3, 256), w, bias=torch.zeros(512, device=META))


def test_non_contiguous_bias_is_copied_not_refused(qw):
    x = torch.randn(3, 256)
    b = torch.randn(512, 2)[:, 0]
    assert not b.is_contiguous()
    torch.testing.assert_close(humming.gemm(x, qw, bias=b), humming.gemm(x, qw, bias=b.contiguous()))


def test_gemm_prepared_checks_the_bias(qw):
    """gemm_prepared (QuantLinear's traced path) checks the bias against the prepared weight's N."""
    handle = api.prepared(qw, torch.float16, "cpu", profile="nvidia-h100")
    x = torch.randn(3, 256, dtype=torch.float16)
    with pytest.raises(ShapeError, match="N=512 elements"):
        api.gemm_prepared(x, handle, torch.randn(511, dtype=torch.float16))
    with pytest.raises(DeviceMismatchError):
        api.gemm_prepared(x, handle, torch.randn(512, dtype=torch.float16, device=META))


# ------------------------------------------------------------------------------------------------ devices
def test_x_and_weights_on_different_devices_never_run_the_reference(qw, monkeypatch):
    """x on the CPU with the weights elsewhere (here: meta) raises before the reference runs, and the reverse too."""
    from humming.core.quant import reference

    def boom(*a, **k):
        raise AssertionError("the reference ran")

    monkeypatch.setattr(reference, "reference_gemm", boom)
    with pytest.raises(DeviceMismatchError, match="x is on cpu, the weight on meta"):
        humming.gemm(torch.randn(3, 256), qw.to(META))
    with pytest.raises(DeviceMismatchError, match="x is on meta, the weight on cpu"):
        humming.gemm(torch.randn(3, 256, device=META), qw)


def test_device_mismatch_is_a_shape_error():
    assert issubclass(DeviceMismatchError, ShapeError) and issubclass(DeviceMismatchError, HummingError)


def _fake(device: str):
    """An object with a weight's or x's device (CUDA devices need no GPU as torch.device objects)."""
    dev = torch.device(device)
    return SimpleNamespace(packed=SimpleNamespace(device=dev), device=dev)


@pytest.mark.parametrize("x_dev, w_dev, fixes", [
    ("cpu", "cuda:0", [r"x\.to\('cuda:0'\) to run the kernel", r"qw\.to\('cpu'\)\) to run the reference"]),
    ("cuda:0", "cpu", [r"qw = qw\.to\('cuda:0'\)", r"module\.to\('cuda:0'\)"]),
    ("cuda:1", "cuda:0", [r"x\.to\('cuda:0'\)", r"qw\.to\('cuda:1'\)"]),
])
def test_weight_device_check_names_both_devices_and_the_fix(x_dev, w_dev, fixes):
    with pytest.raises(DeviceMismatchError, match=f"x is on {x_dev}, the weight on {w_dev}") as e:
        arguments.weight_device(_fake(w_dev), _fake(x_dev), "humming.gemm")
    for fix in fixes:
        assert re.search(fix, str(e.value)), (fix, str(e.value))
    arguments.weight_device(_fake(w_dev), _fake(w_dev), "humming.gemm")  # one device: no error


def test_same_device_check():
    x = torch.zeros(2, 4)
    arguments.same_device(x, "humming.moe_gemm", topk_ids=torch.zeros(2, 1), expert_map=None)
    with pytest.raises(ShapeError, match="topk_ids must be a torch.Tensor"):
        arguments.same_device(x, "humming.moe_gemm", topk_ids=[1, 2])
    with pytest.raises(DeviceMismatchError, match=r"topk_ids is on meta, not on x's device \(cpu\)"):
        arguments.same_device(x, "humming.moe_gemm", topk_ids=torch.zeros(2, 1, device=META))


def test_weight_with_tensors_on_two_devices(qw):
    mixed = QuantizedWeight(qw.scheme, qw.shape, qw.packed, qw.scales.to(META), validate=False)
    with pytest.raises(DeviceMismatchError, match=r"scales is on meta but its packed codes are on cpu.*qw\.to"):
        humming.gemm(torch.randn(2, 256), mixed)


def test_out_on_another_device(qw):
    with pytest.raises(DeviceMismatchError, match="out is on meta, x on cpu"):
        humming.gemm(torch.randn(2, 256), qw, out=torch.empty(2, 512, device=META))


# ------------------------------------------------------------------------------------------------ x's dtype
def test_integer_x_on_the_cpu_names_float(qw):
    with pytest.raises(ShapeError, match=r"x must be a float tensor, got torch.int64; pass x\.float\(\)"):
        humming.gemm(torch.ones(2, 256, dtype=torch.int64), qw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8])
def test_kernels_take_16_bit_activations(dtype):
    with pytest.raises(ShapeError, match=r"float16 or bfloat16 activations: pass x\.half\(\)"):
        arguments.kernel_activation(torch.zeros(2, 4, dtype=dtype), "humming.gemm")
    arguments.kernel_activation(torch.zeros(2, 4, dtype=torch.bfloat16), "humming.gemm")


# ------------------------------------------------------------------------------------------------ prepare
@pytest.mark.parametrize("dtype", [torch.float32, "float16", None])
def test_prepared_dtype(qw, dtype):
    with pytest.raises(ShapeError, match="torch.float16 or torch.bfloat16"):
        api.prepared(qw, dtype, "cpu", profile="nvidia-h100")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", 1.5, object()])
def test_prepared_device(qw, device):
    with pytest.raises(ShapeError, match="device must be a torch.device"):
        api.prepared(qw, torch.float16, device, profile="nvidia-h100")


def test_prepared_weight_types(qw, stacked):
    with pytest.raises(ShapeError, match="QuantizedWeight"):
        api.prepared(torch.randn(8, 8), torch.float16, "cpu")
    with pytest.raises(ShapeError, match="experts"):
        api.prepared(stacked, torch.float16, "cpu")
    with pytest.raises(ShapeError, match="torch.float16 or torch.bfloat16"):
        humming.moe.prepared(stacked, torch.float32, "cpu")
    with pytest.raises(ShapeError, match="device must be"):
        humming.moe.prepared(stacked, torch.float16, "gpu")
    with pytest.raises(ShapeError, match="QuantizedWeight"):
        humming.moe.prepared(torch.randn(2, 8, 8), torch.float16, "cpu")


# ------------------------------------------------------------------------------------------------ W4A8 / W8A8 N
@pytest.mark.parametrize("scheme", ["w4a8-int8", "w4a8-fp8", "w4a8-mxfp4", "w8a8-int8", "w8a8-fp8", "w4a16"])
def test_n_not_a_multiple_of_16_is_named_before_packing(scheme):
    """The issue: W4A8 with N=1000 failed inside the packing with a torch view error; every dense scheme now names the
    fix when the weight is prepared. N=1008 (a multiple of 16) is padded once and runs on the tile kernel, whose
    kernel stores the caller's N."""
    qw = humming.quantize(torch.randn(1000, 512) * 0.05, scheme)
    with pytest.raises(ShapeError, match="N=1000 is not a multiple of 16: .* pad the weight's output features to a "
                                         "multiple of 16"):
        api.prepared(qw, torch.float16, "cpu", profile="nvidia-h100")
    padded = humming.quantize(torch.randn(1008, 512) * 0.05, scheme)
    plan = api.plan_for(api.prepared(padded, torch.float16, "cpu", profile="nvidia-h100"), 16)
    assert (plan.n, plan.n_out, plan.k, plan.k_act) == (1024, 1008, 512, 512)
    assert plan.kernel_name.startswith("hm_wna16_tile_") and "_o1008a512_" in plan.kernel_name
    assert plan.reasons[0].startswith("padded once at prepare (N 1008 -> 1024)") or any(
        r.startswith("padded once at prepare (N 1008 -> 1024)") for r in plan.reasons)


# ------------------------------------------------------------------------------------------------ QuantLinear
def test_quant_linear_bias_dtype_and_device(qw):
    with pytest.raises(ShapeError, match=r"bias must be float16, bfloat16 or float32, got torch.int64.*bias\.float"):
        humming.nn.QuantLinear(qw, torch.zeros(512, dtype=torch.int64))
    with pytest.raises(DeviceMismatchError, match=r"bias is on meta, the weight on cpu; pass bias\.to\('cpu'\)"):
        humming.nn.QuantLinear(qw, torch.zeros(512, device=META))
    with pytest.raises(ShapeError, match=r"bias must have shape \(512,\)"):
        humming.nn.QuantLinear(qw, torch.zeros(7))


def test_quant_linear_input_on_another_device(qw):
    layer = humming.nn.QuantLinear(qw, torch.zeros(512))
    with pytest.raises(DeviceMismatchError, match="x is on meta, the weight on cpu"):
        layer(torch.randn(2, 256, device=META))
    with pytest.raises(ShapeError, match="device must be a torch.device"):
        layer.prepare(torch.float16, "gpu")


# ------------------------------------------------------------------------------------------------ MoE
def test_moe_forms_refuse_weights_on_another_device(stacked):
    w = stacked.to(META)
    x = torch.randn(3, 128, dtype=torch.bfloat16)
    ids = torch.randint(0, 4, (3, 2))
    with pytest.raises(DeviceMismatchError, match="humming.moe_gemm: x is on cpu, the expert weights on meta"):
        humming.moe_gemm(x, w, ids)
    with pytest.raises(DeviceMismatchError, match="humming.grouped_gemm: x is on cpu, the expert weights"):
        humming.grouped_gemm(x, w, torch.tensor([0, 1, 2, 3, 3]))
    with pytest.raises(DeviceMismatchError, match="humming.masked_gemm: x is on cpu, the expert weights"):
        humming.masked_gemm(torch.randn(4, 2, 128, dtype=torch.bfloat16), w, torch.tensor([1, 2, 0, 2]))


def test_moe_forms_name_bad_weights_and_x(stacked, qw):
    ids = torch.randint(0, 4, (3, 2))
    with pytest.raises(ShapeError, match="QuantizedWeight"):
        humming.moe_gemm(torch.randn(3, 128, dtype=torch.bfloat16), torch.randn(4, 64, 128), ids)
    with pytest.raises(ShapeError, match="expert-stacked"):
        humming.grouped_gemm(torch.randn(3, 256, dtype=torch.bfloat16), qw, torch.tensor([0, 3]))
    with pytest.raises(ShapeError, match="0-d tensor"):
        humming.masked_gemm(torch.tensor(1.0, dtype=torch.bfloat16), stacked, torch.tensor([1, 2, 0, 2]))
    with pytest.raises(DeviceMismatchError, match=r"counts is on meta, not on x's device"):
        humming.masked_gemm(torch.randn(4, 2, 128, dtype=torch.bfloat16), stacked,
                            torch.tensor([1, 2, 0, 2], device=META))


# ------------------------------------------------------------------------------------------------ int1 / e0m3
@pytest.mark.parametrize("scheme", ["w2a16[weight=int1]", "w4a16[weight=int1,group_size=64]",
                                    "w4a16[weight=int1,group_size=None]"])
def test_symmetric_int1_names_one_bit_schemes_that_work(scheme):
    w = torch.randn(64, 256)
    with pytest.raises(SchemeError, match=r"int1 holds only -1 and 0.*no positive level") as e:
        humming.quantize(w, scheme)
    suggested = re.findall(r"'([^']+)'", str(e.value).split("scheme=", 1)[1])
    assert suggested
    for s in suggested:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            q = humming.quantize(w, s)
        assert bool(torch.isfinite(q.dequantize()).all()), s


def test_int1_checkpoint_codes_still_load():
    """Only quantizing to symmetric int1 is refused: int1 codes from a checkpoint decode as they are."""
    sch = humming.schemes.get("w2a16").with_(weight="int1", group_size=None)
    qw = QuantizedWeight.from_codes(torch.randint(0, 2, (64, 128), dtype=torch.uint8), sch, torch.ones(64, 1,
                                                                                                       dtype=torch.float16))
    assert set(qw.dequantize().unique().tolist()) <= {-1.0, 0.0}


def test_e0m3_names_int4_and_int4_gives_the_same_weights():
    sch = humming.schemes.get("w4a16").with_(weight="e0m3")
    with pytest.raises(SchemeError, match=r"e0m3 weights \(sign-magnitude integers -7\.\.7\) have no kernel decode.*"
                                          r"weight='int4'"):
        humming.plan(sch, 16, 512, 512, profile="nvidia-h100")
    fixed = sch.with_(weight="int4")
    assert humming.plan(fixed, 16, 512, 512, profile="nvidia-h100").kernel_name
    torch.manual_seed(3)
    w = torch.randn(128, 512)
    w[0, :16] = torch.tensor([7.0, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, -0.5, -1.5, -2.5, -3.5, -4.5, -5.5, -6.5, 0.0])
    assert torch.equal(humming.quantize(w, sch).dequantize(), humming.quantize(w, fixed).dequantize())
