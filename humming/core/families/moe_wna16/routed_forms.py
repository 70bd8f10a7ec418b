"""What the MoE forms of the dense 8-bit kernels (humming.core.families.moe_register_a8, moe_wgmma_8bit, moe_mma_8bit,
moe_tcgen05's W8A8 form) share: their plans' kernel names, their experts padded to the kernels' 128-wide tiles, the
order in which they refuse an MoE problem (a measured entry that chose another kernel, act-order experts, their own
planner's refusal, the live GPU), the measured entry's reason in their plans, and the Family they make."""
from __future__ import annotations

from dataclasses import replace

from humming.core.families.moe_wna16.tuned import entry_reason, moe_entry, other_kernel_chosen
from humming.core.family import Family
from humming.core.plan import Plan
from humming.core.quant.padding import ALIGN
from humming.core.tuning import knobs
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


def threshold_words(caps, knob: str) -> str:
    """How a form's rows-per-expert knob decides for ``caps`` (the words of its plans' reasons)."""
    lowest = knobs.value(knob, caps)
    return (f"off by rule, {knob}; chosen by a measured entry or a tuner" if lowest is None else
            f"from {lowest:g} rows per expert on average, {knob}")


def routed_refusal(problem, caps, path: str, plan_refusal) -> str | None:
    """Why the MoE form whose plans have ``path`` does not take ``problem`` (None: it does); ``plan_refusal(problem,
    caps, measured)``: its planner's own reasons ("" for none; ``measured``: a measured entry chose the form, so its
    row threshold does not apply)."""
    why, entry = other_kernel_chosen(problem, caps, path)
    if why:
        return why
    if problem.act_order:
        return "act-order experts (their rows are permuted in 16 bits) run on the 16-bit MoE kernels"
    why = plan_refusal(problem, caps, entry is not None)
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


def routed_family(name: str, doc: str, path: str, planner, plan_refusal, source, pack, **options) -> Family:
    """The Family of an MoE form of a dense 8-bit kernel: it refuses in the order above, plans with ``planner(problem,
    caps)`` (the measured entry's reason added), owns the plans of ``path`` and reads 8-bit activation codes;
    ``options``: the other Family fields (tiles, unverified, announce)."""
    return Family(name, doc, lambda problem, caps, ask: routed_refusal(problem, caps, path, plan_refusal),
                  lambda problem, caps: with_measured_reason(problem, caps, planner(problem, caps)), "codes8",
                  lambda plan: plan.path == path, source, pack, **options)


def problem_planner(plan_fn):
    """``plan_fn(caps, scheme, tokens, n, k, act, experts, top_k)`` as a planner of (problem, caps)."""
    return lambda problem, caps: plan_fn(caps, problem.scheme, problem.m, problem.n, problem.k, problem.act,
                                         problem.experts, problem.top_k)
