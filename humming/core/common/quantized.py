"""What the quantized-activation families share: the instruction path a scheme runs on a profile (the runnable one,
and the one left when the tcgen05 or block-scaled kernels do not take a problem), whether the 8-bit kernels execute
it, and the W4A8 widening a call asks for."""
from __future__ import annotations

from humming.core.common.paths import choose_path, runnable_path


def ideal(problem, caps):
    """The best declared path for the scheme on the profile, generated or not (humming.core.common.paths)."""
    return problem.memo("ideal_path", lambda: choose_path(caps, problem.scheme))


def runnable(problem, caps):
    """The best path among the kernels that run here (the tcgen05 and block-scaled ones only with
    HUMMING_UNVERIFIED_KERNELS=1); its reasons say what is preferred but not run."""
    return problem.memo("runnable_path", lambda: runnable_path(caps, problem.scheme))


def is_block_scaled_mma(choice) -> bool:
    return choice.family == "mma_sync" and choice.path == "native" and bool(getattr(choice.instruction, "scale_format", None))


def fallback(problem, caps):
    """The path the 8-bit, block-scaled-free and upconvert families run: the runnable one, or where that is a
    tcgen05 or block-scaled kernel that did not take the problem (its shape, act-order, another GPU), the best
    mma.sync path without it."""
    def make():
        choice = runnable(problem, caps)
        if choice.family == "tcgen05":
            return choose_path(caps, problem.scheme, families=("mma_sync",))
        if is_block_scaled_mma(choice):
            return choose_path(caps, problem.scheme, families=("mma_sync",), block_scaled=False)
        return choice

    return problem.memo("fallback_path", make)


def runs_on_w8a8(choice, scheme) -> bool:
    """True when an 8-bit kernel executes this path: both operands 8-bit as stored, per-channel or per-tensor weight
    scales, per-token or per-tensor activation scales; or 128x128 weight blocks with activation scales per 128 of K
    (w8a8-fp8-block); or W4A8 (int4 / e2m1 widened exactly to s8 / e4m3, group scales)."""
    if choice.family != "mma_sync" or scheme.zero_point:
        return False
    if scheme.weight_scale.granularity == "block":
        from humming.core.common.layout import block_scales_reason

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


def w4a8_widen(options, choice, weight: str = "int4") -> str:
    """The W4A8 kernels' int4 -> e4m3 widening (the layouts' ``widen``): GemmOptions.w4a8_widen ("linear" by default,
    "prmt": byte-permute tables) where the operands are int4 weights and e4m3 activations; "linear" otherwise."""
    return options.w4a8_widen if (choice.a_type, weight) == ("e4m3", "int4") else "linear"


def no_kernel(problem, caps):
    """The UnsupportedOnDevice of a quantized-activation problem that no family takes."""
    from humming.errors import UnsupportedOnDevice

    choice = fallback(problem, caps)
    return UnsupportedOnDevice(
        f"{problem.scheme.name} on {caps.name}: planned path {choice.path} ({choice.describe()}); this kernel is not "
        f"generated yet, humming.reference_gemm runs the scheme")
