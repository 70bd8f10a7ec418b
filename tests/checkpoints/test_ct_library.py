"""compressed-tensors import checked against the real compressed-tensors library (not tests/checkpoints/_writers.py).

Every case quantizes a random weight with the library's own parameter rule (``calculate_qparams``, plus
``generate_gparam`` for NVFP4's global scale) from min/max statistics taken the way llm-compressor's min-max
observer takes them, compresses it with the library's compressor of that format, imports the compressed tensors
with :func:`humming.checkpoints.import_tensors` and compares ``qw.dequantize()`` with the library's own
``decompress``, in the dtype the library decompresses to. The library computes in the scale's dtype (bfloat16 for
the FP4/FP6/MX formats) and humming in float32 with one final cast; the two agree bit for bit (``torch.equal``)
because each product is exact in float32 (an integer or a float code of at most 8 significant bits times one
scale) and the single cast rounds it as the library's single rounding does. NVFP4 alone has a second factor, the
global scale, which the library divides by and humming multiplies by the reciprocal of: see the note above
test_nvfp4_pack_quantized for the one-bfloat16-ulp tolerance this needs.
"""
from __future__ import annotations

import copy
import re

import pytest
import torch

pytest.importorskip("compressed_tensors")

from compressed_tensors.compressors import (
    BaseCompressor,
    FloatQuantizationCompressor,
    IntQuantizationCompressor,
    ModelCompressor,
    MXFP4PackedCompressor,
    MXFP6PackedCompressor,
    MXFP8QuantizationCompressor,
    NaiveQuantizationCompressor,
    NVFP4PackedCompressor,
    PackedQuantizationCompressor,
)
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    QuantizationStatus,
    apply_quantization_config,
    preset_name_to_scheme,
)
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

import humming
from humming.checkpoints import compressed_tensors, import_tensors
from humming.errors import SchemeError, ShapeError

SEEDS = (0, 1, 2)
# W8A8-style dynamic per-token activations: the int-/float-quantized compressors only claim schemes that quantize
# activations (their can_compress), as llm-compressor's W8A8 / FP8_DYNAMIC presets do.
INT_TOKEN = QuantizationArgs(num_bits=8, type="int", strategy="token", dynamic=True)
FP8_TOKEN = QuantizationArgs(num_bits=8, type="float", strategy="token", dynamic=True)


