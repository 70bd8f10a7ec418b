"""Handles of stacked weights for torch.compile: the custom op ``humming::moe_gemm`` (humming.moe), which a traced
graph calls in place of ``humming.moe_gemm``, names its weight by a handle (an index into ``WEIGHTS``) made once by
``handle(qw)`` before tracing (``QuantMoE.prepare`` does it)."""
from __future__ import annotations

import threading

WEIGHTS: list = []  # stacked weights by handle
_lock = threading.Lock()


def handle(qw) -> int:
    """The handle of a stacked weight (made once, kept on the weight)."""
    h = qw.__dict__.get("_humming_moe_handle")
    if h is None:
        with _lock:
            h = qw.__dict__.get("_humming_moe_handle")
            if h is None:
                WEIGHTS.append(qw)
                h = qw.__dict__["_humming_moe_handle"] = len(WEIGHTS) - 1
    return h
