#!/usr/bin/env bash
# Nsight Compute warp-stall sampling per SASS instruction of one humming kernel: the hottest instructions with their
# stall samples (where the warps wait), for the device machine.
#   bash scripts/ncu_source.sh NAME one_gemm.py-arguments...     (report and text under $OUT/ncu_src_NAME.*)
set -uo pipefail
name="$1"; shift
OUT="${OUT:-$PWD/out}"; mkdir -p "$OUT"
HUMMING_PRECOMPILE=0 ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:hm_ \
  --section SourceCounters --section WarpStateStats -f -o "$OUT/ncu_src_$name" \
  python3 scripts/one_gemm.py "$@" > "$OUT/ncu_src_$name.log" 2>&1
ncu -i "$OUT/ncu_src_$name.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_src_$name.csv" 2>&1
python3 scripts/ncu_source_top.py "$OUT/ncu_src_$name.csv" 40
