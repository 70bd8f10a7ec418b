"""Every case of the randomized GPU test (tests/random_cases.py) plans on the shipped Hopper, Ampere and Blackwell
profiles (no GPU needed): the registry takes each one or names why (only the formats a profile has no path for)."""
import pytest

import humming
from humming.errors import UnsupportedOnDevice
from tests.random_cases import SEEDS, case


@pytest.mark.parametrize("profile", ["nvidia-h100", "nvidia-h200", "nvidia-h20", "nvidia-a100", "nvidia-b200"])
def test_every_random_case_plans(profile):
    padded = 0
    for seed in SEEDS:
        c = case(seed)
        try:
            p = humming.plan(c.scheme, max(c.m, 1), c.n, c.k, profile=profile, act=c.dtype)
        except UnsupportedOnDevice as exc:  # a format the profile has no instruction path for (fp8 on Ampere)
            assert profile == "nvidia-a100" and "e4m3" in str(exc), f"{c}: {exc}"
            continue
        if c.n % 64 or c.k % 64:
            padded += 1
            assert (p.n_out, p.k_act) == (c.n, c.k) and p.n % 64 == 0 and p.k % 64 == 0, f"{c}: {p.summary()}"
            assert any(r.startswith("padded once at prepare") for r in p.reasons), f"{c}: {p.explain()}"
        else:
            assert not p.padded and (p.n, p.k) == (c.n, c.k), f"{c}: {p.summary()}"
    assert padded >= 60  # the seed list keeps many odd shapes
