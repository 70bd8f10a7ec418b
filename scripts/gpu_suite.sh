#!/usr/bin/env bash
# All GPU tests plus the benchmarks, for the device machine. Full logs under $OUT; a short table last.
#   bash scripts/gpu_suite.sh            # everything (may exceed one 10-minute device call)
#   bash scripts/gpu_suite.sh wna16      # WnA16 + upconvert (+ wgmma WnA16) GPU tests
#   bash scripts/gpu_suite.sh quant      # W8A8/W4A8 (mma.sync and wgmma) + activation-quantization GPU tests
#   bash scripts/gpu_suite.sh bench      # the W4A16 and the quantized benchmarks (tables last)
#   bash scripts/gpu_suite.sh ppu        # the GPU tests with the Zhenwu 810E profile forced (emulation), and
#                                        # the YAML-only example device of docs/porting.md
#   bash scripts/gpu_suite.sh tests      # every GPU test, no benchmark
#   bash scripts/gpu_suite.sh sustained  # W4A16 M 1024 / 4096: each library alone for seconds under the power cap
#                                        # (scripts/sustained.py; ~2 minutes, not part of "all")
# Extra arguments go to pytest (e.g. -k "w4a16 and not bf16").
# HUMMING_GPU_WORKERS=N runs the tests in N pytest-xdist processes sharing the GPU (the kernel compiles, most of the
# wall time, then run in parallel); needs pytest-xdist importable (e.g. unpacked wheels on PYTHONPATH). The device
# machine has no network: `pip download pytest-xdist execnet --no-deps -d /tmp/w && mkdir -p .devpy && (cd .devpy &&
# for w in /tmp/w/*.whl; do unzip -qo "$w"; done)` here, then run with carry [".devpy"] and PYTHONPATH=$PWD/.devpy.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/out}"; mkdir -p "$OUT"
export HUMMING_CACHE_DIR="${HUMMING_CACHE_DIR:-/tmp/humming-kcache}"
PART="${1:-all}"; shift || true
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 -m humming info | head -12
rc=0
XDIST=()
if [ -n "${HUMMING_GPU_WORKERS:-}" ] && python3 -c "import xdist" 2>/dev/null; then XDIST=(-n "$HUMMING_GPU_WORKERS"); fi
run_tests() {  # name, pytest args...
  local name="$1"; shift
  python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml="$OUT/$name.xml" "${XDIST[@]}" "$@" >"$OUT/$name.log" 2>&1 || rc=1
  echo "== $name: $(tail -1 "$OUT/$name.log")"
  grep -E "^FAILED" "$OUT/$name.log" | head -20
}
case "$PART" in
  wna16) run_tests gpu-wna16 tests/gpu/test_wna16_gpu.py $(ls tests/gpu/test_wgmma_wna16_gpu.py 2>/dev/null) "$@" ;;
  quant) run_tests gpu-quant tests/gpu/test_w8a8_gpu.py tests/gpu/test_wgmma_gpu.py tests/gpu/test_actquant_gpu.py "$@" ;;
  ppu) export HUMMING_DEVICE_PROFILE=thead-zhenwu-810e
       run_tests gpu-810e tests/gpu/test_wna16_gpu.py -k "not upconvert and not profiles_run_here" "$@"
       unset HUMMING_DEVICE_PROFILE
       run_tests gpu-new-device tests/gpu/test_new_device_gpu.py "$@" ;;
  tests|all) run_tests gpu-tests tests/gpu "$@" ;;
  bench|sustained) ;;
esac
case "$PART" in
  sustained) python3 scripts/sustained.py --out "$OUT" "$@" 2>&1 | tee "$OUT/sustained.log" | tail -8 ;;
esac
case "$PART" in
  bench|all) python3 bench/bench_wna16.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -30 ;;
esac
case "$PART" in
  bench|all) python3 bench/bench_quantized.py --out "$OUT" --ms 1,16,128,512,1024,2048,4096 2>&1 | tee "$OUT/bench_quantized.log" | tail -18 ;;
esac
echo "gpu suite ($PART) exit code: $rc"
exit $rc
