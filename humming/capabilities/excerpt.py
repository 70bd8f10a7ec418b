"""Bounded excerpts of YAML values for error messages: a message never formats a whole large value."""
from __future__ import annotations

import reprlib
from typing import Any

MAX_EXCERPT = 120  # characters of a value shown in a message, at most

_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlong = 40


def excerpt(value: Any, limit: int = MAX_EXCERPT) -> str:
    """repr(value), nested containers and long strings shortened with '...', and at most `limit` characters."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = _REPR.repr(value)
    except ValueError:  # a huge integer nested in a container
        text = f"a {type(value).__name__} holding a huge integer"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = MAX_EXCERPT) -> str:
    """`text` itself (no quotes), cut to at most `limit` characters with '...'."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
