"""The block-scaled mma.sync family (sm_120a / sm_121a): W4A4 NVFP4 / MXFP4 with the block scales in the MMA
(kind::mxf4nvf4 / mxf4). Compiled, never run on hardware: it takes problems only with
HUMMING_UNVERIFIED_KERNELS=1 (elsewhere the upconvert route runs the scheme)."""
from __future__ import annotations

from humming.core.common.quantized import is_block_scaled_mma
from humming.core.families.mma_blockscaled.generator import blockscaled_kernel_source
from humming.core.families.mma_blockscaled.layout import STAGE_K, BlockScaledLayout, prepare_blockscaled, recipe_of
from humming.core.families.mma_blockscaled.planner import plan_blockscaled, unverified_note
from humming.core.families.runnable import ideal, runnable
from humming.core.family import Family
from humming.devices.current import runs_here


def refusal(problem, caps, ask) -> str | None:
    if not problem.quantized_activations:
        return "the scheme has 16-bit activations"
    choice = runnable(problem, caps)
    if not is_block_scaled_mma(choice):
        return f"the runnable path is {choice.describe()}"
    if problem.n % 64 or problem.k % STAGE_K:
        return f"N={problem.n} must be a multiple of 64 and K={problem.k} of {STAGE_K}"
    if problem.act_order:
        return "act-order weights (a K permutation) are not taken"
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target"
    return None


def plan(problem, caps):
    layout = BlockScaledLayout(recipe_of(problem.scheme), problem.n, problem.k)
    return plan_blockscaled(caps, layout, problem.m, problem.act, ideal(problem, caps), scheme=problem.scheme.name)


def owns(plan) -> bool:
    return plan.family == "mma_sync" and bool(getattr(plan.instruction, "scale_format", None))


def pack(qw, dtype, layout, caps):
    return prepare_blockscaled(qw, dtype)


FAMILY = Family("mma_blockscaled", "mma.sync W4A4 NVFP4 / MXFP4, block scales in the MMA", refusal, plan, "e2m1", owns,
                blockscaled_kernel_source, pack, unverified=unverified_note)
