# Session 32 call G (1 GPU): the final sweep after the value_kinds refactor, the logit/shrink
# backwards and the door's stale-input advice without an extra frame: the GPU door tests and the
# importer's sim tests on PyTorch 2.11.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
t() { (cd tests/python && GROVE_CACHE_DIR=/tmp/gc_$1 timeout $2 python3 $1.py > $OUT/r/$1.txt 2>&1; echo "$1 rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$1.txt | tr '\n' ' ')"); }
(t gpu_user_scenarios_test 300; t door_call_test 100) &
(t gpu_torch_training_test 300; t gpu_torch_backend_test 150; t static_cache_decode_test 120) &
(t door_fuzz_test 300) &
(for x in importer_edge_values_test importer_special_ops_test importer_test importer_ops_test image_backward_test; do t $x 200; done) &
wait
for f in $OUT/r/*_test.txt; do grep -A24 "^FAIL:\|^ERROR:" $f | grep -v '^\s*\^' | cut -c1-250 | tail -26; done
echo "done total=$((SECONDS-start))"
