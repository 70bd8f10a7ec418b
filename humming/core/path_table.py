"""For each preset scheme, which kernel family a profile runs it on at a decode and a prefill size, and why: the
``paths`` table of ``humming.device.info()`` and the support matrix (``python -m humming support``)."""
from __future__ import annotations

import math

from humming.core.problem import Problem, scheme_of
from humming.core.quant.schemes import names
from humming.core.registry import select
from humming.errors import SchemeError, ShapeError, UnsupportedOnDevice

DECODE_M, PREFILL_M = 16, 1024
N = K = 4096


def _act(caps) -> str:
    return "f16" if caps.find_mma(family="mma_sync", a_type="f16") else "bf16"


def _shape(sch) -> tuple[int, int]:
    """A K its groups divide (and a multiple of 64)."""
    gs = sch.weight_scale.group_size
    k = K if not gs else max(K, gs) // gs * gs
    return N, math.lcm(k, 64)


def describe(plan) -> str:
    shape = "x".join(map(str, plan.instruction.shape))
    types = (plan.instruction.a_type if plan.instruction.a_type == plan.instruction.b_type
             else f"{plan.instruction.a_type}x{plan.instruction.b_type}")
    return f"{plan.family} m{shape} {types}"


def row(caps, name: str, m: int = DECODE_M, prefill_m: int = PREFILL_M) -> dict:
    """One scheme's row: the family and instruction at M=``m``, the family at M=``prefill_m``, and the reason."""
    sch = scheme_of(name)
    out = {"scheme": name}
    n, k = _shape(sch)
    try:
        decode = select(Problem(sch, m, n, k, _act(caps)), caps)
    except (UnsupportedOnDevice, SchemeError, ShapeError) as exc:
        out.update(family=None, instruction=None, path=None, reason=str(exc).splitlines()[0])
        return out
    p = decode.plan
    out.update(family=p.family, instruction=describe(p), path=p.path, kernel=decode.kernel.name,
               route=decode.family.name if decode.family.is_route else None)
    reason = p.reasons[0] if p.reasons else ""
    try:
        prefill = select(Problem(sch, prefill_m, n, k, _act(caps)), caps)
        kernels = f"M={m}: {decode.family.name}" + (f"; M={prefill_m}: {prefill.family.name}"
                                                     if prefill.family is not decode.family else "")
        out["prefill"] = prefill.family.name if prefill.family.is_route else prefill.kernel.name
    except (UnsupportedOnDevice, SchemeError, ShapeError) as exc:
        kernels = f"M={m}: {decode.family.name}; M={prefill_m}: {str(exc).splitlines()[0]}"
    notes = [r for r in p.reasons if "not yet validated" in r]
    out["reason"] = f"{reason} [{kernels}]" + (f" ({notes[0]})" if notes else "")
    return out


def path_table(caps, m: int = DECODE_M, prefill_m: int = PREFILL_M) -> list[dict]:
    """One row per preset scheme (``row``)."""
    return [row(caps, name, m, prefill_m) for name in names()]
