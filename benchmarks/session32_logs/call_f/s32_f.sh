# Session 32 call F (1 GPU): more of a new user's door cases (.gpu/s32_probe8.py: torch.cond, a
# custom op, hooks/nested compile/functional_call/vmap, grove eager mode, 40 lengths through BERT),
# and gpu_user_scenarios_test with its growing-cache test after call D's fix of the test.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
t() { (cd tests/python && GROVE_CACHE_DIR=/tmp/gc_$1 timeout $2 python3 $1.py > $OUT/r/$1.txt 2>&1; echo "$1 rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$1.txt | tr '\n' ' ')"); }
(t gpu_user_scenarios_test 300) &
GROVE_CACHE_DIR=/tmp/gc_p timeout 250 python3 .gpu/s32_probe8.py > $OUT/r/probe8.txt 2>&1; echo "probe8 rc=$? s=$((SECONDS-start))"
grep -E "^\(|graphs [0-9]+; ops left|lengths in" $OUT/r/probe8.txt | cut -c1-400
grep -B2 -A14 "^Traceback" $OUT/r/probe8.txt | grep -v -i warn | grep -v '^\s*\^' | cut -c1-250 | tail -40
wait
for f in $OUT/r/*_test.txt; do grep -A24 "^FAIL:\|^ERROR:" $f | grep -v '^\s*\^' | cut -c1-250 | tail -26; done
echo "done total=$((SECONDS-start))"
