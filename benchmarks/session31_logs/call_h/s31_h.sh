# Session 31 call H (1 GPU): more inference scenarios (.gpu/s31_probe3.py).
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
GROVE_CACHE_DIR=/tmp/gc_p timeout 300 python3 .gpu/s31_probe3.py > $OUT/r/probe3.txt 2>&1; echo "probe3 rc=$? s=$((SECONDS-start))"
sed -n '/==== summary/,$p' $OUT/r/probe3.txt | cut -c1-330
grep -B2 -A14 "^Traceback" $OUT/r/probe3.txt | grep -v -i warn | cut -c1-250 | tail -90
tar -C $OUT -czf $OUT/h.tar.gz r && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
