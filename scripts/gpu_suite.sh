#!/usr/bin/env bash
# All GPU tests plus the benchmarks, for the GPU machine. Full logs under $OUT; a short table last.
#   bash scripts/gpu_suite.sh [--workers N] [PART] [pytest arguments...]
#   PART:
#     all        every GPU test, the smoke run and the benchmarks (default; may exceed one 10-minute device call)
#     tests      every GPU test, no benchmark
#     check      "tests" and "sanitize" side by side (the correctness half of "all" in one ~10-minute device call)
#     wna16      the WnA16 GPU tests (mma.sync stream / tile, wgmma and register-A forms, upconvert)
#     quant      the W8A8 / W4A8 GPU tests (mma.sync, wgmma, register-A W4A8, widened) and activation quantization
#     ppu        the WnA16 GPU tests with the Zhenwu 810E profile forced (emulation), and the YAML-only example device
#                of docs/porting.md
#     smoke      every preset scheme through humming.gemm against the reference (scripts/smoke_gemm.py)
#     bench      the W4A16, the quantized and the MoE benchmarks (bench/; tables last)
#     sanitize   compute-sanitizer (memcheck, racecheck, initcheck, synccheck) over one small plan of every dense
#                family and form and the MoE kernels (scripts/sanitize_dense.py, scripts/sanitize_moe.py)
#     sustained  W4A16 M 1024 / 4096: each library alone for seconds under the power cap (scripts/sustained.py;
#                ~2 minutes, not part of "all"; the extra arguments go to sustained.py)
#     ab         the kernels that are off by default until measured, each timed against the default in one run:
#                register-A on e2m1 codes (register_a.any_group; dense W4A16-MXFP4 / NVFP4, MoE gpt-oss), the wgmma
#                W8A8 MoE form (moe.wgmma_8bit_min_rows), the register-A W4A8 MoE form (moe.w4a8_min_rows); not part
#                of "all"
# Extra arguments go to pytest (e.g. -k "w4a16 and not bf16").
# --workers N runs the tests in N pytest-xdist processes sharing the GPU (the kernel compiles, most of the wall time,
# then run in parallel); needs pytest-xdist importable (e.g. unpacked wheels on PYTHONPATH). The GPU machine has no
# network: `pip download pytest-xdist execnet --no-deps -d /tmp/w && mkdir -p .devpy && (cd .devpy && for w in
# /tmp/w/*.whl; do unzip -qo "$w"; done)` here, then run with carry [".devpy"] and PYTHONPATH=$PWD/.devpy.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/out}"; mkdir -p "$OUT"
export HUMMING_CACHE_DIR="${HUMMING_CACHE_DIR:-/tmp/humming-kcache}"
WORKERS=""
if [ "${1:-}" = "--workers" ]; then WORKERS="${2:?--workers needs a number}"; shift 2; fi
PART="${1:-all}"; shift || true
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 -m humming info | head -12
rc=0
XDIST=()
if [ -n "$WORKERS" ]; then
  if python3 -c "import xdist" 2>/dev/null; then XDIST=(-n "$WORKERS"); else echo "(pytest-xdist not importable: one process)"; fi
fi
run_tests() {  # name, pytest args...
  local name="$1"; shift
  python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml="$OUT/$name.xml" "${XDIST[@]}" "$@" >"$OUT/$name.log" 2>&1 || rc=1
  echo "== $name: $(tail -1 "$OUT/$name.log")"
  grep -E "^FAILED" "$OUT/$name.log" | head -20
}
WNA16_TESTS=(tests/gpu/test_wna16_gpu.py tests/gpu/test_wgmma_wna16_gpu.py tests/gpu/test_register_a_gpu.py
             tests/gpu/test_register_a_options_gpu.py tests/gpu/test_register_a_float_codes_gpu.py
             tests/gpu/test_wgmma_rs*_gpu.py tests/gpu/test_stream*_gpu.py)
QUANT_TESTS=(tests/gpu/test_w8a8_gpu.py tests/gpu/test_wgmma_gpu.py tests/gpu/test_wgmma_tma_w8a8_gpu.py
             tests/gpu/test_register_a8_gpu.py tests/gpu/test_widen_gpu.py tests/gpu/test_actquant_gpu.py)
