#!/usr/bin/env bash
# Nsight Compute (on the GPU machine): where one humming kernel's warps stall, and how busy its pipes and memories are.
#   bash scripts/ncu_stalls.sh NAME [one_gemm.py arguments...]     (full text under $OUT/ncu_NAME.txt; a summary printed)
#   e.g. bash scripts/ncu_stalls.sh rs8 --scheme w4a8-fp8 --m 4096 --knob register_a8.chain=128
#   KERNELS=regex (default hm_: humming's kernels; e.g. 'nvjet|gemm|xmma|cutlass' with --scheme cublas-fp16)
set -uo pipefail
name="$1"; shift
OUT="${OUT:-$PWD/out}"; mkdir -p "$OUT"
HUMMING_PRECOMPILE=0 ncu --clock-control none --launch-skip 2 --launch-count 1 -k "regex:${KERNELS:-hm_}" \
  --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_pipe_uniform.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum" \
  python3 scripts/one_gemm.py "$@" > "$OUT/ncu_$name.txt" 2>&1
echo "== $name"
grep -E "forced|ran hm_|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issued Warp|stalled_(long|short|wait|math|mio|lg|barrier|no_inst|not_sel|dispatch|branch|tex|selected)|hmma|pipe_lsu|lts__t_sectors|lts__t_bytes|dram__bytes|inst_executed|wavefronts|Kernel Name|nvjet|gemm|L2 Hit|L1/TEX Hit" "$OUT/ncu_$name.txt" \
  | sed -e 's/smsp__average_warps_issue_stalled_//' -e 's/_per_issue_active.ratio//' | awk '{$1=$1; print}' | head -40
