#!/usr/bin/env bash
# wt-door r1 (issue 33, batch-1 host path): per model, where a door call's
# time goes, timed the zoo's way (blocks of 20 calls in turns, H100):
#   floor (dynamo alone), floor_detach, door, door_nogc, graph (grove's share:
#   CompiledGraph on dynamo's args), call_torch (grove's C call), both (floor
#   then graph), graph_gap/call_torch_gap (the device idle at each launch),
#   cxx (C++ call: the device), guards (dynamo's guard check alone); GPU us per
#   call; call traces (floor vs door), cProfile listings and the door's CUDA
#   runtime calls per call in door_split_trace.txt.
set -u
export GROVE_LIBRARY=$PWD/bazel-out/k8-opt/bin/capi/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python
export GROVE_CACHE_DIR=$(mktemp -d)
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee "$OUT/DEVICE.txt"
# The one-frame door call (new, Note [The door's model call in one frame]) and
# the cached hand-out on sim with this PyTorch; if they fail, the split runs
# the old call path (GROVE_DOOR_CALL=layers) so its rows still come.
(cd tests/python && PYTHONPATH=$PYTHONPATH:$PWD/../python_support timeout 20 python3 door_call_test.py \
  > "$OUT/tests.txt" 2>&1 && PYTHONPATH=$PYTHONPATH:$PWD/../python_support timeout 12 \
  python3 cached_outputs_test.py >> "$OUT/tests.txt" 2>&1)
RC=$?; echo "tests rc=$RC $(( $(date +%s) - T0 )) s"; grep -E "^(Ran|OK|FAIL|ERROR)" "$OUT/tests.txt"
[ $RC -eq 0 ] || export GROVE_DOOR_CALL=layers
timeout $(( 76 - ($(date +%s) - T0) )) python3 benchmarks/door_split.py --zoo gpt2,bert,llama,transformer_decoder --batch 1 \
  --turns 8 --out "$OUT" > "$OUT/split.txt" 2>&1
echo "door_split rc=$? $(( $(date +%s) - T0 )) s"
grep -v -E "^\[transformers\]|UserWarning|warnings.warn|_warn_once" "$OUT/split.txt" | cut -c1-260 | tail -30
echo "total $(( $(date +%s) - T0 )) s"
