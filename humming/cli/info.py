"""`python -m humming info [--profile NAME] [--json] [--knobs [--markdown]]`: the device, its profile and why; or the
tuning knobs' values for it (``--markdown``: every knob's default and meaning, the table of docs/tuning.md)."""
from __future__ import annotations

import argparse
import json

HELP = "describe the detected device (or a named profile): profile choice, target, capabilities, paths"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", metavar="NAME", help="describe this profile instead of the detected device")
    parser.add_argument("--json", action="store_true", help="print the structured result as JSON")
    parser.add_argument("--knobs", action="store_true",
                        help="list the tuning knobs with their values for the profile (defaults, the profile's tuning "
                             "file, the user tune file) and what each one chooses")
    parser.add_argument("--markdown", action="store_true",
                        help="with --knobs: every knob's default (defaults.yaml) and meaning as the markdown table of "
                             "docs/tuning.md (no profile needed)")


def main(args: argparse.Namespace) -> int:
    if args.knobs:
        return _knobs(args)
    from humming.device import info

    result = info(args.profile)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0


def _knobs(args: argparse.Namespace) -> int:
    from humming.core.tuning import knobs
    from humming.devices.current import resolve_profile

    if args.markdown:
        print(knobs.markdown_table(), end="")
        return 0
    caps = resolve_profile(args.profile)
    values = knobs.table(caps)
    if args.json:
        print(json.dumps({"profile": caps.name, "knobs": values}, indent=2))
        return 0
    print(f"tuning knobs for {caps.name}:")
    width = max(map(len, values))
    for name, value in values.items():
        print(f"  {name:<{width}}  {value!s:<6}  {knobs.KNOBS[name].doc.splitlines()[0]}")
    return 0
