"""How the activations reach a family's kernel (``Family.inputs``): each step turns x [M, K] into the kernel's A
operand and the tensors of its other slots (launch.LaunchSpec: B S Z CS BIAS, GS).

* x: the 16-bit activations as they are (gathered along K for act-order weights);
* codes8: quantized (the generated activation-quantization kernel, bit for bit the reference) to 8-bit codes, their
  per-token scales in S (per 128 of K for 128x128-block weights), the weights' group or block scales in Z, a static
  per-tensor scale in GS;
* codes16: quantized, each 8-bit code written as its exact 16-bit value; the per-token scales in GS (Plan.row_scale)
  or the per-tensor scale;
* upconvert: quantized (NVFP4 / MX), dequantized exactly to 16 bits without the global scale, which goes to GS;
* e2m1: quantized to e2m1 codes packed two a byte, the block scales as bytes in S, the weights' in Z.
"""
from __future__ import annotations

import torch

from humming.core.tuning import knobs
from humming.errors import UnsupportedOnDevice

_DTYPE = {"f16": torch.float16, "bf16": torch.bfloat16}


def quantize(x: torch.Tensor, scheme, caps, codes_as: torch.dtype | None = None):
    """The activations quantized as ``scheme`` says: by the generated kernel, or the torch reference with the tuning
    knob act_quant.kernel off; ``codes_as``: the codes as their exact 16-bit values (the widened route)."""
    from humming.core.actquant import runtime

    if not knobs.value("act_quant.kernel", caps):
        from humming.core.quant.quantize import quantize_activation

        return runtime._widened(quantize_activation(x, scheme), codes_as)
    return runtime.quantize_activation_cuda(x, scheme, profile=caps, codes_as=codes_as)


def aligned_bias(bias: torch.Tensor | None, packed, dtype: torch.dtype, word: bool = False) -> torch.Tensor | None:
    """The bias the kernel reads: the caller's (as ``dtype``, contiguous) or the weight's; ``word``: its start on 4
    bytes (the 8-bit and block-scaled epilogues read two columns' biases as one 32-bit load)."""
    b = getattr(packed, "bias", None) if bias is None else bias.to(dtype=dtype).contiguous()
    if word and b is not None and b.data_ptr() % 4:
        b = b.clone()
    return b


def gathered(x2: torch.Tensor, packed) -> torch.Tensor:
    """x [M, K] gathered along K for act-order weights (the packed weights' permutation), 16-byte aligned rows."""
    perm = getattr(packed, "perm", None)
    if perm is not None:
        x2 = x2.index_select(1, perm)
    if x2.data_ptr() % 16 or not x2.is_contiguous():  # 16-byte rows for the vector and bulk copies
        x2 = x2.clone(memory_format=torch.contiguous_format)  # (contiguous() keeps a misaligned view)
    return x2


def wna16_weights(packed, bias) -> tuple:
    return packed.qweight, packed.scales, packed.zeros, packed.channel_scale, bias


def prepare_x(x2, scheme, caps, packed, plan, bias):
    """x: (A, weights, GS, output dtype)."""
    return gathered(x2, packed), wna16_weights(packed, aligned_bias(bias, packed, x2.dtype)), None, x2.dtype


def prepare_codes16(x2, scheme, caps, packed, plan, bias):
    act16 = _DTYPE[plan.act]
    qa = quantize(x2, scheme, caps, codes_as=act16)  # one kernel: codes as 16-bit values
    values = qa.scale_values().to(device=x2.device, dtype=torch.float32)
    gscale = values.reshape(-1).contiguous() if qa.mode == "dynamic_token" else values.reshape(1)
    return gathered(qa.codes, packed), wna16_weights(packed, aligned_bias(bias, packed, act16)), gscale, act16


def prepare_upconvert(x2, scheme, caps, packed, plan, bias):
    act16 = _DTYPE[plan.act]
    qa = quantize(x2, scheme, caps)
    gscale = qa.global_scale
    if gscale is not None:
        qa.global_scale = None  # widened without it: code x block scale is exact in 16 bits
        gscale = gscale.to(device=x2.device, dtype=torch.float32).reshape(1)
    x16 = qa.dequantize(act16)
    return gathered(x16, packed), wna16_weights(packed, aligned_bias(bias, packed, act16)), gscale, act16


def prepare_codes8(x2, scheme, caps, packed, plan, bias):
    perm = getattr(packed, "perm", None)
    if perm is not None:  # act-order weights: gather the activations to match
        x2 = x2.index_select(1, perm)
    qa = quantize(x2, scheme, caps)
    codes = qa.codes.contiguous()
    token_scale = gscale = None
    if qa.mode == "dynamic_token":
        token_scale = qa.scale_values().reshape(-1).to(torch.float32).contiguous()
    elif qa.mode == "dynamic_group" and scheme.weight_scale.granularity == "block":
        token_scale = qa.scale_values().reshape(-1, plan.k // qa.group_size).to(torch.float32).contiguous()
    elif qa.mode == "static_tensor":
        gscale = qa.scale_values().reshape(1).to(device=x2.device, dtype=torch.float32)
    else:
        raise UnsupportedOnDevice(f"{scheme.name}: {qa.mode} activation scales are not supported by the 8-bit kernel")
    weights = (packed.qweight, token_scale, getattr(packed, "scales", None), packed.channel_scale,
               aligned_bias(bias, packed, x2.dtype, word=True))
    return codes, weights, gscale, x2.dtype


def prepare_e2m1(x2, scheme, caps, packed, plan, bias):
    from humming.core.families.mma_blockscaled.layout import pack_e2m1

    qa = quantize(x2, scheme, caps)
    codes = pack_e2m1(qa.codes).contiguous()  # [M, K/2]
    scale_bytes = qa.scales.view(torch.uint8).contiguous()  # [M, K/vec]
    gscale = None
    if qa.global_scale is not None:
        gscale = qa.global_scale.to(device=x2.device, dtype=torch.float32).reshape(1)
    weights = (packed.qweight, scale_bytes, packed.scales, None, aligned_bias(bias, packed, x2.dtype, word=True))
    return codes, weights, gscale, x2.dtype


STEPS = {"x": prepare_x, "codes8": prepare_codes8, "codes16": prepare_codes16, "upconvert": prepare_upconvert,
         "e2m1": prepare_e2m1}
