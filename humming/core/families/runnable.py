"""The instruction path a quantized-activation scheme runs on a profile: the best declared one where a generated
kernel executes it (the tcgen05 and block-scaled kernels only with HUMMING_UNVERIFIED_KERNELS=1), and the one left
when those kernels do not take a problem. The families of humming.core.registry ask it."""
from __future__ import annotations

from humming.core.common.paths import PathChoice, choose_path, unverified_enabled, unverified_note
from humming.core.common.quantized import is_block_scaled_mma
from humming.core.families.tcgen05.planner import tcgen05_generated

GENERATED_FAMILIES = ("mma_sync",)  # instruction families humming generates kernels for today


def runnable_path(caps, scheme) -> PathChoice:
    """The best path among the kernel families humming generates today (see GENERATED_FAMILIES); its
    reasons say when the device's preferred family is not generated yet."""
    ideal = choose_path(caps, scheme)
    if ideal.family in GENERATED_FAMILIES and _is_block_scaled_native(ideal):
        # the block-scaled mma.sync kernel is compiled but has never run on hardware: opt-in only
        if unverified_enabled():
            return ideal
        return choose_path(caps, scheme, families=GENERATED_FAMILIES, block_scaled=False)
    if ideal.family in GENERATED_FAMILIES:
        return ideal
    if ideal.family == "tcgen05":
        # the tcgen05 kernels (W8A8, W4A4, W4A8) are compiled but have never run on hardware: opt-in only
        if tcgen05_generated(ideal, scheme, caps):
            if unverified_enabled():
                return ideal
            run = choose_path(caps, scheme, families=GENERATED_FAMILIES)
            return PathChoice(run.scheme, run.path, run.family, run.instruction, run.a_type, run.b_type,
                              run.reasons + (f"{unverified_note(caps, 'tcgen05')}; meanwhile runs {run.describe()}",))
    run = choose_path(caps, scheme, families=GENERATED_FAMILIES)
    note = f"{ideal.describe()} is preferred on {caps.name} but its kernel is not generated yet; runs {run.describe()}"
    return PathChoice(run.scheme, run.path, run.family, run.instruction, run.a_type, run.b_type,
                      run.reasons + (note,))


def _is_block_scaled_native(choice: PathChoice) -> bool:
    return choice.path == "native" and bool(getattr(choice.instruction, "scale_format", None))


def ideal(problem, caps):
    """The best declared path for the scheme on the profile, generated or not (humming.core.common.paths)."""
    return problem.memo("ideal_path", lambda: choose_path(caps, problem.scheme))


def runnable(problem, caps):
    """The best path among the kernels that run here (the tcgen05 and block-scaled ones only with
    HUMMING_UNVERIFIED_KERNELS=1); its reasons say what is preferred but not run."""
    return problem.memo("runnable_path", lambda: runnable_path(caps, problem.scheme))


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


def no_kernel(problem, caps):
    """The UnsupportedOnDevice of a quantized-activation problem that no family takes."""
    from humming.errors import UnsupportedOnDevice

    choice = fallback(problem, caps)
    return UnsupportedOnDevice(
        f"{problem.scheme.name} on {caps.name}: planned path {choice.path} ({choice.describe()}); this kernel is not "
        f"generated yet, humming.reference_gemm runs the scheme")
