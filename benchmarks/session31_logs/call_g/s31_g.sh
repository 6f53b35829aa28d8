set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
GROVE_CACHE_DIR=/tmp/gc_g timeout 200 python3 .gpu/s31_diag2.py > $OUT/diag2.txt 2>&1; echo "rc=$? s=$((SECONDS-start))"
grep -v -i "warn\|^\[transformers\]" $OUT/diag2.txt | cut -c1-400 | tail -40
