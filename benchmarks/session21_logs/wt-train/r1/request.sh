#!/usr/bin/env bash
# wt-train r1 (issue 34), one H100, ~75 s.
# A. gpt4x256 b8 T32 whole step (compile_step): PyTorch's hand-captured step (cuda_graph),
#    grove_step (before) and grove_step with GROVE_FUSE_SIBLING_GEMMS=1 (after: q/k/v as one
#    GEMM, their dX and dW as one GEMM each, set while it compiles), one process, 10 interleaved
#    blocks of 20 steps; losses of 30 warm-up steps against grove_step; torch.profiler kernel
#    tables of both grove variants. A fourth variant keeps the three per-head gradient copies
#    before their concat (GROVE_SIBLING_CONCAT_SOURCES=0).
# D (if time is left). gpu_step_test's new case: the fused gpt step's losses against eager PyTorch, cudagraphs
#    equal to grove eager.
# B. mlp16x512 b32 through the door (task 2: torch_backend's 1.30x vs door_timeline's 0.936x):
#    door_timeline interleaved (reduce-overhead, grove, cuda_graph) with per-stage profiles of
#    reduce-overhead and grove; then C. torch_backend --train exactly as session 20's final
#    lease ran the row (sequential variants), so both harnesses run on one host.
set -u
export GROVE_LIBRARY=$PWD/bazel-out/k8-opt/bin/capi/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
S=grove_step
F=GROVE_FUSE_SIBLING_GEMMS=1
timeout 32 python3 benchmarks/door_timeline.py --model gpt4x256_b8_t32 \
  --variants cuda_graph,$S,$S+$F,$S+$F+GROVE_SIBLING_CONCAT_SOURCES=0 --rounds 10 \
  --profile $S,$S+$F --steps 5 --kernels 30 \
  --compile-deadline-s 19 --deadline-s 25 > "$OUT/gpt_fusion.log" 2>&1
echo "== A. gpt door_timeline rc=$? at $(( $(date +%s) - T0 ))s"
grep -E "compiled and warmed|not compiled|losses of|us per step|^  [a-z_+=A-Z0-9]+ +[0-9.]+ us|Error|^step 2|^-- kernels" "$OUT/gpt_fusion.log" | head -30
timeout 24 python3 benchmarks/door_timeline.py --model mlp16x512_b32 \
  --variants torch_reduce_overhead,grove,cuda_graph --rounds 10 \
  --profile torch_reduce_overhead,grove --steps 5 --cprofile 12 --compile-deadline-s 14 \
  --deadline-s 19 \
  > "$OUT/mlp_timeline.log" 2>&1
echo "== B. mlp door_timeline rc=$? at $(( $(date +%s) - T0 ))s"
grep -E "compiled and warmed|losses of|^  [a-z_+=A-Z0-9]+ +[0-9.]+ us|Error|^  (zero_grad|model|loss|backward|optimizer) " "$OUT/mlp_timeline.log" | head -36
left=$(( 77 - ($(date +%s) - T0) ))
if [ "$left" -gt 10 ]; then
  timeout "$left" python3 benchmarks/torch_backend.py --train --repeats 40 --models mlp16x512_b32 \
    --variants torch_reduce_overhead,cuda_graph,grove --json "$OUT/mlp_backend.json" \
    > "$OUT/mlp_backend.txt" 2>&1
  echo "== C. torch_backend --train rc=$? at $(( $(date +%s) - T0 ))s"
  grep -E "us$|per step|failed" "$OUT/mlp_backend.txt" | head -8
else
  echo "== C. skipped (${left}s left)"
fi
left=$(( 79 - ($(date +%s) - T0) ))
if [ "$left" -gt 12 ]; then
  (cd tests/python && timeout "$left" python3 -m unittest -v \
    gpu_step_test.GpuStepTest.test_gpt_whole_step_with_sibling_gemms_fused) > "$OUT/gpu_step.txt" 2>&1
  echo "== D. gpu_step_test (fused gpt step vs eager PyTorch, 30 steps) rc=$? at $(( $(date +%s) - T0 ))s"
  tail -3 "$OUT/gpu_step.txt"
else
  echo "== D. gpu_step_test skipped (${left}s left)"
fi
echo "total $(( $(date +%s) - T0 ))s"
