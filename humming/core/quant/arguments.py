"""The checks the public entry points (humming.plan, humming.gemm, humming.nn.QuantLinear) make on their arguments:
problem sizes are positive ints that fit a C int, activations are tensors with a feature dimension, weights are
QuantizedWeights. Each failure is a ShapeError naming the argument, what was given and a fix that works."""
from __future__ import annotations

import math
import operator

import torch

from humming.errors import ShapeError

__all__ = ["MAX_DIM", "dimension", "dimensions", "activation", "quantized_weight", "features_error", "rows"]

#: The largest M, N or K: the kernels take sizes (and M in particular) as 32-bit C ints.
MAX_DIM = 2**31 - 1

_ROLES = {"M": "rows of x (tokens)", "N": "output features (rows of the weight)",
          "K": "input features (columns of the weight)"}


def _suggest(value) -> str:
    """A whole-number spelling of ``value`` where it has an obvious one ('16', 16.0, 1.5 -> 2), else ''."""
    try:
        number = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return ""
    if not math.isfinite(number) or number < 1:
        return ""
    return str(math.ceil(number))


def dimension(name: str, value) -> int:
    """``value`` as the problem size ``name`` ("M", "N" or "K"): an int (numpy and 0-d integer tensors too; bool,
    float, str and None refused) in [1, 2**31 - 1]. Raises ShapeError with a fix otherwise."""
    role = _ROLES.get(name, "elements")
    if isinstance(value, bool):
        raise ShapeError(f"{name} must be an int (the number of {role}), not the bool {value}")
    try:
        v = operator.index(value)
    except TypeError:
        hint = _suggest(value)
        fix = f"pass {name}={hint}" if hint else f"pass the number of {role} as an int"
        raise ShapeError(f"{name} must be an int (the number of {role}), got {value!r} "
                         f"({type(value).__name__}); {fix}") from None
    if v < 1:
        raise ShapeError(f"{name} must be at least 1 (the number of {role}), got {v}")
    if v > MAX_DIM:
        split = "split x into chunks of at most" if name == "M" else "split the weight into parts of at most"
        raise ShapeError(f"{name}={v} does not fit the kernels' 32-bit C int (at most {MAX_DIM}); {split} "
                         f"{MAX_DIM} {role} and call once per chunk")
    return v


def dimensions(m, n, k) -> tuple[int, int, int]:
    """(M, N, K) checked by ``dimension``."""
    return dimension("M", m), dimension("N", n), dimension("K", k)


def rows(m: int) -> None:
    """The check gemm makes on every call: x's row count fits the kernels' C int (one int comparison)."""
    if m > MAX_DIM:
        raise ShapeError(f"x has {m} rows (M) but the kernels take M as a 32-bit C int (at most {MAX_DIM}); split x "
                         f"into chunks of at most {MAX_DIM} rows and call once per chunk")


def _kind(value) -> str:
    kind = type(value)
    return "None" if value is None else f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins.")


def activation(x, where: str) -> None:
    """``x`` is a torch.Tensor with at least one dimension (the K features); a numpy array gets the conversion."""
    if not isinstance(x, torch.Tensor):
        fix = "torch.from_numpy(x)" if type(x).__module__ == "numpy" else "a torch.Tensor [..., K]"
        raise ShapeError(f"{where}: x must be a torch.Tensor [..., K], got {_kind(x)}; pass {fix}")
    if x.dim() == 0:
        raise ShapeError(f"{where}: x must have a feature dimension [..., K], got a 0-d tensor; pass x.reshape(1, -1) "
                         "for one token")


def features_error(x: torch.Tensor, k: int) -> ShapeError:
    """The error for an ``x`` whose last dimension is not the weight's K (0-d included)."""
    if x.dim() == 0:
        return ShapeError(f"x must have a feature dimension [..., K={k}], got a 0-d tensor; pass x.reshape(1, -1) "
                          "for one token")
    return ShapeError(f"x has {x.shape[-1]} input features but the weight expects K={k}")


def quantized_weight(qw, where: str) -> None:
    """``qw`` is a humming QuantizedWeight (what humming.quantize and humming.checkpoints return)."""
    from humming.core.quant.quantize import QuantizedWeight

    if not isinstance(qw, QuantizedWeight):
        fix = ("quantize it first: humming.quantize(w, scheme)" if isinstance(qw, torch.Tensor)
               else "humming.quantize(w, scheme) or a weight from humming.checkpoints")
        raise ShapeError(f"{where} takes a humming QuantizedWeight, got {_kind(qw)}; {fix}")
