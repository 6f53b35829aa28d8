# Session 31 call D (1 GPU): a new user's scenarios through the door (.gpu/s31_probe.py) and the
# input-writes test again after the state-output fix.
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
( cd tests/python; for x in input_writes_test warm_up_outputs_test; do GROVE_CACHE_DIR=/tmp/gc_1 timeout 100 python3 $x.py > $OUT/r/$x.txt 2>&1; echo "$x rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$x.txt | tr '\n' ' ')"; done ) &
GROVE_CACHE_DIR=/tmp/gc_p timeout 400 python3 .gpu/s31_probe.py > $OUT/r/probe.txt 2>&1; echo "probe rc=$? s=$((SECONDS-start))"
wait
sed -n '/==== summary/,$p' $OUT/r/probe.txt | cut -c1-330
grep -B2 -A12 "^Traceback" $OUT/r/probe.txt | grep -v -i warn | cut -c1-250 | tail -60
tar -C $OUT -czf $OUT/d.tar.gz r && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
