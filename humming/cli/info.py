"""`python -m humming info [--profile NAME] [--json]`: the device, its profile and why."""
from __future__ import annotations

import argparse
import json

HELP = "describe the detected device (or a named profile): profile choice, target, capabilities, paths"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", metavar="NAME", help="describe this profile instead of the detected device")
    parser.add_argument("--json", action="store_true", help="print the structured result as JSON")


def main(args: argparse.Namespace) -> int:
    from humming.device import info

    result = info(args.profile)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0
