# Session 31 call F (1 GPU): a new user's training scenarios (.gpu/s31_probe2.py) at 0280c25.
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
GROVE_CACHE_DIR=/tmp/gc_p timeout 300 python3 .gpu/s31_probe2.py > $OUT/r/probe2.txt 2>&1; echo "probe2 rc=$? s=$((SECONDS-start))"
sed -n '/==== summary/,$p' $OUT/r/probe2.txt | cut -c1-330
grep -B2 -A14 "^Traceback" $OUT/r/probe2.txt | grep -v -i warn | cut -c1-250 | tail -90
tar -C $OUT -czf $OUT/f.tar.gz r && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
