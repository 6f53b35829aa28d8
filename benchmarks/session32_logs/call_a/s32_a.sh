# Session 32 call A (1 GPU): the runs session 31 owed (gpu_user_scenarios_test, gpu_torch_backend_test,
# the dynamic-shapes probe) and the edge-case probe (.gpu/s32_probe4.py), with this session's
# edge-value fixes (Python and the cast rounding in C++: a new lib.xz); the importer's sim tests on 2.11.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
(cd tests/python && for t in importer_edge_values_test importer_math_ops_test importer_ops_test importer_test; do GROVE_CACHE_DIR=/tmp/gc_s_$t timeout 250 nice python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ')"; done) &
(cd tests/python && GROVE_CACHE_DIR=/tmp/gc_u timeout 300 python3 gpu_user_scenarios_test.py > $OUT/r/gpu_user_scenarios_test.txt 2>&1; echo "scenarios rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/gpu_user_scenarios_test.txt | tr '\n' ' ')"; grep -A25 "^FAIL:\|^ERROR:" $OUT/r/gpu_user_scenarios_test.txt | cut -c1-250 | tail -40) 
(cd tests/python && GROVE_CACHE_DIR=/tmp/gc_b timeout 250 python3 gpu_torch_backend_test.py > $OUT/r/gpu_torch_backend_test.txt 2>&1; echo "backend rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/gpu_torch_backend_test.txt | tr '\n' ' ')"; grep -A25 "^FAIL:\|^ERROR:" $OUT/r/gpu_torch_backend_test.txt | cut -c1-250 | tail -40) &
GROVE_CACHE_DIR=/tmp/gc_p timeout 300 python3 .gpu/s32_probe4.py > $OUT/r/probe4.txt 2>&1; echo "probe4 rc=$? s=$((SECONDS-start))"
sed -n '/==== summary/,$p' $OUT/r/probe4.txt | cut -c1-400
grep -B2 -A14 "^Traceback" $OUT/r/probe4.txt | grep -v -i warn | cut -c1-250 | tail -60
GROVE_CACHE_DIR=/tmp/gc_d timeout 120 python3 .gpu/s31_dyn_next.py > $OUT/r/dyn.txt 2>&1; echo "dyn rc=$?"
grep -v -i "warn" $OUT/r/dyn.txt | cut -c1-300 | tail -40
wait
for f in $OUT/r/importer*.txt; do grep -A20 "^FAIL:\|^ERROR:" $f | cut -c1-250 | tail -25; done
echo "done total=$((SECONDS-start))"
