"""A tiny strict checker for YAML structures: every error names the file and the key path."""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from humming.capabilities.excerpt import excerpt
from humming.errors import ProfileError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
MAX_KEY_SHOWN = 60  # a key longer than this is cut in the key paths of messages
MAX_IDENT = 100  # characters in a name (profile, target, extension, key of vendor data)
MAX_MMA_DIM = 1024  # an MMA shape's m, n, k; the largest known is 256
MAX_CC = 1000  # a compute capability's major or minor number


@dataclass(frozen=True)
class Where:
    """A position in a YAML file: the file's display name and a key path like 'tcgen05.kinds_remove[0]'."""

    file: str
    path: str = ""

    def key(self, name: str) -> Where:
        name = name if len(name) <= MAX_KEY_SHOWN else name[:MAX_KEY_SHOWN] + "..."
        return Where(self.file, f"{self.path}.{name}" if self.path else name)

    def item(self, index: int) -> Where:
        return Where(self.file, f"{self.path}[{index}]")

    def fail(self, message: str) -> NoReturn:
        raise ProfileError(f"{self.file}: {self.path or '<top>'}: {message}")


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def closest(word: str, choices: Iterable[str]) -> str:
    near = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""


class Spec:
    def check(self, value: Any, where: Where) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class Str(Spec):
    def check(self, value: Any, where: Where) -> None:
        if not isinstance(value, str):
            hint = " (YAML read it as a boolean; quote it)" if isinstance(value, bool) else ""
            where.fail(f"expected a string, got {type_name(value)} {excerpt(value)}{hint}")


class Ident(Spec):
    def check(self, value: Any, where: Where) -> None:
        Str().check(value, where)
        if len(value) > MAX_IDENT:
            where.fail(f"{excerpt(value, 60)} is longer than {MAX_IDENT} characters; names are short")
        if not _IDENT.match(value):
            where.fail(f"{excerpt(value)} is not a valid name (letters, digits, '_', '-', '.')")


class Int(Spec):
    """An integer, at least `minimum`, at most `maximum` (when given), one of `choices` (when given)."""

    def __init__(self, minimum: int | None = 0, choices: tuple[int, ...] = (), maximum: int | None = None):
        self.minimum, self.choices, self.maximum = minimum, choices, maximum

    def check(self, value: Any, where: Where) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            where.fail(f"expected an integer, got {type_name(value)} {excerpt(value)}")
        if self.choices and value not in self.choices:
            where.fail(f"{excerpt(value)} is not one of {list(self.choices)}")
        if self.minimum is not None and value < self.minimum:
            where.fail(f"{excerpt(value)} is below the minimum {self.minimum}")
        if self.maximum is not None and value > self.maximum:
            where.fail(f"{excerpt(value)} is above the maximum {self.maximum}")


