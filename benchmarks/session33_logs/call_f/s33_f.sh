# Session 33 call F (1 GPU): after the C API device guard and the out-of-memory class (e63c4ef..
# e88524b): out of memory through the door on cuda (s33_oom.py), then the broad door suites on
# the new library.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
timeout 150 python3 .gpu/s33_oom.py > $OUT/r/oom.txt 2>&1; echo "oom rc=$? s=$((SECONDS-start))"; grep -v -i "warn" $OUT/r/oom.txt | tail -12 | cut -c1-400
cd tests/python
for t in gpu_torch_backend_test gpu_zoo_test gpu_torch_training_test door_fuzz_test gpu_decode_test out_of_memory_test; do
  GROVE_CACHE_DIR=/tmp/gc_$t timeout 200 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"
  grep -A25 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v '^\s*\^' | cut -c1-300 | tail -30
done
echo "done total=$((SECONDS-start))"
