"""Fixtures every test directory may use."""
from __future__ import annotations

import contextlib

import pytest


@pytest.fixture
def set_knobs():
    """set_knobs({"register_a.raster": 0, ...}): tuning-knob overrides (humming.core.tuning.knobs) for the rest of
    the test; several calls add up, a later value of a knob wins."""
    from humming.core.tuning import knobs

    with contextlib.ExitStack() as stack:
        def apply(values: dict) -> None:
            stack.enter_context(knobs.override(values))

        yield apply