case "$PART" in
  wna16) run_tests gpu-wna16 "${WNA16_TESTS[@]}" "$@" ;;
  quant) run_tests gpu-quant "${QUANT_TESTS[@]}" "$@" ;;
  ppu) export HUMMING_DEVICE_PROFILE=thead-zhenwu-810e
       run_tests gpu-810e tests/gpu/test_wna16_gpu.py -k "not upconvert and not profiles_run_here" "$@"
       unset HUMMING_DEVICE_PROFILE
       run_tests gpu-new-device tests/gpu/test_new_device_gpu.py "$@" ;;
  tests|all) run_tests gpu-tests tests/gpu "$@" ;;
  check) ( bash "$0" ${WORKERS:+--workers "$WORKERS"} tests "$@" >"$OUT/check-tests.out" 2>&1 ) & tests_pid=$!
         ( bash "$0" sanitize >"$OUT/check-sanitize.out" 2>&1 ) & sanitize_pid=$!
         wait "$tests_pid" || rc=1
         wait "$sanitize_pid" || rc=1
         grep -hE "^(==|FAILED)" "$OUT/check-tests.out" "$OUT/check-sanitize.out" ;;
  smoke|bench|sustained|sanitize|ab) ;;
  *) echo "unknown part $PART (all, tests, check, wna16, quant, ppu, smoke, bench, sustained, sanitize, ab)"; exit 2 ;;
esac
case "$PART" in
  smoke|all) python3 scripts/smoke_gemm.py >"$OUT/smoke.log" 2>&1 || rc=1
             echo "== smoke: $(grep -E "failed, worst error" "$OUT/smoke.log" || tail -1 "$OUT/smoke.log")" ;;
esac
case "$PART" in
  sanitize|all) for script in sanitize_dense sanitize_moe; do  # the eight runs side by side (~7 minutes on an H100)
                  for tool in memcheck racecheck initcheck synccheck; do
                    ( compute-sanitizer --tool "$tool" --report-api-errors no python3 "scripts/$script.py" \
                        >"$OUT/${script}_$tool.log" 2>&1; echo "exit $?" >>"$OUT/${script}_$tool.log" ) &
                  done
                done
                wait
                for script in sanitize_dense sanitize_moe; do
                  for tool in memcheck racecheck initcheck synccheck; do
                    log="$OUT/${script}_$tool.log"
                    [ "$(tail -1 "$log")" = "exit 0" ] || rc=1
                    echo "== $script $tool: $(grep -cE " ok$" "$log") ok," \
                         "$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1), $(tail -1 "$log")"
                  done
                done ;;
esac
case "$PART" in
  sustained) python3 scripts/sustained.py --out "$OUT" "$@" 2>&1 | tee "$OUT/sustained.log" | tail -8 ;;
esac
case "$PART" in
  bench|all) python3 bench/bench_wna16.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -30
             python3 bench/bench_quantized.py --out "$OUT" --ms 1,16,128,512,1024,2048,4096 2>&1 \
               | tee "$OUT/bench_quantized.log" | tail -18
             python3 bench/bench_moe.py --out "$OUT" --layer 2>&1 | tee "$OUT/bench_moe.log" | tail -30 ;;
esac
case "$PART" in
  ab) for scheme in w4a16-mxfp4 w4a16-nvfp4; do
        python3 scripts/ab_knobs.py --knob register_a.any_group --values true,default --scheme "$scheme" \
          --ms 128,1024,4096 --shapes 8192x8192,28672x8192 --out "$OUT" 2>&1 | tee "$OUT/ab_$scheme.log" | tail -8 \
          || rc=1
      done
      python3 bench/bench_moe.py --out "$OUT/moe_e2m1" --models gpt-oss-120b --tokens 512,2048,8192 \
        --ab register_a.any_group=true 2>&1 | tee "$OUT/ab_moe_e2m1.log" | tail -12 || rc=1
      python3 bench/bench_moe.py --out "$OUT/moe_w8a8" --models qwen3-30b-a3b,deepseek-v3 --tokens 128,2048,8192 \
        --scheme w8a8-fp8 --ab moe.wgmma_8bit_min_rows=1 2>&1 | tee "$OUT/ab_moe_w8a8.log" | tail -12 || rc=1
      python3 bench/bench_moe.py --out "$OUT/moe_w4a8" --models qwen3-30b-a3b,deepseek-v3 --tokens 128,2048,8192 \
        --scheme w4a8-fp8 --ab moe.w4a8_min_rows=1 2>&1 | tee "$OUT/ab_moe_w4a8.log" | tail -12 || rc=1 ;;
esac
echo "gpu suite ($PART) exit code: $rc"
exit $rc
