set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
cd tests/python && GROVE_CACHE_DIR=/tmp/gc_t timeout 150 python3 door_fuzz_test.py > $OUT/door_fuzz_test.txt 2>&1; echo "door_fuzz_test rc=$? s=$((SECONDS-start))"; grep -E "^(Ran|OK|FAILED)|door fuzz on|async sim" $OUT/door_fuzz_test.txt; grep -A20 "^FAIL:\|^ERROR:" $OUT/door_fuzz_test.txt | grep -v -i warn | tail -25
echo "done total=$((SECONDS-start))"