class Num(Spec):
    """A finite number (never NaN or infinity), not negative; above zero when `positive`; at most `maximum`."""

    def __init__(self, maximum: float | None = None, positive: bool = False):
        self.maximum, self.positive = maximum, positive

    def check(self, value: Any, where: Where) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            where.fail(f"expected a number, got {type_name(value)} {excerpt(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            where.fail(f"{value} is not a finite number (NaN and infinity are refused; null means unknown)")
        if value < 0:
            where.fail(f"{excerpt(value)} is negative")
        if self.positive and value == 0:
            where.fail("0 is not allowed (must be above zero; null means unknown)")
        if self.maximum is not None and value > self.maximum:
            where.fail(f"{excerpt(value)} is above the maximum {self.maximum:g}")


class Bool(Spec):
    def check(self, value: Any, where: Where) -> None:
        if not isinstance(value, bool):
            where.fail(f"expected true or false, got {type_name(value)} {excerpt(value)}")


class Word(Spec):
    """A string from a fixed vocabulary."""

    def __init__(self, words: tuple[str, ...], what: str = "name"):
        self.words, self.what = words, what

    def check(self, value: Any, where: Where) -> None:
        Str().check(value, where)
        if value not in self.words:
            where.fail(f"unknown {self.what} {excerpt(value)} (known: {', '.join(self.words)}){closest(value, self.words)}")


class Version(Spec):
    """A compiler version: the string "13.4" or the list [13, 4]."""

    def check(self, value: Any, where: Where) -> None:
        if isinstance(value, float):
            where.fail(f"write versions as a string, e.g. \"{value}\" (a YAML number loses '13.10' vs '13.1')")
        if isinstance(value, str) and re.fullmatch(r"\d{1,4}\.\d{1,4}", value):
            return
        if isinstance(value, list) and len(value) == 2 and all(type(v) is int and 0 <= v < 10_000 for v in value):
            return
        where.fail(f"expected a version like \"13.4\" or [13, 4], got {excerpt(value)}")


class Pair(Spec):
    """A compute capability [major, minor]."""

    def check(self, value: Any, where: Where) -> None:
        if not (isinstance(value, list) and len(value) == 2 and all(type(v) is int and 0 <= v <= MAX_CC for v in value)):
            where.fail(f"expected [major, minor], got {excerpt(value)}")


class Triple(Spec):
    """An MMA shape [m, n, k]."""

    def check(self, value: Any, where: Where) -> None:
        if not (isinstance(value, list) and len(value) == 3 and all(type(v) is int and 0 < v <= MAX_MMA_DIM for v in value)):
            where.fail(f"expected a shape [m, n, k] of integers from 1 to {MAX_MMA_DIM}, got {excerpt(value)}")


class Free(Spec):
    """Any YAML value (vendor data)."""

    def check(self, value: Any, where: Where) -> None:
        return None


class Nullable(Spec):
    def __init__(self, inner: Spec):
        self.inner = inner

    def check(self, value: Any, where: Where) -> None:
        if value is not None:
            self.inner.check(value, where)


class ListOf(Spec):
    def __init__(self, inner: Spec, nonempty: bool = False, unique: bool = False):
        self.inner, self.nonempty, self.unique = inner, nonempty, unique

    def check(self, value: Any, where: Where) -> None:
        if not isinstance(value, list):
            where.fail(f"expected a list, got {type_name(value)} {excerpt(value)}")
        if self.nonempty and not value:
            where.fail("must not be empty")
        for i, item in enumerate(value):
            self.inner.check(item, where.item(i))
        if self.unique:
            seen = set()
            for i, item in enumerate(value):
                key = repr(item)
                if key in seen:
                    where.item(i).fail(f"duplicate entry {excerpt(item)}")
                seen.add(key)


class OneOrList(Spec):
    """A single value or a list of them (notes: "text" or notes: [..])."""

    def __init__(self, inner: Spec):
        self.inner = inner

    def check(self, value: Any, where: Where) -> None:
        if isinstance(value, list):
            ListOf(self.inner).check(value, where)
        else:
            self.inner.check(value, where)


class Either(Spec):
    def __init__(self, *options: Spec, expected: str):
        self.options, self.expected = options, expected

    def check(self, value: Any, where: Where) -> None:
        errors: dict[type, str] = {}
        for option in self.options:
            try:
                option.check(value, where)
                return
            except ProfileError as exc:
                errors[type(option)] = str(exc)
        # The option of the value's own kind (a list for ListOf, a mapping for Struct) was meant: report its
        # inner error, which names the exact item or key.
        meant = ListOf if isinstance(value, list) else Struct if isinstance(value, dict) else None
        if meant in errors:
            raise ProfileError(errors[meant])
        where.fail(f"expected {self.expected}, got {type_name(value)} {excerpt(value)}")


class Struct(Spec):
    """A mapping with a fixed set of keys."""

    def __init__(self, fields: Mapping[str, Spec], required: tuple[str, ...] = (), what: str = "key"):
        self.fields, self.required, self.what = dict(fields), required, what

    def check(self, value: Any, where: Where) -> None:
        if not isinstance(value, dict):
            where.fail(f"expected a mapping, got {type_name(value)} {excerpt(value)}")
        for key in value:
            if not isinstance(key, str):
                where.fail(f"keys must be strings, got {type_name(key)} {excerpt(key)}")
            if key not in self.fields:
                where.key(key).fail(
                    f"unknown {self.what} {excerpt(key)} (known: {', '.join(self.fields)}){closest(key, self.fields)}"
                )
        for key in self.required:
            if key not in value:
                where.fail(f"missing required key {excerpt(key)}")
        for key, item in value.items():
            self.fields[key].check(item, where.key(key))


class MapOf(Spec):
    """A mapping from names (checked by `keys`) to values (checked by `values`)."""

    def __init__(self, values: Spec, keys: Spec | None = None):
        self.values, self.keys = values, keys or Ident()

    def check(self, value: Any, where: Where) -> None:
        if not isinstance(value, dict):
            where.fail(f"expected a mapping, got {type_name(value)} {excerpt(value)}")
        for key, item in value.items():
            self.keys.check(key, where.key(str(key)))
            self.values.check(item, where.key(str(key)))


def to_version(value: Any) -> tuple[int, int]:
    """'13.4' or [13, 4] (already checked by Version) -> (13, 4)."""
    if isinstance(value, str):
        major, minor = value.split(".")
        return int(major), int(minor)
    return int(value[0]), int(value[1])
