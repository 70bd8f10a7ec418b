"""What is asked of a kernel: one GEMM C[M, N] = A[M, K] @ W[N, K]^T of a scheme, and everything the choice of a
kernel family depends on besides the device."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from humming.options import DEFAULT, GemmOptions


@dataclass(frozen=True)
class Problem:
    """``scheme``: the quantization scheme (with ``act`` set when activations are quantized); ``act``: the 16-bit
    type of x and of the output ("f16" / "bf16"); ``options``: the caller's numerics; ``act_order``: the weights carry
    a K permutation (GPTQ desc_act). Mixture-of-experts GEMMs (``form`` not "dense"): ``experts`` stacked weights,
    each of the ``m`` tokens sent to ``top_k`` of them; ``form`` "indexed" (rows gathered by routing), "grouped"
    (rows contiguous per expert) or "masked" (a fixed capacity of rows per expert). A weight padded to whole atoms
    (humming.core.quant.padding): ``n`` and ``k`` are the padded sizes, ``n_out`` / ``k_act`` the real ones (0: not
    padded); only families with ``tails`` take it."""

    scheme: object
    m: int
    n: int
    k: int
    act: str = "f16"
    options: GemmOptions = DEFAULT
    act_order: bool = False
    form: str = "dense"
    experts: int = 0
    top_k: int = 1
    n_out: int = 0
    k_act: int = 0
    _memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def is_moe(self) -> bool:
        return self.form != "dense"

    @property
    def padded(self) -> bool:
        """The weight was padded: the kernel stores N columns of ``n_out`` and reads ``k_act`` of K."""
        return bool(self.n_out or self.k_act)

    @property
    def quantized_activations(self) -> bool:
        return bool(getattr(self.scheme, "act", None))

    def with_(self, **changes) -> Problem:
        """A copy with fields changed (its memo is not carried over)."""
        return replace(self, _memo={}, **changes)

    def memo(self, key, make):
        """``make()`` once per problem: the planning steps several families ask about (a layout, a path choice)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


@functools.lru_cache(maxsize=256)
def _scheme_by_name(name: str):
    from humming.core.quant.schemes import get

    return get(name)


def scheme_of(scheme):
    """A Scheme from a Scheme or a preset's name."""
    return _scheme_by_name(scheme) if isinstance(scheme, str) else scheme


def dense_problem(scheme, m: int, n: int, k: int, act: str = "f16", options: GemmOptions = DEFAULT,
                  act_order: bool = False) -> Problem:
    """The dense GEMM of a weight [N, K]: N and K that are multiples of 16 but not of 64 become a padded problem
    (humming.core.quant.padding; ShapeError for other sizes)."""
    from humming.core.quant.padding import ATOM, padded_dims

    if n % ATOM == 0 and k % ATOM == 0:
        return Problem(scheme, m, n, k, act, options, act_order=act_order)
    n_pad, k_pad = padded_dims(n, k)
    return Problem(scheme, m, n_pad, k_pad, act, options, act_order=act_order, n_out=n, k_act=k)
