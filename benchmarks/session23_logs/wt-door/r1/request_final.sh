#!/usr/bin/env bash
# wt-door r1 (100 s): issue 33's host side, batch 1. Where a call's host time goes
# for BERT, LLaMA and GPT-2 through torch.compile(backend="grove") against
# reduce-overhead, all variants of a model timed in turns (door_split.py):
#   floor (dynamo alone), door, graph (grove's CompiledGraph on dynamo's args),
#   call_torch (grove's C call and hand-out), *_gap (device idle at each launch),
#   *_host (to the last call's return, before the sync), cxx (C++ loop: the device),
#   cxx_host/cxx_idle (C++ calls busy / device idle, and *_launch: cudaGraphLaunch share),
#   guards alone, reduce_overhead(+_host), torch_graph_gap/_host (PyTorch's
#   CUDAGraph.replay of the eager module); cProfile, setprofile traces and
#   torch.profiler runtime calls of the door, reduce-overhead and torch_graph.
# Then door_replay_probe (chains of 1/16 matmuls at 1 row: grove's idle C call
# against PyTorch's replay) with programmatic launch on, then off
# (GROVE_PROGRAMMATIC_LAUNCH=0, read once per process).
# Also: door_noedges = the door compiled with GROVE_GRAPH_PROGRAMMATIC_EDGES=0 (new: the
# graph's programmatic edges made default at instantiation), in the same turns.
# cuda_platform_test: the programmatic-edge tests (the new switch's among them).
# In the background (nice, sim only, CPU): door_function_test.py whole (for the lead).
set -u
HERE=$PWD
export GROVE_LIBRARY=$HERE/lib/libgrove.so
export PYTHONPATH=$HERE/python:$HERE/tests/python:$HERE/tests/python_support
export LD_LIBRARY_PATH=$HERE/lib/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GROVE_CACHE_DIR=$(mktemp -d) PYTHONUNBUFFERED=1
T0=$(date +%s)
nvidia-smi -L | tee "$OUT/DEVICE.txt"; echo "commit $(cat COMMIT)" | tee -a "$OUT/DEVICE.txt"
(cd tests/python && GROVE_CACHE_DIR=$(mktemp -d) timeout -k 3 94 nice -n 15 python3 door_function_test.py -v \
   > "$OUT/door_function_test.txt" 2>&1; echo "door_function_test rc=$? $(( $(date +%s) - T0 )) s" >> "$OUT/door_function_test.txt") &
TESTS=$!
timeout 15 ./bin/cuda_platform_test --gtest_filter='*Programmatic*' > "$OUT/cuda_platform_test.txt" 2>&1
echo "cuda_platform_test rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED) |FAILED \]" "$OUT/cuda_platform_test.txt" | head -4
timeout -k 3 $(( 76 - ($(date +%s) - T0) )) python3 benchmarks/door_split.py --zoo bert,llama,gpt2 --batch 1 --turns 8 \
  --reduce-overhead --door-env noedges:GROVE_GRAPH_PROGRAMMATIC_EDGES=0 --out "$OUT" > "$OUT/split.txt" 2>&1
echo "door_split rc=$? $(( $(date +%s) - T0 )) s"
grep -v -E "^\[transformers\]|UserWarning|warnings.warn|_warn_once" "$OUT/split.txt" | grep -E "^[a-z]" | \
  sed -E 's/(door_layers|door_nogc|door_static_torch|door_no_static_check|floor_detach|model_call|both) [0-9.]+  //g' | cut -c1-520
L=$(( 96 - ($(date +%s) - T0) )); H=$(( L / 2 ))
if [ $H -ge 6 ]; then
  timeout -k 2 $H python3 benchmarks/door_replay_probe.py --chains 1,16 --rows 1 --calls 100 > "$OUT/replay_pdl.txt" 2>&1
  echo "replay pdl rc=$?"; tail -3 "$OUT/replay_pdl.txt" | cut -c1-120
  L=$(( 97 - ($(date +%s) - T0) ))
  [ $L -ge 6 ] && { GROVE_PROGRAMMATIC_LAUNCH=0 timeout -k 2 $L python3 benchmarks/door_replay_probe.py --chains 1,16 --rows 1 --calls 100 > "$OUT/replay_nopdl.txt" 2>&1
  echo "replay nopdl rc=$?"; tail -2 "$OUT/replay_nopdl.txt" | cut -c1-120; }
fi
wait $TESTS
grep -E "^(Ran|OK|FAILED)|door_function_test rc|^(FAIL|ERROR):" "$OUT/door_function_test.txt" | head -8
echo "total $(( $(date +%s) - T0 )) s"
