"""Write a probe tuning file that forces the two-warpgroup W4A16 form's stream-K block count (0: plain tiles) at given
shapes and M, for an A/B through ``HUMMING_TUNE_FILE`` (scripts/ab_env.py). Runs on the CPU (plans only).

    python scripts/probe_tune_file.py OUT.json 8192x8192:1024:128 4096x14336:1024:132 [--scheme w4a16] [--bt 256]

Each NxK:M:BLOCKS becomes the entry of M's bucket with the plan the planner makes for that M, token tile and block
count (pairs where its rules take them); the file's entries say what they force and are marked as probes."""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import humming  # noqa: E402
from humming.api import resolve_profile  # noqa: E402
from humming.core.common.layout import layout_for  # noqa: E402
from humming.core.tuning import entries as tuning  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("probes", nargs="+", help="NxK:M:BLOCKS (BLOCKS 0: plain tiles)")
    ap.add_argument("--scheme", default="w4a16")
    ap.add_argument("--bt", type=int, default=256, help="token tile")
    ap.add_argument("--profile", default="nvidia-h200")
    args = ap.parse_args()
    caps = resolve_profile(args.profile)
    sch = humming.schemes.get(args.scheme)
    entries = {}
    for probe in args.probes:
        shape, m, blocks = probe.split(":")
        n, k = map(int, shape.split("x"))
        layout = layout_for(sch, n, k, "f16", caps=caps)
        plan = tuning._rs_prefill_plan(caps, layout, int(m), "f16", args.scheme, args.bt, streamk=int(blocks),
                                       lowest=1)
        key, entry = tuning.make_entry(plan, 0.0, scheme=args.scheme, device="probe",
                                       source=f"scripts/probe_tune_file.py {probe} (bt {args.bt})")
        entries[key] = entry
        print(f"{key}: {plan.tiles}")
    tuning.write_entries(args.out, entries, note="probe: forced stream-K block counts, not measured")


if __name__ == "__main__":
    main()
