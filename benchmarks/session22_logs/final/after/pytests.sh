# Session 22, after the final lease: the door's GPU-host Python tests on PyTorch 2.11 against the merged tree (the door's
# autograd function now skips PyTorch's Python apply by default), one H100/H200; each test file under its own limit.
set -u; start=$SECONDS
mkdir -p /tmp/lib && xz -dc .gpu/lib.xz > /tmp/lib/libgrove.so
export GROVE_LIBRARY=/tmp/lib/libgrove.so PYTHONUNBUFFERED=1 GROVE_CACHE_DIR=/tmp/grove_cache_p
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
nvidia-smi --query-gpu=name --format=csv,noheader; mkdir -p $OUT/tests
cd tests/python
for t in gpu_torch_backend_test gpu_torch_training_test gpu_step_test gpu_input_writes_test door_call_test cached_outputs_test model_threads_test exit_release_test; do
  [ -f $t.py ] || { echo "$t: no such file"; continue; }
  left=$((400 - (SECONDS - start))); [ $left -gt 20 ] || { echo "$t: not run (time)"; continue; }
  lim=$(( left < 120 ? left : 120 ))
  timeout -k 5 $lim python3 $t.py > $OUT/tests/$t.txt 2>&1; echo "$t rc=$? s=$((SECONDS-start)) $(grep -E '^(Ran|OK|FAILED)' $OUT/tests/$t.txt | tr '\n' ' ')"
done
