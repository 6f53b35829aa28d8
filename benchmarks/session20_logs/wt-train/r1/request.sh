#!/usr/bin/env bash
# wt-train r1 (issue 34). Part A (goal: gpt4x256 whole step <= 0.7x PyTorch's hand-captured step):
# one process (door_timeline.py), gpt4x256 b8 T32, every variant compiled, then timed interleaved
# (10 rounds, one block of 20 steps each), no profiler:
#   cuda_graph (PyTorch's whole step captured by hand, fused capturable AdamW; the reference)
#   grove_step (grove.training.compile_step, AdamW as grove's update; the baseline)
#   grove_step with switches, each set while it compiles (A/B in one process):
#     GROVE_GEMM_SEARCH=1 (time cuBLASLt's candidates per GEMM shape, keep the fastest)
#     GROVE_PROGRAMMATIC_GENERATED=1 (generated kernels launched with PDL)
#     GROVE_FUSE_REDUCTION_PROLOGUES=1 (bias-gradient column sums in their producer's kernel)
#     GROVE_BIAS_GRAD_EPILOGUES=1 (new: weight-gradient GEMMs yield the bias gradient, cuBLASLt BGRAD)
#     GROVE_GEMM_SEARCH=1 + GROVE_PROGRAMMATIC_GENERATED=1, GROVE_GEMM_SEARCH=1 + GROVE_BIAS_GRAD_EPILOGUES=1
# then torch.profiler kernel tables (top 30 kernels by GPU time per step) of cuda_graph, grove_step
# and grove_step+GROVE_GEMM_SEARCH=1.
# Part B (the lead's r0 finding: ranks aborted at exit in THPVariable_clear): ddp_door.py under
# torchrun with ONE rank, grove variants only; exit status and any INTERNAL ASSERT line.
set -u
export GROVE_LIBRARY=$PWD/bazel-out/k8-opt/bin/capi/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python
T0=$(date +%s)
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
S=grove_step
timeout 62 python3 benchmarks/door_timeline.py --model gpt4x256_b8_t32 \
  --variants cuda_graph,$S,$S+GROVE_GEMM_SEARCH=1,$S+GROVE_PROGRAMMATIC_GENERATED=1,$S+GROVE_FUSE_REDUCTION_PROLOGUES=1,$S+GROVE_BIAS_GRAD_EPILOGUES=1,$S+GROVE_GEMM_SEARCH=1+GROVE_PROGRAMMATIC_GENERATED=1,$S+GROVE_GEMM_SEARCH=1+GROVE_BIAS_GRAD_EPILOGUES=1 \
  --rounds 10 --profile cuda_graph,$S,$S+GROVE_GEMM_SEARCH=1 --steps 5 \
  --kernels 30 --compile-deadline-s 40 --deadline-s 52 \
  > "$OUT/timeline_r1.log" 2>&1
echo "== A. door_timeline rc=$? at $(( $(date +%s) - T0 ))s"
grep -E "compiled and warmed|not compiled|failed|no variant|losses of|us per step|^  [a-z_+=A-Z0-9]+ +[0-9.]+ us|Error|^== |^step 2|^-- kernels" "$OUT/timeline_r1.log" | head -60
left=$(( 86 - ($(date +%s) - T0) ))
if [ "$left" -gt 12 ]; then
  timeout "$left" python3 -m torch.distributed.run --nproc_per_node 1 benchmarks/ddp_door.py \
    --cases mlp16x512_b32 --iters 10 --variants grove_ddp,grove_step,grove,grove_ddp_direct \
    --json "$OUT/exit_1rank.json" > "$OUT/exit_1rank.txt" 2>&1
  echo "== B. ddp_door 1 rank rc=$? at $(( $(date +%s) - T0 ))s"
  grep -E "us \(|INTERNAL ASSERT|exitcode|Signal" "$OUT/exit_1rank.txt" | head -12
else
  echo "== B. skipped (${left}s left)"
fi
echo "total $(( $(date +%s) - T0 ))s"
