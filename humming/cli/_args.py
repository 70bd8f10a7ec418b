"""Argument parsing shared by the commands: sizes (M, N, K, group sizes) are positive ints that fit a C int."""
from __future__ import annotations

import argparse
import re

from humming.errors import ShapeError

MAX_DIM = 2**31 - 1  # (humming.core.quant.arguments.MAX_DIM, without importing torch for a usage error)


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number in [1, 2**31 - 1] (sizes, group sizes, counts); a usage error naming
    the range otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (expected 1 to {MAX_DIM})") from None
    if not 1 <= value <= MAX_DIM:
        raise argparse.ArgumentTypeError(f"{value} is out of range (expected 1 to {MAX_DIM})")
    return value


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'8192x8192,28672x8192' -> [(8192, 8192), (28672, 8192)] (N x K: output x input features)."""
    shapes = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        match = re.fullmatch(r"(\d+)\s*[xX*]\s*(\d+)", item)
        if not match:
            raise ShapeError(f"shape {item!r} is not NxK (e.g. 8192x8192: N output features, K input features)")
        n, k = int(match.group(1)), int(match.group(2))
        if not (1 <= n <= MAX_DIM and 1 <= k <= MAX_DIM):
            raise ShapeError(f"shape {item!r}: N and K must be from 1 to {MAX_DIM}")
        shapes.append((n, k))
    return shapes


def parse_ms(text: str) -> list[int]:
    """'1,16,128' -> [1, 16, 128]."""
    try:
        ms = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise ShapeError(f"--m {text!r}: expected comma-separated positive integers, e.g. 1,16,128") from None
    if not ms or min(ms) < 1 or max(ms) > MAX_DIM:
        raise ShapeError(f"--m {text!r}: expected comma-separated integers from 1 to {MAX_DIM}, e.g. 1,16,128")
    return ms


def unique(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out


def knob_assignment(text: str) -> tuple[str, object]:
    """An argparse ``type``: 'moe.wgmma_8bit_min_rows=16' -> ('moe.wgmma_8bit_min_rows', 16) (the value as JSON: a number,
    true / false, null or a quoted string); the knob's name and value are checked when applied."""
    import json

    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE (e.g. moe.wgmma_8bit_min_rows=16)")
    try:
        return name.strip(), json.loads(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value must be JSON (a number, true, false, null or "
                                         f"\"text\")") from None
