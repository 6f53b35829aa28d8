#!/usr/bin/env bash
# wt-train r2 (issue 34), one H100, <= 40 s. Checks the post-r1 change: compile_step now fuses
# sibling GEMMs by default (GROVE_STEP_SIBLING_GEMMS=0 is the old path).
# A. gpt4x256 b8 T32, door_timeline (one process, 10 interleaved blocks of 20 steps): cuda_graph
#    (PyTorch's hand-captured step), grove_step (default: fused), grove_step with
#    GROVE_STEP_SIBLING_GEMMS=0 (before); kernel table of the default (step_kernels.py carried).
# B. gpu_step_test: the gpt whole step fused (explicit switch) and by default, 30 steps each,
#    losses within rtol 2e-3 of eager PyTorch, cudagraphs equal to grove eager.
set -u
export GROVE_LIBRARY=$PWD/bazel-out/k8-opt/bin/capi/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
S=grove_step
timeout 22 python3 benchmarks/door_timeline.py --model gpt4x256_b8_t32 \
  --variants cuda_graph,$S,$S+GROVE_STEP_SIBLING_GEMMS=0 --rounds 10 \
  --profile $S --steps 5 --kernels 25 --compile-deadline-s 14 --deadline-s 17 \
  > "$OUT/gpt_default.log" 2>&1
echo "== A. gpt door_timeline rc=$? at $(( $(date +%s) - T0 ))s"
grep -E "compiled and warmed|not compiled|losses of|us per step|^  [a-z_+=A-Z0-9]+ +[0-9.]+ us|Error|^step 2|^-- kernels" "$OUT/gpt_default.log" | head -16
left=$(( 39 - ($(date +%s) - T0) ))
(cd tests/python && timeout "$left" python3 -m unittest -v \
  gpu_step_test.GpuStepTest.test_gpt_whole_step_with_sibling_gemms_fused \
  gpu_step_test.GpuStepTest.test_gpt_whole_step_torch_adamw) > "$OUT/gpu_step.txt" 2>&1
echo "== B. gpu_step_test rc=$? at $(( $(date +%s) - T0 ))s"
grep -E "\.\.\. |^Ran|^OK|FAILED|Error" "$OUT/gpu_step.txt" | head -8
echo "total $(( $(date +%s) - T0 ))s"
