"""Quantized activations on the MoE WnA16 kernel: the activations are quantized once per row of x, before any
gather, as the reference does (humming.core.quant.quantize.quantize_activation, by the generated kernel), then
changed exactly to 16 bits (humming.core.routes.families says why each change is exact):

* codes16: 8-bit codes (int8, e4m3, e5m2) with per-token or per-tensor scales: the codes as 16-bit values, the
  per-token scales applied per output row in the fp32 epilogue (the row of slot s is s / a_div: the token's);
* upconvert: NVFP4 / MX activations: codes times their block scales in bf16, the global scale in the epilogue;
* rescaled: block-FP8 (DeepSeek-V3) activations, per-group scales: code times scale, rounded once to 16 bits (not
  exact: the one step here that is not; the weights' 128x128 block scales become group scales when prepared).
"""
from __future__ import annotations

import torch

from humming.core.families.moe_wna16.layout import padded_shape
from humming.core.routes import widened_ranges as act_widen
from humming.errors import UnsupportedOnDevice

BLOCK_SCALED = ("e8m0", "ue8m0", "ue4m3")  # block scale formats of the NVFP4 / MX activations


def activation_step(scheme, n: int, k: int) -> tuple[str, str]:
    """(how the activations reach the MoE kernel: "x", "codes16", "upconvert" or "rescaled"; why). Raises UnsupportedOnDevice
    for activations no exact 16-bit change takes (scales varying along K that are not block scales)."""
    if not getattr(scheme, "act", None):
        return "x", "16-bit activations as they are"
    why_not = act_widen.refusal(scheme, *padded_shape(n, k))  # (the weights are padded when prepared)
    if not why_not:
        scale = ("per-token scales per output row in the epilogue" if scheme.act_scale.mode == "dynamic_token"
                 else "the per-tensor scale in the epilogue")
        return "codes16", (f"{scheme.act} activations quantized once per token before the gather, the codes widened "
                           f"exactly to 16 bits; {scale}")
    a = scheme.act_scale
    if a.mode == "dynamic_group" and a.format in BLOCK_SCALED and scheme.weight_scale.granularity != "block":
        return "upconvert", (f"{scheme.act} activations quantized once per token before the gather, dequantized "
                             f"exactly to bf16 with their block scales; the global scale in the epilogue")
    if a.mode == "dynamic_group" and scheme.weight_scale.granularity == "block":
        bn, bk = scheme.weight_scale.block
        return "rescaled", (f"{scheme.act} activations quantized once per token in groups of {a.group_size} before "
                            f"the gather, then code x group scale rounded once to 16 bits (the 8-bit kernel's "
                            f"per-group rescaling does not exist for MoE yet); the {bn}x{bk} weight blocks' scales as "
                            f"group-{bk} scales of every channel")
    raise UnsupportedOnDevice(f"{scheme.name}: the MoE kernels take 16-bit activations or ones changed exactly to "
                              f"16 bits; not these ({why_not})")


def quantized_input(x: torch.Tensor, scheme, caps, step: str, input_scale=None
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(A: the activations in 16 bits, GS: fp32 per-row scales [rows], a scalar [1], or None) for ``step``."""
    from humming.core.runtime.inputs import quantize

    if step == "rescaled":  # per-group scales (block-FP8): code x scale, rounded once to x's 16-bit type
        return quantize(x, scheme, caps).dequantize(x.dtype).contiguous(), None
    act16 = act_widen.act_dtype(caps, x.dtype)
    if step == "codes16":
        if input_scale is not None:
            from humming.core.quant.quantize import quantize_activation

            qa = quantize_activation(x, scheme, scale=input_scale)
            codes = qa.codes.to(act16)
        else:
            qa = quantize(x, scheme, caps, codes_as=act16)
            codes = qa.codes
        values = qa.scale_values().to(device=x.device, dtype=torch.float32)
        gs = values.reshape(-1).contiguous() if qa.mode == "dynamic_token" else values.reshape(1)
        return codes.contiguous(), gs
    if act16 != torch.bfloat16:
        raise UnsupportedOnDevice(f"{scheme.name}: block-scaled activations are dequantized exactly only in bf16; "
                                  f"give bfloat16 activations on a profile with bf16 mma.sync")
    qa = quantize(x, scheme, caps)
    gs = qa.global_scale
    if gs is not None:
        qa.global_scale = None  # dequantized without it: code x block scale is exact in bf16
        gs = gs.to(device=x.device, dtype=torch.float32).reshape(1)
    return qa.dequantize(act16).contiguous(), gs
