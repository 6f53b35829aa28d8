#!/usr/bin/env bash
# wt-train (issue 34), commands for the final lease, from the repository root of the merged tree on
# the GPU host (one H100 is enough). ~3 min in all. Needs the opt libgrove.so and, for T2, the opt
# lowering_test binary (bazel build -c opt //tests/compiler/lowering:lowering_test).
set -u
export GROVE_LIBRARY=${GROVE_LIBRARY:-$PWD/bazel-out/k8-opt/bin/capi/libgrove.so}
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
OUT=${OUT:-/tmp/wt-train-final}; mkdir -p "$OUT"
# T1. The whole step on the GPU: sibling GEMMs by default and by switch, against eager PyTorch.
(cd tests/python && python3 -m unittest -v gpu_step_test) > "$OUT/gpu_step_test.txt" 2>&1
# T2. The rewrite's cuda instance (cuBLAS GEMMs over the concatenated operands vs float64).
bazel-out/k8-opt/bin/tests/compiler/lowering/lowering_test --gtest_filter='*SiblingGemms*' \
  > "$OUT/sibling_gemms_test.txt" 2>&1
# B1. gpt4x256 whole step: default (fused) against GROVE_STEP_SIBLING_GEMMS=0 and PyTorch's
#     hand-captured step, interleaved, with the default's kernel table.
python3 benchmarks/door_timeline.py --model gpt4x256_b8_t32 \
  --variants cuda_graph,grove_step,grove_step+GROVE_STEP_SIBLING_GEMMS=0 --rounds 10 \
  --profile grove_step --kernels 30 > "$OUT/gpt_step.txt" 2>&1
# B2. The door on gpt4x256 with the rewrite on every program (off by default: unmeasured).
python3 benchmarks/door_timeline.py --model gpt4x256_b8_t32 \
  --variants torch_reduce_overhead,grove_optim+GROVE_OPTIM_IN_BACKWARD=1,grove_optim+GROVE_OPTIM_IN_BACKWARD=1+GROVE_FUSE_SIBLING_GEMMS=1,grove,grove+GROVE_FUSE_SIBLING_GEMMS=1 \
  --rounds 10 --profile none > "$OUT/gpt_door.txt" 2>&1
# B3. mlp16x512's door row in both harnesses on one host (session 20's 1.30x against 0.90x in r1).
python3 benchmarks/door_timeline.py --model mlp16x512_b32 \
  --variants torch_reduce_overhead,grove,cuda_graph --rounds 10 \
  --profile torch_reduce_overhead,grove --cprofile 12 > "$OUT/mlp_timeline.txt" 2>&1
python3 benchmarks/torch_backend.py --train --repeats 40 --models mlp16x512_b32 \
  --variants torch_reduce_overhead,cuda_graph,grove --json "$OUT/mlp_backend.json" \
  > "$OUT/mlp_backend.txt" 2>&1
grep -hE "^(OK|FAILED)|PASSED|us per step|^  [a-z_+=A-Z0-9]+ +[0-9.]+ us|mlp16x512_b32 [a-z_]+:" \
  "$OUT"/*.txt
