# Session 33 call E (2 GPUs of one host): gpu_multi_device_test after the destroy functions took
# the device guard too and the test imported grove.torch (call D: backend not registered; the
# release of a cuda:1 grove.Model moved the caller's device); session 32's library again for the
# before-the-fix figure.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
for lib in lib_s32 lib; do
  xz -dc .gpu/$lib.xz > .gpu/fb/$lib.so
  (cd tests/python && GROVE_LIBRARY=$PWD/../../.gpu/fb/$lib.so GROVE_CACHE_DIR=/tmp/gc_$lib timeout 200 python3 gpu_multi_device_test.py -v > $OUT/r/multi_device_$lib.txt 2>&1; echo "multi_device $lib rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/multi_device_$lib.txt | tr '\n' ' ') s=$((SECONDS-start))")
  grep -E " \.\.\. |Error:|moved the caller" $OUT/r/multi_device_$lib.txt | cut -c1-250 | head -20
done
echo "done total=$((SECONDS-start))"
