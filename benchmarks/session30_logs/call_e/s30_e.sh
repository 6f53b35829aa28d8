set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
cd tests/python && timeout 100 python3 gpu_random_draws_test.py > $OUT/gpu_random_draws_test.txt 2>&1; echo "rc=$?"; grep -v -i warn $OUT/gpu_random_draws_test.txt | tail -25
echo "done total=$((SECONDS-start))"
