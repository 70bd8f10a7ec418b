"""The randomized GEMM cases of the reliability tests: schemes x N x K x M x dtype x bias, drawn from a fixed seed list
so that a failure reproduces (``case(seed)``). Shapes include the odd ones real models have: multiples of 16 that are
not multiples of 64 (vocabulary slices, tensor-parallel shards), which humming pads once when it prepares the weight.

    python -c "from tests.random_cases import case; print(case(17))"
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import humming

SEEDS = tuple(range(240))  # the GPU test runs every seed; the CPU test plans every seed on the shipped Hopper profiles
SCHEMES = humming.schemes.names()
# sizes of real layers and shards: whole atoms and multiples of 16 that are not (96: Qwen3-MoE I=768 at TP8; 2880:
# gpt-oss; 1008, 4112, 208: slices)
SIZES = (64, 96, 128, 208, 256, 512, 1008, 1024, 1536, 2048, 2880, 4096, 4112)
MS = (0, 1, 2, 3, 7, 16, 17, 33, 64, 100, 128, 192, 256, 300, 512, 1000, 2048)


@dataclass(frozen=True)
class Case:
    seed: int
    scheme: str  # a preset, with its group size changed where the preset's does not divide K
    m: int
    n: int
    k: int
    dtype: str  # "f16" or "bf16"
    bias: bool

    def __str__(self) -> str:
        return f"seed {self.seed}: {self.scheme} M={self.m} N={self.n} K={self.k} {self.dtype}{' bias' if self.bias else ''}"


def _scheme_for(name: str, k: int, rng: random.Random) -> str | None:
    """The preset, or the preset with a group size that divides K (None: the preset's format has no such group)."""
    sch = humming.schemes.get(name)
    g = sch.weight_scale.group_size
    if sch.weight_scale.granularity == "block":
        return name if k % 128 == 0 else None
    if not g or k % g == 0:
        return name
    if g in (16, 32):  # NVFP4 / MX: the format fixes the group
        return None
    fits = [s for s in (32, 64, 128) if k % s == 0]
    return f"{name}[group_size={rng.choice(fits)}]" if fits else None


def case(seed: int) -> Case:
    rng = random.Random(seed)
    while True:
        name = rng.choice(SCHEMES)
        n, k = rng.choice(SIZES), rng.choice(SIZES)
        scheme = _scheme_for(name, k, rng)
        if scheme is None:
            continue
        if humming.schemes.get(name).weight_scale.granularity == "block" and n % 128:
            continue  # 128x128 weight blocks: N whole blocks (no padded kernel runs them)
        return Case(seed, scheme, rng.choice(MS), n, k, rng.choice(("f16", "bf16")), rng.random() < 0.5)
