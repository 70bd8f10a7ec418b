"""Argument parsing shared by the `tune` and `build` commands."""
from __future__ import annotations

import re

from humming.errors import ShapeError


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'8192x8192,28672x8192' -> [(8192, 8192), (28672, 8192)] (N x K: output x input features)."""
    shapes = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        match = re.fullmatch(r"(\d+)\s*[xX*]\s*(\d+)", item)
        if not match:
            raise ShapeError(f"shape {item!r} is not NxK (e.g. 8192x8192: N output features, K input features)")
        shapes.append((int(match.group(1)), int(match.group(2))))
    return shapes


def parse_ms(text: str) -> list[int]:
    """'1,16,128' -> [1, 16, 128]."""
    try:
        ms = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise ShapeError(f"--m {text!r}: expected comma-separated positive integers, e.g. 1,16,128") from None
    if not ms or min(ms) < 1:
        raise ShapeError(f"--m {text!r}: expected comma-separated positive integers, e.g. 1,16,128")
    return ms


def unique(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out
