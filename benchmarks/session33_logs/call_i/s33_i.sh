# Session 33 call I (1 GPU): Note [Inputs that share memory with a written input] through the
# door (s33_alias.py, call H's probe), and the suites whose graphs write inputs (the check runs
# on each of their calls): gpu_decode_test (tokens/s against call F's), gpu_input_writes_test,
# gpu_user_scenarios_test, static_cache_decode_test, aliased_writes_test on PyTorch 2.11.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
timeout 120 python3 .gpu/s33_alias.py > $OUT/r/alias.txt 2>&1; echo "alias rc=$? s=$((SECONDS-start))"; grep -v -i "warn" $OUT/r/alias.txt | tail -10 | cut -c1-300
cd tests/python
for t in aliased_writes_test gpu_decode_test gpu_input_writes_test static_cache_decode_test gpu_user_scenarios_test; do
  [ -f $t.py ] || { echo "$t: no such test"; continue; }
  GROVE_CACHE_DIR=/tmp/gc_$t timeout 200 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"
  grep -c "share memory" $OUT/r/$t.txt
  grep -A25 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v '^\s*\^' | cut -c1-300 | tail -30
done
grep -h "tokens/s" $OUT/r/gpu_decode_test.txt | cut -c1-200
echo "done total=$((SECONDS-start))"
