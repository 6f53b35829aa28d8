set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
timeout 150 python3 .gpu/s31_fuzzdiag.py > $OUT/fuzzdiag.txt 2>&1; echo "rc=$? s=$((SECONDS-start))"
grep -v -i warn $OUT/fuzzdiag.txt | cut -c1-250 | tail -150
