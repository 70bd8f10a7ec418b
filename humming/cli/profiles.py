"""`python -m humming profiles`: one row per profile (built-ins and HUMMING_PROFILE_PATH)."""
from __future__ import annotations

import argparse
import json

from humming.capabilities import Capabilities

HELP = "list device profiles: target, SMs, shared memory, MMA families, INT8/FP8/FP4 support, notes"
COLUMNS = ("name", "target", "SMs", "smem", "MMA families", "INT8", "FP8", "FP4", "notes")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--devices", action="store_true", help="only device profiles (no abstract family files)")
    parser.add_argument("--width", type=int, default=60, help="truncate the notes column (default 60; 0 = full)")


def row(caps: Capabilities, width: int = 0) -> dict[str, str]:
    from humming.capabilities import summary as S

    t = caps.target
    target = (t.arch or "unknown") + (f"/{t.family}" if t.family else "")
    flags = [f for f, on in (("family", caps.abstract), ("UNVERIFIED", not caps.verified)) if on]
    note = "; ".join(flags + list(caps.notes[:1]))
    if width and len(note) > width:
        note = note[: width - 3] + "..."
    return {
        "name": caps.name,
        "target": target,
        "SMs": "?" if caps.limits.sms is None else str(caps.limits.sms),
        "smem": "?" if caps.limits.smem_per_block_kb is None else f"{caps.limits.smem_per_block_kb} KB",
        "MMA families": ",".join(caps.families()) or "-",
        "INT8": S.support_cell(caps, "int8"),
        "FP8": S.support_cell(caps, "fp8"),
        "FP4": S.support_cell(caps, "fp4"),
        "notes": note,
    }


def main(args: argparse.Namespace) -> int:
    from humming.capabilities import list_profiles

    profiles = list_profiles(include_abstract=not args.devices)
    rows = [row(p, 0 if args.json else args.width) for p in profiles]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    widths = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in COLUMNS}
    print("  ".join(c.ljust(widths[c]) for c in COLUMNS).rstrip())
    for r in rows:
        print("  ".join(r[c].ljust(widths[c]) for c in COLUMNS).rstrip())
    devices = sum(1 for p in profiles if not p.abstract)
    print(f"\n{devices} device profiles, {len(profiles) - devices} family profiles")
    return 0
