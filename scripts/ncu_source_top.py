"""The SASS instructions with the most warp-stall samples in an `ncu --page source --csv --print-source sass` export:
    python scripts/ncu_source_top.py FILE.csv [N]"""
from __future__ import annotations

import csv
import sys


def _num(v: str) -> float:
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"#"') or ln.startswith('"Address"')
                  or "Source" in ln and "Sampling" in ln), None)
    if start is None:
        print("no source table in", path)
        print("\n".join(lines[:20]))
        return
    rows = list(csv.DictReader(lines[start:]))
    cols = list(rows[0].keys()) if rows else []
    samp = next((c for c in cols if "Sampling (All" in c), None)
    nis = next((c for c in cols if "Sampling (Not" in c), None)
    src = next((c for c in cols if c.strip() == "Source"), None)
    if samp is None or src is None:
        print("columns:", cols)
        return
    total = sum(_num(r[samp]) for r in rows) or 1.0
    print(f"{len(rows)} SASS lines, {total:.0f} stall samples; top {top}:")
    idx = {id(r): i for i, r in enumerate(rows)}
    for r in sorted(rows, key=lambda r: -_num(r[samp]))[:top]:
        extra = f" not-issued {_num(r[nis]):6.0f}" if nis else ""
        print(f"{idx[id(r)]:5d} {100 * _num(r[samp]) / total:5.1f}% {_num(r[samp]):7.0f}{extra}  {r[src].strip()[:90]}")


if __name__ == "__main__":
    main()