def random_weight(seed: int, n: int = 64, k: int = 256, dtype: torch.dtype = torch.float32, *,
                  magnitude: float = 0.05) -> torch.Tensor:
    """Fresh random data with some structure: per-row spreads, a few outliers and, for seed 2, a zero row and a
    one-signed row (zero scales get the library's eps, asymmetric ranges clamp at 0)."""
    g = torch.Generator().manual_seed(1000 + seed)
    w = torch.randn(n, k, generator=g) * magnitude * torch.rand(n, 1, generator=g).add(0.1)
    idx = torch.randint(0, n * k, (max(1, n * k // 500),), generator=g)
    w.view(-1)[idx] *= 8.0
    if seed == 2:
        w[3] = 0.0
        w[5] = w[5].abs()
    return w.to(dtype)


def observe(weight: torch.Tensor, args: QuantizationArgs) -> tuple[torch.Tensor, torch.Tensor]:
    """Min/max per quantization group, shaped as llm-compressor's min-max observer hands them to calculate_qparams."""
    w = weight
    if args.strategy == "tensor":
        return w.amin(), w.amax()
    if args.strategy == "channel":
        return w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    if args.strategy in ("group", "tensor_group"):
        g = w.unflatten(-1, (-1, args.group_size))
        return g.amin(-1), g.amax(-1)
    if args.strategy == "block":
        bn, bk = args.block_structure
        n, k = w.shape
        b = torch.nn.functional.pad(w, (0, -k % bk, 0, -n % bn)).unflatten(0, (-1, bn)).unflatten(2, (-1, bk))
        return b.amin((1, 3)), b.amax((1, 3))
    raise AssertionError(args.strategy)


def qparams(weight: torch.Tensor, args: QuantizationArgs) -> dict[str, torch.Tensor]:
    """The library's quantization parameters of ``weight``: weight_scale, weight_zero_point (and
    weight_global_scale for the two-level tensor_group strategy, NVFP4)."""
    params = {}
    global_scale = None
    if args.strategy == "tensor_group":
        global_scale = generate_gparam(weight.amin(), weight.amax())
        params["weight_global_scale"] = global_scale
    scale, zero = calculate_qparams(*observe(weight, args), args, global_scale=global_scale)
    params["weight_scale"] = scale
    params["weight_zero_point"] = zero
    return params


def library_roundtrip(weight: torch.Tensor, args: QuantizationArgs, compressor: type[BaseCompressor], *,
                      input_args: QuantizationArgs | None = None, extra: dict | None = None):
    """(compressed state dict, the library's decompressed weight)."""
    scheme = QuantizationScheme(targets=["Linear"], weights=args, input_activations=input_args)
    assert compressor.can_compress(torch.nn.Linear, scheme), "the library would not pick this compressor"
    state = {"weight": weight, **qparams(weight, args), **(extra or {})}
    compressed = compressor.compress(state, scheme)
    assert "weight" not in compressed or compressed["weight"].dtype != weight.dtype
    decompressed = compressor.decompress(compressed, scheme)["weight"]
    return compressed, decompressed


def humming_import(compressed: dict[str, torch.Tensor], prefix: str = "model.layers.0.mlp.down_proj", **options):
    tensors = {f"{prefix}.{name}": t for name, t in compressed.items()}
    return import_tensors(tensors, prefix, "compressed-tensors", **options)


def assert_same(qw, reference: torch.Tensor, *, ulps: int = 0) -> None:
    """``qw.dequantize()`` in the reference's dtype equals it exactly (``ulps=0``), or is at most ``ulps`` units in
    the last place of that dtype away from it, element by element."""
    ours = qw.dequantize(reference.dtype)
    assert ours.shape == reference.shape
    if torch.equal(ours, reference):
        return
    int_type = {2: torch.int16, 4: torch.int32}[reference.element_size()]
    steps = (ours.view(int_type).long() - reference.view(int_type).long()).abs()
    steps = torch.where((ours == reference) | torch.isnan(ours) & torch.isnan(reference), 0, steps)
    diff = (ours.float() - reference.float()).abs()
    if ulps == 0 or int(steps.max()) > ulps:
        raise AssertionError(f"{int((steps > 0).sum())} of {diff.numel()} elements differ (up to "
                             f"{int(steps.max())} ulps of {reference.dtype}), max |diff| {float(diff.max()):.3g}")


# ------------------------------------------------------------------------------------------------ pack-quantized
@pytest.mark.parametrize("num_bits", range(1, 9))
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("strategy", ["group32", "group128", "channel", "tensor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pack_quantized(num_bits, symmetric, strategy, dtype):
    group = int(strategy[5:]) if strategy.startswith("group") else None
    args = QuantizationArgs(num_bits=num_bits, type="int", symmetric=symmetric, group_size=group,
                            strategy="group" if group else strategy)
    for seed in SEEDS:
        compressed, reference = library_roundtrip(random_weight(seed, dtype=dtype), args, PackedQuantizationCompressor)
        assert compressed["weight_packed"].dtype == torch.int32
        assert ("weight_zero_point" in compressed) == (not symmetric)
        qw = humming_import(compressed)
        assert qw.shape == (64, 256)
        assert qw.scheme.weight == (f"int{num_bits}" if symmetric else f"uint{num_bits}")
        assert qw.scheme.weight_scale.group_size == group
        assert_same(qw, reference)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("strategy", ["channel", "tensor"])
@pytest.mark.parametrize("num_bits", [3, 4])
def test_pack_quantized_ragged_k(symmetric, strategy, num_bits):
    """K = 100 is no multiple of 32: the library pads the last int32 word, weight_shape keeps the true K."""
    args = QuantizationArgs(num_bits=num_bits, type="int", symmetric=symmetric, strategy=strategy)
    for seed in SEEDS:
        compressed, reference = library_roundtrip(random_weight(seed, n=40, k=100), args,
                                                  PackedQuantizationCompressor)
        qw = humming_import(compressed)
        assert qw.shape == (40, 100)
        assert_same(qw, reference)


def test_pack_quantized_presets_and_static_actorder():
    """The library's W4A16 / W4A16_ASYM / W8A16 presets, and actorder="weight" (a calibration-only ordering: the
    checkpoint has no g_idx)."""
    for name in ("W4A16", "W4A16_ASYM", "W8A16", "W2A16", "W6A16"):
        args = preset_name_to_scheme(name, ["Linear"]).weights
        compressed, reference = library_roundtrip(random_weight(0, k=512), args, PackedQuantizationCompressor)
        assert_same(humming_import(compressed), reference)
    args = QuantizationArgs(num_bits=4, group_size=128, actorder="weight")
    compressed, reference = library_roundtrip(random_weight(1), args, PackedQuantizationCompressor)
    assert "weight_g_idx" not in compressed
    qw = humming_import(compressed)
    assert not qw.scheme.act_order
    assert_same(qw, reference)


def test_pack_quantized_group_actorder_is_gone_from_the_library():
    """compressed-tensors 0.20 removed actorder="group" (the only writer of weight_g_idx), so there is no library
    g_idx checkpoint to test; the g_idx import is covered by test_compressed_tensors.py."""
    try:
        QuantizationArgs(num_bits=4, group_size=128, actorder="group")
    except ValueError:
        pytest.skip("this compressed-tensors rejects actorder='group': it writes no weight_g_idx")
    pytest.skip("this compressed-tensors accepts actorder='group' but its compressors never read or write g_idx")


# ------------------------------------------------------------------------------------ float-/int-/naive-quantized
@pytest.mark.parametrize("strategy", ["tensor", "channel", "group128", "block128", "block64x32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float_quantized_fp8(strategy, dtype):
    if strategy.startswith("block"):
        bn, _, bk = strategy[5:].partition("x")
        kw = dict(strategy="block", block_structure=[int(bn), int(bk or bn)])
    elif strategy.startswith("group"):
        kw = dict(strategy="group", group_size=int(strategy[5:]))
    else:
        kw = dict(strategy=strategy)
    args = QuantizationArgs(num_bits=8, type="float", **kw)
    block = tuple(kw["block_structure"]) if strategy == "block64x32" else None
    for seed in SEEDS:
        # N=200, K=384: 128x128 blocks are ragged in N (the library pads the weight for the block statistics)
        weight = random_weight(seed, n=200, k=384, dtype=dtype)
        compressed, reference = library_roundtrip(weight, args, FloatQuantizationCompressor, input_args=FP8_TOKEN)
        assert compressed["weight"].dtype == torch.float8_e4m3fn
        qw = humming_import(compressed, block=block)
        assert qw.scheme.weight == "e4m3"
        assert qw.scheme.weight_scale.granularity == kw["strategy"]
        assert_same(qw, reference)


def test_float_quantized_static_input_scale_passes_through():
    args = preset_name_to_scheme("FP8", ["Linear"])
    input_scale = torch.tensor([0.0123])
    compressed, reference = library_roundtrip(random_weight(0), args.weights, FloatQuantizationCompressor,
                                              input_args=args.input_activations, extra={"input_scale": input_scale})
    qw = humming_import(compressed)
    assert qw.scheme.act == "e4m3" and qw.scheme.act_scale.mode == "static_tensor"
    assert float(qw.input_scale) == float(input_scale)
    assert_same(qw, reference)


def test_float_quantized_asymmetric_is_refused():
    """The library can write an asymmetric FP8 weight (a float8 weight_zero_point); humming's float formats have no
    zero points, so the import must refuse it rather than drop the zero point."""
    args = QuantizationArgs(num_bits=8, type="float", strategy="channel", symmetric=False)
    compressed, _ = library_roundtrip(random_weight(0), args, FloatQuantizationCompressor, input_args=FP8_TOKEN)
    assert "weight_zero_point" in compressed
    with pytest.raises(SchemeError, match="asymmetric FP8"):
        humming_import(compressed)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("strategy", ["tensor", "channel", "group64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int_quantized_int8(symmetric, strategy, dtype):
    group = int(strategy[5:]) if strategy.startswith("group") else None
    args = QuantizationArgs(num_bits=8, type="int", symmetric=symmetric, group_size=group,
                            strategy="group" if group else strategy)
    for seed in SEEDS:
        compressed, reference = library_roundtrip(random_weight(seed, dtype=dtype), args, IntQuantizationCompressor,
                                                  input_args=INT_TOKEN)
        assert compressed["weight"].dtype == torch.int8
        assert ("weight_zero_point" in compressed) == (not symmetric)
        qw = humming_import(compressed)
        assert qw.scheme.weight == ("int8" if symmetric else "uint8")
        assert_same(qw, reference)


@pytest.mark.parametrize("num_bits", [2, 4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_naive_quantized(num_bits, symmetric):
    """naive-quantized keeps any integer width in an int8 tensor; humming imports it as 8-bit (same values)."""
    args = QuantizationArgs(num_bits=num_bits, type="int", symmetric=symmetric, strategy="group", group_size=32)
    for seed in SEEDS:
        compressed, reference = library_roundtrip(random_weight(seed), args, NaiveQuantizationCompressor)
        assert_same(humming_import(compressed), reference)
        assert_same(humming_import(compressed, format="naive-quantized"), reference)


# --------------------------------------------------------------------------------------------- NVFP4 and OCP MX
# NVFP4 is the one format where equality is not guaranteed. The library decompresses to bfloat16 as
# ``bf16(e2m1 * fp32(scale / weight_global_scale))``; humming's canonical form multiplies by the reciprocal global
# scale, ``bf16(fp32(e2m1 * scale) * fp32(1 / weight_global_scale))``. The float32 intermediates differ in the last
# bit for about a quarter of the elements; after the bfloat16 rounding they agree except where the exact value lies
# within a float32 ulp of a bfloat16 rounding midpoint, which takes a global scale close to a ratio of two short
# mantissas (test_nvfp4_division_vs_reciprocal constructs one). Such elements are one bfloat16 ulp apart, hence
# ``ulps=1``; random calibrated data like the cases below matches exactly in practice.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("magnitude", [0.05, 3e-4, 40.0])
def test_nvfp4_pack_quantized(dtype, magnitude):
    args = preset_name_to_scheme("NVFP4A16", ["Linear"]).weights
    for seed in SEEDS:
        compressed, reference = library_roundtrip(random_weight(seed, dtype=dtype, magnitude=magnitude), args,
                                                  NVFP4PackedCompressor)
        assert compressed["weight_packed"].dtype == torch.uint8
        assert compressed["weight_scale"].dtype == torch.float8_e4m3fn
        assert reference.dtype == torch.bfloat16
        qw = humming_import(compressed)
        assert qw.scheme.name == "w4a16-nvfp4"
        assert_same(qw, reference, ulps=1)


def test_nvfp4_division_vs_reciprocal():
    """A library checkpoint whose global scale sits next to the ratio 0.5 * 0.005859375 / (bf16 midpoint): the
    library's division and humming's reciprocal multiply round to neighbouring bfloat16 values there."""
    scheme = QuantizationScheme(targets=["Linear"], weights=preset_name_to_scheme("NVFP4A16", ["Linear"]).weights)
    compressed = {"weight_packed": torch.full((16, 32), 0x11, dtype=torch.uint8),  # every code e2m1 0.5
                  "weight_scale": torch.full((16, 4), 0.005859375).to(torch.float8_e4m3fn),
                  "weight_global_scale": torch.tensor([1.9742928743362427])}
    reference = NVFP4PackedCompressor.decompress(compressed, scheme)["weight"]
    qw = humming_import(compressed)
    assert not torch.equal(qw.dequantize(torch.bfloat16), reference)
    assert_same(qw, reference, ulps=1)
    # the float32 values themselves are one rounding apart: division vs multiplication by the reciprocal
    exact = 0.5 * 0.005859375 / 1.9742928743362427
    assert abs(float(qw.dequantize()[0, 0]) - exact) <= 2 * abs(exact) * 2**-24


# the magnitudes spread the E8M0 exponents from about 2**-70 to 2**50
MX_CASES = [("MXFP4A16", MXFP4PackedCompressor, "mxfp4-pack-quantized", "w4a16-mxfp4", "e2m1"),
            ("MXFP6A16", MXFP6PackedCompressor, "mxfp6-pack-quantized", "mxfp6", "e2m3"),
            ("MXFP8A16", MXFP8QuantizationCompressor, "mxfp8-quantized", "mxfp8", "e4m3")]


@pytest.mark.parametrize("preset,compressor,fmt,scheme_name,element", MX_CASES, ids=[c[0] for c in MX_CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("magnitude", [0.05, 1e-20, 1e15])
def test_mx_formats(preset, compressor, fmt, scheme_name, element, dtype, magnitude):
    args = preset_name_to_scheme(preset, ["Linear"]).weights
    for seed in SEEDS:
        compressed, reference = library_roundtrip(random_weight(seed, dtype=dtype, magnitude=magnitude), args,
                                                  compressor)
        assert compressed["weight_scale"].dtype == torch.uint8
        qw = humming_import(compressed)
        assert qw.scheme.name == scheme_name and qw.scheme.weight == element
        assert qw.scheme.weight_scale.format == "ue8m0" and qw.scheme.weight_scale.group_size == 32
        assert qw.scheme.act is None  # the checkpoint stores no activation data: 16-bit unless chosen
        assert_same(qw, reference)
        assert_same(humming_import(compressed, format=fmt), reference)  # the config's format, given explicitly


def test_mx_activations_can_be_chosen():
    args = preset_name_to_scheme("MXFP4", ["Linear"]).weights
    compressed, reference = library_roundtrip(random_weight(0), args, MXFP4PackedCompressor)
    qw = humming_import(compressed, activations="w4a4-mxfp4")
    want = humming.schemes.get("w4a4-mxfp4")
    assert qw.scheme.act == want.act == "e2m1" and qw.scheme.act_scale == want.act_scale
    assert_same(qw, reference)


def test_format_option_and_errors():
    args = preset_name_to_scheme("MXFP4A16", ["Linear"]).weights
    mx4, _ = library_roundtrip(random_weight(0), args, MXFP4PackedCompressor)
    with pytest.raises(SchemeError, match="are mxfp4-pack-quantized.*not mxfp6-pack-quantized"):
        humming_import(mx4, format="mxfp6-pack-quantized")
    with pytest.raises(SchemeError, match="format 'mxfp5' is not supported"):
        humming_import(mx4, format="mxfp5")
    with pytest.raises(ShapeError, match=r"weight_packed must be uint8 \[N=64, K/2=128\] \(mxfp4\)"):
        humming_import(dict(mx4, weight_packed=mx4["weight_packed"][:, :100]))
    with pytest.raises(ShapeError, match="weight_scale must be uint8 or float8_e8m0fnu"):
        humming_import(dict(mx4, weight_scale=mx4["weight_scale"].float()), format="mxfp4-pack-quantized")
    # a float8_e4m3fn scale makes the same packed nibbles NVFP4, which needs its global scale
    nv_args = preset_name_to_scheme("NVFP4A16", ["Linear"]).weights
    nv, _ = library_roundtrip(random_weight(0), nv_args, NVFP4PackedCompressor)
    with pytest.raises(SchemeError, match="weight_global_scale' is missing"):
        humming_import({k: v for k, v in nv.items() if k != "weight_global_scale"})
    mx8, _ = library_roundtrip(random_weight(0), preset_name_to_scheme("MXFP8A16", ["Linear"]).weights,
                               MXFP8QuantizationCompressor)
    with pytest.raises(ShapeError, match="E8M0 exponents are format mxfp8-quantized"):
        humming_import(mx8, format="float-quantized")
    assert compressed_tensors.load(mx8, format="MXFP8_QUANTIZED").scheme.name == "mxfp8"
    # naive-quantized FP8 (the naive compressor keeps the float8 weight) takes the float-quantized path
    fp8, reference = library_roundtrip(random_weight(0), QuantizationArgs(num_bits=8, type="float", strategy="channel"),
                                       NaiveQuantizationCompressor)
    assert_same(humming_import(fp8, format="naive-quantized"), reference)
    with pytest.raises(ShapeError, match="weight must be int8"):
        humming_import(fp8, format="int-quantized")
    int8, _ = library_roundtrip(random_weight(0), QuantizationArgs(num_bits=8, strategy="channel", symmetric=False),
                                IntQuantizationCompressor, input_args=INT_TOKEN)
    with pytest.raises(ShapeError, match="weight_zero_point must have the shape of weight_scale"):
        humming_import(dict(int8, weight_zero_point=int8["weight_zero_point"][:3]))
    with pytest.raises(ShapeError, match="int-quantized: cannot infer the group size: K=256"):
        humming_import(dict(int8, weight_scale=torch.ones(64, 3)))


# ------------------------------------------------------------------------------------------ a whole small model
class TinyBlock(torch.nn.Module):
    def __init__(self, hidden: int = 128, inter: int = 256):
        super().__init__()
        self.q_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=False)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=True)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)
        self.o_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.k_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.v_proj = torch.nn.Linear(hidden, hidden, bias=False)


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([TinyBlock() for _ in range(2)])
        self.lm_head = torch.nn.Linear(128, 64, bias=False)


def calibrate(model: torch.nn.Module, config: QuantizationConfig) -> None:
    """Apply ``config`` to ``model`` and set every quantized module's parameters from its weight's min / max (what
    llm-compressor's min-max observer would give)."""
    apply_quantization_config(model, config, show_progress=False)
    with torch.no_grad():
        for module in model.modules():
            scheme = getattr(module, "quantization_scheme", None)
            if scheme is None:
                continue
            for name, value in qparams(module.weight.data, scheme.weights).items():
                if hasattr(module, name):
                    param = getattr(module, name)
                    param.data = value.to(param.dtype).reshape(param.shape)


def test_model_compressor_mixed_precision_state_dict():
    """A model quantized with one scheme per projection, compressed by ModelCompressor (format mixed-precision):
    every quantized layer of its state dict imports and equals the library's decompressed weight."""
    torch.manual_seed(0)
    model = TinyModel().to(torch.bfloat16)
    groups = {
        "int4": ("W4A16", r"re:.*q_proj$"),
        "int4asym": ("W4A16_ASYM", r"re:.*k_proj$"),
        "nvfp4": ("NVFP4A16", r"re:.*gate_proj$"),
        "mxfp4": ("MXFP4A16", r"re:.*up_proj$"),
        "mxfp8": ("MXFP8A16", r"re:.*down_proj$"),
        "fp8": ("FP8_DYNAMIC", r"re:.*o_proj$"),
        "int8": ("W8A8", r"re:.*v_proj$"),
    }
    config = QuantizationConfig(
        config_groups={g: preset_name_to_scheme(p, [t]) for g, (p, t) in groups.items()}, ignore=["lm_head"],
        quantization_status=QuantizationStatus.FROZEN)
    calibrate(model, config)
    compressor = ModelCompressor.from_pretrained_model(model)
    assert compressor.quantization_config.format == "mixed-precision"
    compressed_model = copy.deepcopy(model)
    compressor.compress_model(compressed_model)
    state = compressed_model.state_dict()
    compressor.decompress_model(compressed_model)
    reference = compressed_model.state_dict()
    imported = 0
    for name in sorted({re.sub(r"\.weight(_packed)?$", "", k) for k in state if re.search(r"\.weight(_packed)?$", k)}):
        if name == "lm_head":
            assert state["lm_head.weight"].dtype == torch.bfloat16  # ignored: left dense
            continue
        qw = import_tensors(state, name, "compressed-tensors")
        assert_same(qw, reference[f"{name}.weight"], ulps=1 if name.endswith("gate_proj") else 0)  # nvfp4: see above
        original = model.get_submodule(name).weight.float()
        assert (qw.dequantize() - original).norm() < 0.3 * original.norm()  # the parameters were really calibrated
        if name.endswith("up_proj"):
            assert qw.bias is not None and torch.equal(qw.bias, state[f"{name}.bias"])
        imported += 1
    assert imported == 14
