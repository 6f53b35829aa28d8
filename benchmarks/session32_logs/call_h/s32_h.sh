# Session 32 call H (1 GPU): importer_special_ops_test on PyTorch 2.11 after the softshrink NaN
# fix (call G: one failure, one error whose log did not come back), and importer_test's new
# torch.compiler.cudagraph_mark_step_begin test.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
cd tests/python
for t in importer_special_ops_test importer_test; do
  GROVE_CACHE_DIR=/tmp/gc_$t timeout 120 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ')"
  grep -A40 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v '^\s*\^' | cut -c1-300 | tail -60
done
grep -E 'mark_step' $OUT/r/importer_test.txt
echo "done total=$((SECONDS-start))"
