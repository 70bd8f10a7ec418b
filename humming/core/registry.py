"""The kernel families, in the order they are asked, and the one place that chooses among them.

    selection = registry.select(Problem(scheme, m, n, k, act), caps)
    selection.family      the family (or route) that takes the problem
    selection.plan        its plan (which kernel, which tiles, and why)
    refusal("wgmma_8bit", problem, caps)   why one family does not take it (None: it does)
    kernel_source(plan, backend, caps)     the CUDA C++ of a plan, written by the family that owns it

``humming.gemm`` (per M of a prepared weight), ``humming.plan``, ``humming.device.info()``'s path table, ``humming
tune`` and ``humming build`` all call ``select``. A family says why it does not take a problem (its refusal) or
plans it; the first that takes it wins. Families compiled for GPUs they never ran on take problems only with
HUMMING_UNVERIFIED_KERNELS=1; one that would have taken a problem but for that may leave a note in the chosen plan.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from humming import settings
from humming.core.families.mma_8bit.family import FAMILY as MMA_8BIT
from humming.core.families.mma_blockscaled.family import FAMILY as MMA_BLOCKSCALED
from humming.core.families.mma_wna16.family import FAMILY as MMA_WNA16
from humming.core.families.moe_mma_8bit.family import FAMILY as MOE_MMA_8BIT
from humming.core.families.moe_register_a.family import FAMILY as MOE_REGISTER_A
from humming.core.families.moe_register_a8.family import FAMILY as MOE_REGISTER_A8
from humming.core.families.moe_tcgen05.family import FAMILY as MOE_TCGEN05
from humming.core.families.moe_tcgen05.family import W8A8 as MOE_TCGEN05_W8A8
from humming.core.families.moe_wgmma_8bit.family import FAMILY as MOE_WGMMA_8BIT
from humming.core.families.moe_wna16.family import FAMILY as MOE_WNA16
from humming.core.families.register_a.family import FAMILY as REGISTER_A
from humming.core.families.register_a8.family import FAMILY as REGISTER_A8
from humming.core.families.tcgen05.family import BLOCKSCALED as TCGEN05_BLOCKSCALED
from humming.core.families.tcgen05.family import W4A8 as TCGEN05_W4A8
from humming.core.families.tcgen05.family import W8A8 as TCGEN05_W8A8
from humming.core.families.tcgen05.family import WNA16 as TCGEN05_WNA16
from humming.core.families.wgmma_8bit.family import FAMILY as WGMMA_8BIT
from humming.core.families.wgmma_dequant.family import FAMILY as WGMMA_DEQUANT
from humming.core.family import Family
from humming.core.plan import row_scale_refusal
from humming.core.problem import Problem
from humming.core.routes.families import UPCONVERT, WIDENED
from humming.errors import ShapeError, UnsupportedOnDevice

# Asked first to last. Quantized activations: widened onto the WnA16 kernels where measured faster, then the kernels
# of the instruction path the scheme runs (tcgen05, block-scaled mma.sync, upconvert, the 8-bit kernels from the
# register-A one down). WnA16: the register-A prefill form from its threshold, the mma.sync family's rules (which
# keep their register-A plans and hand the rest of prefill on), the wgmma and tcgen05 dequantizing kernels.
FAMILIES: tuple[Family, ...] = (
    WIDENED,
    TCGEN05_BLOCKSCALED, TCGEN05_W4A8, TCGEN05_W8A8, MMA_BLOCKSCALED,
    UPCONVERT,
    REGISTER_A8, WGMMA_8BIT, MMA_8BIT,
    REGISTER_A, MMA_WNA16, WGMMA_DEQUANT, TCGEN05_WNA16,
)
# Mixture-of-experts GEMMs (Problem.form indexed / grouped / masked) choose among these.
MOE_FAMILIES: tuple[Family, ...] = (MOE_TCGEN05, MOE_TCGEN05_W8A8, MOE_WGMMA_8BIT, MOE_REGISTER_A8, MOE_REGISTER_A,
                                    MOE_MMA_8BIT, MOE_WNA16)
BY_NAME = {f.name: f for f in FAMILIES + MOE_FAMILIES}
# (the MoE families first: each owns its own paths, while a dense family may own a plan by its instruction alone)
KERNEL_FAMILIES = tuple(f for f in MOE_FAMILIES + FAMILIES if not f.is_route)


@dataclass(frozen=True)
class Selection:
    """What ``select`` chose: the family (or route) that took the problem, its plan, the family whose kernel runs
    the plan, and why each family asked before it did not take the problem."""

    family: Family
    plan: object
    kernel: Family
    refusals: tuple[tuple[str, str], ...] = ()

    def explain(self) -> str:
        lines = [f"family {self.family.name}" + (f" (on the {self.kernel.name} kernels)" if self.family.is_route else "")]
        lines += [f"  not {name}: {why}" for name, why in self.refusals]
        return "\n".join(lines)


PADDED_REFUSAL = "the weight is padded"  # how the refusal of a family without tails begins


def _refusal(family: Family, problem: Problem, caps, ask) -> str | None:
    """The family's refusal, and for a padded weight (Problem.padded) the families whose kernels read and write only
    whole atoms (routes plan on other families, which are asked in turn)."""
    if problem.padded and not family.tails and not family.is_route:
        return (f"{PADDED_REFUSAL} to {problem.n}x{problem.k} (N={problem.n_out} K={problem.k_act}); its kernels "
                f"read activations and store outputs in whole 64-column tiles")
    return family.refusal(problem, caps, ask)


def _padded_plan(plan, problem: Problem):
    """The plan of a padded problem: the real N and K for the kernel's loads and stores, and what padding costs."""
    if not problem.padded or plan.padded:
        return plan
    from humming.core.quant.padding import pad_note

    return replace(plan, n_out=problem.n_out, k_act=problem.k_act,
                   reasons=(pad_note(problem.n_out, problem.k_act, problem.n, problem.k),) + plan.reasons)


