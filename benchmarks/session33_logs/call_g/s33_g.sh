# Session 33 call G (1 GPU): Note [Out of memory while compiling waits for the first call]:
# s33_oom.py again (call F: BackendCompilerFailed at compile), importer_test on PyTorch 2.11 (its
# new test mocks the trace), out_of_memory_test.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
timeout 150 python3 .gpu/s33_oom.py > $OUT/r/oom.txt 2>&1; echo "oom rc=$? s=$((SECONDS-start))"; grep -v -i "warn" $OUT/r/oom.txt | tail -12 | cut -c1-300
cd tests/python
for t in importer_test out_of_memory_test; do
  GROVE_CACHE_DIR=/tmp/gc_$t timeout 200 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"
  grep -A25 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v '^\s*\^' | cut -c1-300 | tail -30
done
echo "done total=$((SECONDS-start))"
