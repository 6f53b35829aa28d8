#!/usr/bin/env bash
# wt-train r2, the last round (issue 34). One process (door_timeline.py), two
# models, each model's variants compiled, then timed interleaved (10 rounds of
# one block of 20 steps each), no profiler:
#  gpt4x256 b8 T32: cuda_graph (PyTorch's whole step captured by hand, fused
#    capturable AdamW) against grove_step (grove.training.compile_step, AdamW as
#    grove's update): issue 34's goal grove_step <= 0.7x cuda_graph;
#  mlp16x512 b32: torch_reduce_overhead (model compiled r-o, eager fused AdamW),
#    grove_optim+GROVE_OPTIM_IN_BACKWARD=1 (the first change: grove AdamW's update
#    replayed at the end of the door's backward), grove (eager fused AdamW),
#    grove_step, cuda_graph: goal door <= 0.5x reduce-overhead.
# Losses of the warm-up steps are compared across variants (f32 tolerance).
set -u
export GROVE_LIBRARY=$PWD/flib/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python
T0=$(date +%s)
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
timeout 58 python3 benchmarks/door_timeline.py --model gpt4x256_b8_t32 \
  --variants cuda_graph,grove_step \
  --then mlp16x512_b32=torch_reduce_overhead,grove_optim+GROVE_OPTIM_IN_BACKWARD=1,grove,grove_step,cuda_graph \
  --rounds 10 --profile none --compile-deadline-s 46 --deadline-s 52 \
  > "$OUT/timeline_r2.log" 2>&1
echo "== door_timeline rc=$? at $(( $(date +%s) - T0 ))s"
grep -E "compiled and warmed|not compiled|failed|no variant|losses of|us per step|^  [a-z_+=A-Z0-9]+ +[0-9.]+ us|Error" "$OUT/timeline_r2.log" | head -40
echo "total $(( $(date +%s) - T0 ))s"
