# Session 31 call J (1 GPU): the user-scenarios test after its lockstep refactor; which LLaMA graph
# runs in PyTorch under dynamic shapes (.gpu/s31_dyn.py).
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
(cd tests/python && GROVE_CACHE_DIR=/tmp/gc_i timeout 200 python3 gpu_user_scenarios_test.py > $OUT/gpu_user_scenarios_test.txt 2>&1; echo "scenarios rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/gpu_user_scenarios_test.txt | tr '\n' ' ')"; grep -A20 "^FAIL:\|^ERROR:" $OUT/gpu_user_scenarios_test.txt | cut -c1-250 | tail -30) &
GROVE_CACHE_DIR=/tmp/gc_d timeout 150 python3 .gpu/s31_dyn.py > $OUT/dyn.txt 2>&1; echo "dyn rc=$?"
wait
grep -v -i "warn" $OUT/dyn.txt | cut -c1-300 | tail -50
echo "done total=$((SECONDS-start))"
