# Session 31 call I (1 GPU): the kept scenarios test (tests/python/gpu_user_scenarios_test.py).
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
cd tests/python && GROVE_CACHE_DIR=/tmp/gc_i timeout 250 python3 gpu_user_scenarios_test.py -v > $OUT/gpu_user_scenarios_test.txt 2>&1; echo "rc=$? s=$((SECONDS-start))"
grep -E "^test_|^Ran|^OK|^FAILED" $OUT/gpu_user_scenarios_test.txt | cut -c1-200
grep -A25 "^FAIL:\|^ERROR:" $OUT/gpu_user_scenarios_test.txt | grep -v -i warn | cut -c1-250 | tail -60
