# Session 32 call B (1 GPU): after the laid_out fix (expanded traced layouts): call A's failing
# probe cases with the ops left to PyTorch listed (.gpu/s32_probe5.py), gpu_user_scenarios_test,
# the dynamic-shapes probe, and the GPU door tests that read layouts.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
(cd tests/python && for t in importer_test importer_models_test random_draws_test; do GROVE_CACHE_DIR=/tmp/gc_s_$t timeout 250 nice python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ')"; done) &
(cd tests/python && GROVE_CACHE_DIR=/tmp/gc_u timeout 300 python3 gpu_user_scenarios_test.py > $OUT/r/gpu_user_scenarios_test.txt 2>&1; echo "scenarios rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/gpu_user_scenarios_test.txt | tr '\n' ' ')"; grep -A30 "^FAIL:\|^ERROR:" $OUT/r/gpu_user_scenarios_test.txt | cut -c1-250 | tail -30) &
GROVE_CACHE_DIR=/tmp/gc_p timeout 300 python3 .gpu/s32_probe5.py > $OUT/r/probe5.txt 2>&1; echo "probe5 rc=$? s=$((SECONDS-start))"
grep -E "^\(|graphs [0-9]+; ops left|tokens equal|graphs in PyTorch" $OUT/r/probe5.txt | cut -c1-600
grep -B2 -A20 "^Traceback" $OUT/r/probe5.txt | grep -v -i warn | grep -v '^\s*\^' | cut -c1-250 | tail -40
GROVE_CACHE_DIR=/tmp/gc_d timeout 120 python3 .gpu/s31_dyn_next.py > $OUT/r/dyn.txt 2>&1; echo "dyn rc=$?"
grep -v -i "warn" $OUT/r/dyn.txt | grep -v '^\s*\^' | cut -c1-300 | tail -45
wait
for f in $OUT/r/importer*.txt $OUT/r/random*.txt; do grep -A20 "^FAIL:\|^ERROR:" $f | cut -c1-250 | tail -25; done
echo "done total=$((SECONDS-start))"
