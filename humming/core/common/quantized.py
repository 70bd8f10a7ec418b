"""What the quantized-activation families share: the instruction path a scheme runs on a profile (the runnable one,
and the one left when the tcgen05 or block-scaled kernels do not take a problem), whether the 8-bit kernels execute
it, and the W4A8 widening a call asks for."""
from __future__ import annotations


def is_block_scaled_mma(choice) -> bool:
    return choice.family == "mma_sync" and choice.path == "native" and bool(getattr(choice.instruction, "scale_format", None))


def runs_on_w8a8(choice, scheme) -> bool:
    """True when an 8-bit kernel executes this path: both operands 8-bit as stored, per-channel or per-tensor weight
    scales, per-token or per-tensor activation scales; or 128x128 weight blocks with activation scales per 128 of K
    (w8a8-fp8-block); or W4A8 (int4 / e2m1 widened exactly to s8 / e4m3, group scales)."""
    if choice.family != "mma_sync" or scheme.zero_point:
        return False
    if scheme.weight_scale.granularity == "block":
        from humming.core.common.quantized import block_scales_reason

        return (choice.path in ("native", "legacy") and choice.a_type in ("s8", "e4m3")
                and choice.b_type == choice.a_type and scheme.weight in ("int8", "e4m3")
                and block_scales_reason(scheme) is None)
    if scheme.act_scale.mode not in ("dynamic_token", "static_tensor"):
        return False
    if scheme.weight in ("int4", "e2m1"):
        return (choice.path in ("dequant-to-activation", "legacy") and choice.a_type == choice.b_type
                and choice.a_type in ("s8", "e4m3") and scheme.weight_scale.granularity in ("group", "channel"))
    return (choice.path in ("native", "legacy") and choice.a_type in ("s8", "e4m3") and choice.b_type == choice.a_type
            and scheme.weight_scale.granularity in ("channel", "tensor"))


def w4a8_widening(options, choice, weight: str = "int4") -> str:
    """The W4A8 kernels' int4 -> e4m3 widening (the layouts' ``widen``): GemmOptions.w4a8_widen ("linear" by default,
    "prmt": byte-permute tables) where the operands are int4 weights and e4m3 activations; "linear" otherwise."""
    return options.w4a8_widen if (choice.a_type, weight) == ("e4m3", "int4") else "linear"


BLOCK_SCALES = (128, 128)  # the weight blocks (n, k) the 8-bit kernels apply, with activation scales per 128 of K


def block_scales_reason(scheme) -> str | None:
    """None when a scheme's block scales are the ones the 8-bit kernels apply (128x128 weight blocks and activation
    scales per 128 of K, the w8a8-fp8-block recipe), else what differs."""
    ws, acts = scheme.weight_scale, scheme.act_scale
    if tuple(ws.block or ()) != BLOCK_SCALES:
        return f"weight blocks {ws.block[0]}x{ws.block[1]} (the 8-bit kernels apply 128x128 blocks)"
    if acts.mode != "dynamic_group" or acts.group_size != BLOCK_SCALES[1]:
        return (f"{acts.mode} activation scales with 128x128 weight blocks (the 8-bit kernels take activation scales "
                f"per 128 of K, act_scale='dynamic_group', act_group_size=128)")
    if acts.global_scale:
        return "a global activation scale with block weight scales"
    return None
