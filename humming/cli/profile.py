"""`python -m humming profile validate FILE...` and `python -m humming profile show NAME`."""
from __future__ import annotations

import argparse
import json

HELP = "check profile files (validate FILE...) or print a resolved profile (show NAME)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = sub.add_parser("validate", help="check YAML profile files; exit 1 if any is invalid or two of them "
                                                  "(or a file and a visible profile) share a name")
    validate.add_argument("files", nargs="+", metavar="FILE")
    show = sub.add_parser("show", help="print a profile after inheritance, as YAML")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print JSON instead of YAML")


def _validate(files: list[str]) -> int:
    from pathlib import Path

    from humming.capabilities import load_profile_file
    from humming.errors import ProfileError

    failed = 0
    given: dict[str, str] = {}  # profile name -> the file given earlier that defines it
    for path in files:
        try:
            caps = load_profile_file(path)
        except ProfileError as exc:
            failed += 1
            print(f"FAIL  {exc}")
            continue
        earlier = given.setdefault(caps.name, path)
        if earlier != path and Path(earlier).resolve() != Path(path).resolve():
            failed += 1
            print(f"FAIL  {path}: name: profile {caps.name!r} is also defined by {earlier} (given before); "
                  "a directory defines a name once, and a later path directory's file replaces it only with "
                  f"'replaces: {caps.name}'")
            continue
        kind = "family" if caps.abstract else ("unverified" if not caps.verified else "device")
        print(f"ok    {path}: {caps.name} ({kind}, target {caps.target.arch or 'unknown'}, "
              f"{len(caps.mma)} MMA forms)")
    if len(files) > 1:
        print(f"\n{len(files) - failed} ok, {failed} failed")
    return 1 if failed else 0


def to_yaml(data: dict) -> str:
    """YAML with short lists ([9, 0], [f16, f32]) on one line and long text as blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def represent_list(dumper: yaml.SafeDumper, items: list) -> yaml.Node:
        short = all(isinstance(x, (int, float)) or (isinstance(x, str) and len(x) <= 16) for x in items)
        return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=short)

    Dumper.add_representer(list, represent_list)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, width=120, allow_unicode=True).rstrip()


def _show(name: str, as_json: bool) -> int:
    from humming.capabilities import get_profile

    data = get_profile(name).to_dict()
    print(json.dumps(data, indent=2) if as_json else to_yaml(data))
    return 0


def main(args: argparse.Namespace) -> int:
    if args.action == "validate":
        return _validate(args.files)
    return _show(args.name, args.json)
