"""What the MoE forms of the dense 8-bit kernels (humming.core.families.moe_register_a8, moe_wgmma_8bit) share: their
plans' kernel names, their experts padded to the kernels' 128-wide tiles, the order in which they refuse an MoE
problem (a measured entry that chose another kernel, act-order experts, their own planner's refusal, the live GPU),
and the measured entry's reason in their plans."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.moe_wna16.tuned import entry_reason, moe_entry, other_kernel_chosen
from humming.core.plan import Plan
from humming.core.quant.padding import ALIGN
from humming.devices.current import runs_here
from humming.errors import ShapeError

TILE_ATOM = 128  # N and K of the experts these forms prepare: multiples of their 128-channel tile and 128-deep stage


class RoutedPlan(Plan):
    """A Plan of a dense kernel's MoE form: the dense kernel's name, marked as the MoE form."""

    @property
    def kernel_name(self) -> str:
        return "hm_moe_" + super().kernel_name.removeprefix("hm_")


def padded_to_tiles(n: int, k: int) -> tuple[int, int]:
    """(N, K) padded to multiples of 128 (N and K must be multiples of 16)."""
    if n % ALIGN or k % ALIGN:
        raise ShapeError(f"MoE weights need N and K that are multiples of {ALIGN}, got N={n} K={k}")
    return -(-n // TILE_ATOM) * TILE_ATOM, -(-k // TILE_ATOM) * TILE_ATOM


def routed_refusal(problem, caps, path: str, plan_refusal) -> str | None:
    """Why the MoE form whose plans have ``path`` does not take ``problem`` (None: it does); ``plan_refusal(caps,
    scheme, tokens, n, k, experts, top_k, measured=)``: its planner's own reasons ("" for none)."""
    why, entry = other_kernel_chosen(problem, caps, path)
    if why:
        return why
    if problem.act_order:
        return "act-order experts (their rows are permuted in 16 bits) run on the 16-bit MoE kernels"
    why = plan_refusal(caps, problem.scheme, problem.m, problem.n, problem.k, problem.experts, problem.top_k,
                       measured=entry is not None)
    if why:
        return why
    if not runs_here(caps):
        return f"the live GPU is not {caps.name}'s own target"
    return None


def with_measured_reason(problem, caps, plan):
    """The plan with the measured entry's reason where an entry chose its kernel for this bucket."""
    entry = moe_entry(problem, caps)
    if entry is None or entry.get("path") != plan.path:
        return plan
    return replace(plan, reasons=plan.reasons + (entry_reason(entry, problem.m),))
