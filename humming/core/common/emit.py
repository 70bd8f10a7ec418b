"""The structured emitter the generators write CUDA with: a template is kernel text with named slots, filled once.

    STAGE = Template('''
      mbar_wait(xbar0 + 8 * ${slot}, ${phase});
      ${body}
    ''', slot="s")                      # a slot may carry a default: the text it holds unless a variant fills it
    STAGE.fill(phase="(kt / STAGES) & 1", body=lines(...))

A slot is ``${name}``. Filling checks the variant against the template: an unknown slot name or a slot left without
text is an error, so a template that changes cannot silently drop a variant's code (the failure mode of patching
emitted text by exact substrings). A multi-line value in a slot that stands alone on its line takes that line's
indentation. CUDA braces need no escaping (templates are not format strings).
"""
from __future__ import annotations

import re

_SLOT = re.compile(r"\$\{(\w+)\}")


class Template:
    """Kernel text with named slots ``${name}``; ``defaults`` give slots text a variant may replace."""

    __slots__ = ("text", "slots", "defaults")

    def __init__(self, text: str, **defaults: str):
        self.text = text
        self.slots = tuple(dict.fromkeys(_SLOT.findall(text)))
        unknown = set(defaults) - set(self.slots)
        if unknown:
            raise ValueError(f"template defaults name slots it does not have: {', '.join(sorted(unknown))}")
        self.defaults = defaults

    def fill(self, **values: object) -> str:
        """The text with every slot filled (values are str()-ed; None is empty text)."""
        unknown = set(values) - set(self.slots)
        if unknown:
            raise ValueError(f"no slot {', '.join(sorted(unknown))} in the template (it has {', '.join(self.slots)})")
        text = {**self.defaults, **values}
        missing = [s for s in self.slots if s not in text]
        if missing:
            raise ValueError(f"template slots left unfilled: {', '.join(missing)}")

        def put(match: re.Match) -> str:
            value = text[match.group(1)]
            value = "" if value is None else str(value)
            start = match.string.rfind("\n", 0, match.start()) + 1
            lead = match.string[start:match.start()]
            if "\n" in value and not lead.strip():  # alone on its line: each line of the value takes the indentation
                value = value.replace("\n", "\n" + lead)
            return value

        return _SLOT.sub(put, self.text)

    def with_defaults(self, **defaults: str) -> Template:
        """The same text with other default slot contents (a variant of a shared template)."""
        return Template(self.text, **{**self.defaults, **defaults})


def lines(*parts: str | None) -> str:
    """The non-empty parts, one after another, each ending its line."""
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts if p)
