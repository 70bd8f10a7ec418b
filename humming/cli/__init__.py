"""`python -m humming <command>`: one module per command, imported only when used.

Each command module defines `HELP: str`, `add_arguments(parser)` and `main(args) -> int`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS: dict[str, str] = {
    "info": "humming.cli.info",
    "profiles": "humming.cli.profiles",
    "profile": "humming.cli.profile",
    "plan": "humming.cli.plan",
    "run": "humming.cli.run",
    "tune": "humming.cli.tune",
    "build": "humming.cli.build",
    "support": "humming.cli.support",
}


def _load(name: str):
    return importlib.import_module(COMMANDS[name])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m humming", description="humming: quantized GEMM kernels for many devices")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # Only the chosen command's module is imported, so a broken optional part cannot break `info`.
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name in COMMANDS:
        if name == chosen:
            module = _load(name)
            p = sub.add_parser(name, help=module.HELP, description=module.HELP)
            module.add_arguments(p)
            p.set_defaults(_module=module)
        else:
            sub.add_parser(name, help=f"(see python -m humming {name} --help)")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    from humming.errors import HummingError

    try:
        return int(args._module.main(args) or 0)
    except HummingError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
