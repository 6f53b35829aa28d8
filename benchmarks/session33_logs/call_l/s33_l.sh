# Session 33 call L (1 GPU): the allocator change (3047af1: free segments of pools no graph captured
# go back on out of memory; each private-pool allocation asks whether its stream captures) on cuda:
# the door and decode suites, and out_of_memory_test on PyTorch 2.11.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
cd tests/python
for t in out_of_memory_test gpu_torch_backend_test gpu_decode_test gpu_torch_training_test gpu_input_writes_test gpu_zoo_test; do
  GROVE_CACHE_DIR=/tmp/gc_$t timeout 100 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"
  grep -A20 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v '^\s*\^' | cut -c1-300 | tail -20
  [ $((SECONDS-start)) -gt 200 ] && { echo "stopping: time"; break; }
done
echo "done total=$((SECONDS-start))"
