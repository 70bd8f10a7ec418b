#!/usr/bin/env bash
# All GPU tests plus the benchmark, in one call (for the device machine). Full logs under $OUT.
#   bash scripts/gpu_suite.sh [pytest -k expression] [--quick]
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/out}"; mkdir -p "$OUT"
export HUMMING_CACHE_DIR="${HUMMING_CACHE_DIR:-$OUT/kcache}"
K="${1:-}"; QUICK="${2:-}"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 -m humming info | head -20
python3 -m pytest tests -m gpu -q -p no:cacheprovider ${K:+-k "$K"} --junitxml="$OUT/gpu-tests.xml" >"$OUT/gpu-tests.log" 2>&1
rc=$?
tail -25 "$OUT/gpu-tests.log"
python3 bench/bench_quantized.py --out "$OUT" --ms 1,16,128,1024 2>&1 | tee "$OUT/bench_quantized.log" | tail -12
python3 bench/bench_wna16.py --out "$OUT" $QUICK 2>&1 | tee "$OUT/bench.log" | tail -40
rm -rf "$OUT/kcache"
echo "gpu tests exit code: $rc"
exit $rc
