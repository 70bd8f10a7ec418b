#!/usr/bin/env bash
# Nsight Compute (on the GPU machine): warp-stall sampling per SASS instruction of one humming kernel; prints the
# instructions with the most stall samples (where the warps wait).
#   bash scripts/ncu_source.sh NAME [one_gemm.py arguments...]     (report, CSV and log under $OUT/ncu_src_NAME.*)
#   e.g. bash scripts/ncu_source.sh rs --scheme w4a16 --m 1024 --knob register_a.prefetch=8
#   TOP=N instructions printed (default 40); KERNELS=regex as in scripts/ncu_stalls.sh (default hm_)
set -uo pipefail
name="$1"; shift
OUT="${OUT:-$PWD/out}"; mkdir -p "$OUT"
HUMMING_PRECOMPILE=0 ncu --clock-control none --launch-skip 2 --launch-count 1 -k "regex:${KERNELS:-hm_}" \
  --section SourceCounters --section WarpStateStats -f -o "$OUT/ncu_src_$name" \
  python3 scripts/one_gemm.py "$@" > "$OUT/ncu_src_$name.log" 2>&1
ncu -i "$OUT/ncu_src_$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_src_$name.csv" 2>&1
python3 - "$OUT/ncu_src_$name.csv" "${TOP:-40}" <<'PY'
import csv
import sys


def num(v):
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


path, top = sys.argv[1], int(sys.argv[2])
lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
start = next((i for i, ln in enumerate(lines) if ln.startswith('"#"') or ln.startswith('"Address"')
              or ("Source" in ln and "Sampling" in ln)), None)
if start is None:
    sys.exit("no source table in " + path + ":\n" + "\n".join(lines[:20]))
rows = list(csv.DictReader(lines[start:]))
cols = list(rows[0].keys()) if rows else []
samp = next((c for c in cols if "Sampling (All" in c), None)
nis = next((c for c in cols if "Sampling (Not" in c), None)
src = next((c for c in cols if c.strip() == "Source"), None)
if samp is None or src is None:
    sys.exit(f"columns: {cols}")
total = sum(num(r[samp]) for r in rows) or 1.0
print(f"{len(rows)} SASS lines, {total:.0f} stall samples; top {top}:")
for i, r in sorted(enumerate(rows), key=lambda ir: -num(ir[1][samp]))[:top]:
    extra = f" not-issued {num(r[nis]):6.0f}" if nis else ""
    print(f"{i:5d} {100 * num(r[samp]) / total:5.1f}% {num(r[samp]):7.0f}{extra}  {r[src].strip()[:90]}")
PY
