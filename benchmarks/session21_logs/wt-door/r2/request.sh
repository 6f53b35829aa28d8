#!/usr/bin/env bash
# wt-door r2 (<= 40 s, one H100), checks of the post-r1 changes:
#  a. the exit abort fix (Note [No close while the interpreter finalizes]): ddp_door's grove
#     variant at world size 1 exits cleanly by default (after), and aborts with
#     GROVE_CLOSE_AT_FINALIZATION=1 (before, the old path); both in parallel, faulthandler on;
#  b. cached_outputs_test (OrphansLockTest now isolated) and exit_release_test on the GPU host;
#  c. decode_split eager/floor/grove once more, with grove's torch.profiler table and cProfile
#     (cut off by r1's time limit), its turns after (a) and (b) are done.
set -u
export GROVE_LIBRARY=$PWD/bazel-out/k8-opt/bin/capi/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
export GROVE_CACHE_DIR=$(mktemp -d) PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
E="$OUT/exit.txt"; : > "$E"
probe() { # label, env...
  local label=$1; shift
  env "$@" timeout 34 python3 -m torch.distributed.run --standalone --nproc_per_node 1 \
    benchmarks/exit_probe.py --cases mlp16x512_b32 --iters 10 --variants grove > /tmp/ex_$label.log 2>&1
  local rc=$?
  { echo "== $label rc=$rc asserts=$(grep -c 'INTERNAL ASSERT' /tmp/ex_$label.log) t=$(el)"
    grep -E "exit_probe|^  File|Fatal Python|^mlp16x512_b32 .*us/step|^mlp16x512_b32 grove:" /tmp/ex_$label.log | head -12; } >> "$E"
}
probe after GROVE_EXIT_PROBE=plain &
probe before GROVE_EXIT_PROBE=plain GROVE_CLOSE_AT_FINALIZATION=1 &
( cd tests/python && for t in cached_outputs_test exit_release_test; do
    timeout 30 python3 $t.py > /tmp/$t.log 2>&1; echo "== $t rc=$?"; grep -v "^  warnings.warn\|UserWarning" /tmp/$t.log | tail -25; done > "$OUT/tests.txt" 2>&1 ) &
timeout 38 python3 benchmarks/decode_split.py --variants eager,floor,grove --turns 4 --ready-by 22 \
  --profile-variants grove --cprofile grove --no-guard-skip --out "$OUT" > "$OUT/decode_split.txt" 2>&1
echo "decode_split rc=$? t=$(el)"
wait
echo "after all t=$(el)"
grep -v -E "^\[transformers\]|UserWarning|warnings.warn|_warn_once|^ *$" "$OUT/decode_split.txt" \
  | grep -E "tok/s|ready|failed|under torch.profiler|split\.|cuda|aten::item|local_scalar|tree per|per call:" | cut -c1-300 | head -40
cat "$E" | cut -c1-220
grep -E "^== |^Ran|^OK|^FAIL|^ERROR" "$OUT/tests.txt"
echo "total $(el) s"
