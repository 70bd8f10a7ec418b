"""Scanner for the HAL rule: humming/core/ never names an architecture or a device.

Comments and docstrings are ignored (examples in prose are fine); code and string literals count.
A line may opt out with a comment containing `hal: allow` (say why); a whole file with
`hal: allow-file` in a comment. Use sparingly: device knowledge belongs in YAML profiles.
"""
from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

ARCH_PATTERNS = [
    (re.compile(r"\bsm_\s*(\d|\{)"), "architecture target"),  # \s*: 3.12 tokenizes f-strings
    (re.compile(r"\bcompute_capability\b\s*(==|!=|>=|<=|<|>)\s*[(\[]?\s*\d"), "compute capability test"),
    (re.compile(r"\bcc\s*(==|!=|>=|<=|<|>)\s*[(\[]\s*\d"), "compute capability test"),
    (re.compile(r"\(\s*(7|8|9|10|11|12)\s*,\s*\d\s*\)\s*(==|!=|>=|<=|<|>)|(==|!=|>=|<=|<|>)\s*\(\s*(7|8|9|10|11|12)\s*,\s*\d\s*\)"),
     "compute capability tuple comparison"),
]
DEVICE_WORDS = {
    "H100", "H200", "H20", "H800", "B100", "B200", "B300", "GB200", "GB300", "A100", "A10", "A30", "L40S", "T4",
    "RTX", "GB10", "Thor", "Rubin", "Zhenwu", "810E", "M890", "Hopper", "Blackwell", "Ampere", "Turing", "Volta",
}


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.text.strip()}"


def _code_lines(source: str) -> dict[int, str]:
    """Line number -> the code and string-literal text of that line (comments and docstrings removed)."""
    out: dict[int, list[str]] = {}
    previous = tokenize.NEWLINE
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL):
            continue
        is_docstring = tok.type == tokenize.STRING and previous in (tokenize.NEWLINE, tokenize.INDENT,
                                                                     tokenize.DEDENT)
        if tok.type not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER) and not is_docstring:
            for offset, part in enumerate(tok.string.splitlines() or [""]):
                out.setdefault(tok.start[0] + offset, []).append(part)
        if tok.type not in (tokenize.COMMENT, tokenize.NL):
            previous = tok.type
    return {line: " ".join(parts) for line, parts in out.items()}


def _comments(source: str) -> dict[int, str]:
    return {tok.start[0]: tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT}


def scan_file(path: Path, root: Path, extra_words: set[str] = frozenset()) -> list[Violation]:
    source = path.read_text(encoding="utf-8")
    comments = _comments(source)
    if any("hal: allow-file" in c for c in comments.values()):
        return []
    words = DEVICE_WORDS | set(extra_words)
    word_re = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(map(re.escape, words), key=len, reverse=True))
                         + r")(?![A-Za-z0-9_])")
    found = []
    shown = path.relative_to(root).as_posix()
    for line, code in _code_lines(source).items():
        if "hal: allow" in comments.get(line, ""):
            continue
        for pattern, what in ARCH_PATTERNS:
            if pattern.search(code):
                found.append(Violation(shown, line, what, code))
        hit = word_re.search(code)
        if hit:
            found.append(Violation(shown, line, f"device name {hit.group(1)!r}", code))
    return found


def scan_tree(directory: Path, root: Path, extra_words: set[str] = frozenset()) -> list[Violation]:
    out = []
    for path in sorted(directory.rglob("*.py")):
        out += scan_file(path, root, extra_words)
    return out
