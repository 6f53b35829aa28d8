# Session 32 call D (1 GPU): after float64-in-PyTorch, narrow integer inputs, the special-op
# converters and the stale-input hint: new user cases (.gpu/s32_probe7.py), gpu_user_scenarios_test
# (its new growing-cache test), door and training fuzz tests, zoo and training tests.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
t() { (cd tests/python && GROVE_CACHE_DIR=/tmp/gc_$1 timeout $2 python3 $1.py > $OUT/r/$1.txt 2>&1; echo "$1 rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$1.txt | tr '\n' ' ')"); }
GROVE_CACHE_DIR=/tmp/gc_p timeout 200 python3 .gpu/s32_probe7.py > $OUT/r/probe7.txt 2>&1; echo "probe7 rc=$? s=$((SECONDS-start))"
grep -E "^\(|graphs [0-9]+; ops left" $OUT/r/probe7.txt | cut -c1-500
grep -B2 -A12 "^Traceback" $OUT/r/probe7.txt | grep -v -i warn | grep -v '^\s*\^' | cut -c1-250 | tail -30
(t gpu_user_scenarios_test 300; t gpu_torch_backend_test 150) &
(t door_fuzz_test 300; t training_fuzz_test 200) &
(t gpu_zoo_test 300; t gpu_torch_training_test 300) &
wait
for f in $OUT/r/*_test.txt; do grep -A24 "^FAIL:\|^ERROR:" $f | grep -v '^\s*\^' | cut -c1-250 | tail -26; done
echo "done total=$((SECONDS-start))"