def _unverified_off(family: Family) -> bool:
    return family.unverified is not None and not settings.flag("HUMMING_UNVERIFIED_KERNELS")


class _Asker:
    """The ``ask`` a family's refusal gets: would another family (not excluded) take this problem, and plan it within
    the profile's limits?"""

    def __init__(self, problem: Problem, caps, allowed):
        self.problem, self.caps, self.allowed = problem, caps, allowed

    def __call__(self, name: str) -> bool:
        family = BY_NAME[name]
        if not self.allowed(family) or _unverified_off(family):
            return False
        if _refusal(family, self.problem, self.caps, self) is not None:
            return False
        if family.is_route:
            return True
        try:
            return not limit_refusal(family.plan(self.problem, self.caps), self.caps)
        except (UnsupportedOnDevice, ShapeError):  # (asked, not chosen: a shape its kernels cannot run is a no)
            return False


class Registry:
    """``select`` over a table of families (FAMILIES by default)."""

    def __init__(self, families: tuple[Family, ...] = FAMILIES):
        self.families = families

    def select(self, problem: Problem, caps, *, row_scale: bool = False) -> Selection:
        """The first family that takes the problem, and its plan; ``row_scale``: only families whose kernels take
        per-token output scales. A family whose plan breaks a declared limit (``limit_refusal``) or which cannot plan
        the problem on this device (UnsupportedOnDevice from its planner) hands it on, and the plan chosen says so.
        Raises the first such planning error when no family plans it, ShapeError from a planner at once, or
        UnsupportedOnDevice when none takes it."""
        def allowed(f: Family) -> bool:
            return not row_scale or f.is_route or f.row_scale
        if caps.limits.smem_per_block_kb is None:  # (every planner sizes its tiles by it)
            raise UnsupportedOnDevice(f"{caps.name} declares no limits.smem_per_block_kb"
                                      + (" (an abstract family profile: plan for one of its devices' profiles)"
                                         if getattr(caps, "abstract", False) else "")
                                      + "; the planners size their tiles by it")

        ask = _Asker(problem, caps, allowed)
        refusals: list[tuple[str, str]] = []
        notes: list[str] = []
        failed: list[UnsupportedOnDevice] = []  # planning errors of families that took the problem
        for family in self.families:
            if not allowed(family):
                continue
            why = _refusal(family, problem, caps, ask)
            if why is None and _unverified_off(family):
                if family.announce:
                    notes.append(family.unverified(caps))
                why = family.unverified(caps)
            if why is not None:
                refusals.append((family.name, why))
                continue
            try:
                p = family.plan(problem, caps, self) if family.is_route else family.plan(problem, caps)
            except UnsupportedOnDevice as exc:  # (e.g. no tile fits the shared memory): a later family may plan it
                failed.append(exc)
                refusals.append((family.name, str(exc).splitlines()[0]))
                notes.append(f"not {family.name}: {str(exc).splitlines()[0]}")
                continue
            over = limit_refusal(p, caps)
            if over:  # the plan breaks a limit the profile declares: a later family may fit
                refusals.append((family.name, over))
                notes.append(f"not {family.name}: {over}")
                continue
            for later in self.families[self.families.index(family) + 1:]:
                if later.announce and allowed(later) and _unverified_off(later) and \
                        _refusal(later, problem, caps, ask) is None:
                    notes.append(later.unverified(caps))
            if notes:
                p = replace(p, reasons=p.reasons + tuple(notes))
            p = _padded_plan(p, problem)
            return Selection(family, p, family_of(p), tuple(refusals))
        if failed:
            raise failed[0]
        if problem.padded:
            raise UnsupportedOnDevice(
                f"{problem.scheme.name} on {caps.name}: N={problem.n_out} K={problem.k_act} are not whole 64 x 64 weight "
                f"atoms, and no family that takes padded weights runs the scheme: "
                + "; ".join(f"{n}: {w}" for n, w in refusals if not w.startswith(PADDED_REFUSAL))
                + "; pad N and K to multiples of 64")
        if problem.quantized_activations and not problem.is_moe:
            from humming.core.families.runnable import no_kernel

            raise no_kernel(problem, caps)
        raise UnsupportedOnDevice(f"{problem.scheme.name} on {caps.name}: no kernel family takes M={problem.m} "
                                  f"N={problem.n} K={problem.k}: " + "; ".join(f"{n}: {w}" for n, w in refusals))


