"""The contract of a kernel family: what it takes, how it plans, which source it writes and which weights it runs
on. Each family fills one in (``humming/core/families/<name>/family.py``); ``humming.core.registry`` orders them."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from humming.core.plan import Tiles

# How the activations reach a family's kernel (humming.core.runtime.inputs):
INPUTS = (
    "x",          # the 16-bit activations as they are (WnA16)
    "codes8",     # quantized to 8-bit codes with their scales (W8A8 / W4A8 on 8-bit tensor cores)
    "codes16",    # quantized, the 8-bit codes widened exactly to 16 bits, scales in the epilogue (widened route)
    "upconvert",  # quantized (NVFP4 / MX), dequantized exactly to 16 bits without the global scale
    "e2m1",       # quantized to packed e2m1 codes and block-scale bytes (block-scaled W4A4 kernels)
)


@dataclass(frozen=True)
class Family:
    """One kernel family.

    ``refusal(problem, caps, ask)``: why the family does not take the problem, or None; ``ask(name)`` tells whether
    another family would (for rules that hand a problem on). ``plan(problem, caps)``: its Plan (it may raise
    ShapeError / UnsupportedOnDevice naming what is missing). ``owns(plan)``: the plans whose source ``source(plan,
    backend, caps)`` writes. ``pack(qw, dtype, layout, caps)``: the family's prepared weights for a plan's layout.
    ``inputs``: how x reaches the kernel (INPUTS). ``row_scale``: its kernels take per-token output scales.
    ``unverified(caps)``: set for a family compiled for GPUs it never ran on: the note saying so (it runs only with
    HUMMING_UNVERIFIED_KERNELS=1); ``announce``: where it would have taken a problem but for that, the chosen plan
    carries the note. ``tiles``: the class of its plans' tiles (Tiles, or its own subclass with its options).
    ``tails``: its plans take padded weights (``Problem.padded``): activations read up to the real K, outputs stored
    up to the real N."""

    name: str
    doc: str
    refusal: Callable
    plan: Callable
    inputs: str = "x"
    owns: Callable | None = None
    source: Callable | None = None
    pack: Callable | None = None
    row_scale: bool = False
    unverified: Callable | None = None
    announce: bool = False
    tiles: type = Tiles
    tails: bool = False

    def __post_init__(self):
        if self.inputs not in INPUTS:
            raise ValueError(f"family {self.name}: inputs {self.inputs!r} is not one of {INPUTS}")
        if (self.owns is None) != (self.source is None) or (self.source is None) != (self.pack is None):
            raise ValueError(f"family {self.name}: owns, source and pack come together (a route has none)")

    @property
    def is_route(self) -> bool:
        """A route plans on other families' kernels (its own plan selects them) and has no kernel of its own."""
        return self.source is None