WARP_SIZE = 32  # every generated kernel's warp (lane arithmetic, shuffles, mma fragments)


def cluster_size(plan) -> int:
    """Blocks in one thread-block cluster of the plan's launch (1: no clusters)."""
    dims = getattr(plan, "cluster_dims", None)
    return dims[0] * dims[1] * dims[2] if dims else 1


def limit_refusal(plan, caps) -> str:
    """Why a plan breaks a limit the profile declares ("" when it fits): threads per block, warp size, shared memory
    per block, thread-block clusters (where the profile declares none, or larger than max_cluster_size). Registers per
    thread are known only once the kernel is compiled (humming.core.runtime.compiled.check_registers)."""
    lim = caps.limits
    blocks = cluster_size(plan)
    if blocks > 1 and not (caps.memory.cluster_dsmem or caps.memory.cluster_multicast):
        return (f"its plan launches thread-block clusters of {blocks} blocks; {caps.name} declares no clusters "
                f"(memory.cluster_dsmem / cluster_multicast)")
    if lim.max_cluster_size is not None and blocks > lim.max_cluster_size:
        return (f"its plan launches thread-block clusters of {blocks} blocks; {caps.name} allows "
                f"{lim.max_cluster_size} (max_cluster_size)")
    if lim.warp_size is not None and lim.warp_size != WARP_SIZE:
        return f"the kernels are written for {WARP_SIZE}-thread warps; {caps.name} declares warp_size {lim.warp_size}"
    if lim.max_threads_per_block is not None and plan.threads > lim.max_threads_per_block:
        return (f"its plan runs {plan.threads} threads per block; {caps.name} allows {lim.max_threads_per_block} "
                f"(max_threads_per_block)")
    if lim.smem_per_block_kb is not None and plan.smem_bytes > lim.smem_per_block_kb * 1024:
        return (f"its plan needs {plan.smem_bytes} B of shared memory per block; {caps.name} allows "
                f"{lim.smem_per_block_kb * 1024} (smem_per_block_kb)")
    return ""


DEFAULT = Registry()
MOE = Registry(MOE_FAMILIES)


def select(problem: Problem, caps, *, row_scale: bool = False) -> Selection:
    """The default registry's choice (see Registry.select); mixture-of-experts problems choose among MOE_FAMILIES."""
    return (MOE if problem.is_moe else DEFAULT).select(problem, caps, row_scale=row_scale)


def refusal(name: str, problem: Problem, caps) -> str | None:
    """Why the family (or route) ``name`` does not take the problem, asked as ``select`` asks it (None: it takes it;
    families asked before it may still take the problem first)."""
    family = BY_NAME[name]
    why = _refusal(family, problem, caps, _Asker(problem, caps, lambda f: True))
    if why is None and _unverified_off(family):
        why = family.unverified(caps)
    return why


def family_of(plan) -> Family:
    """The family whose generator writes this plan's kernel."""
    for family in KERNEL_FAMILIES:
        if family.owns(plan):
            return family
    raise ValueError(f"no kernel family owns plan {plan.kernel_name} ({plan.family} {plan.path})")


def kernel_source(plan, backend, caps=None) -> str:
    """The CUDA C++ of a plan's kernel."""
    if plan.row_scale and row_scale_refusal(plan):
        raise ValueError(f"row_scale: {row_scale_refusal(plan)}")
    return family_of(plan).source(plan, backend, caps)
