# Session 32 call C (1 GPU): after the GEMM-dtype fix (attention's integer seed/offset): the HF
# generate cases with the ops left to PyTorch listed (.gpu/s32_probe6.py), and the GPU test sweep
# over this session's changes (cast rounding in kernels, NaN positions, empty values, laid_out).
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
t() { (cd tests/python && GROVE_CACHE_DIR=/tmp/gc_$1 timeout $2 python3 $1.py > $OUT/r/$1.txt 2>&1; echo "$1 rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$1.txt | tr '\n' ' ')"); }
GROVE_CACHE_DIR=/tmp/gc_p timeout 200 python3 .gpu/s32_probe6.py > $OUT/r/probe6.txt 2>&1; echo "probe6 rc=$? s=$((SECONDS-start))"
grep -E "^\(|graphs [0-9]+; ops left|tokens equal|graphs in PyTorch" $OUT/r/probe6.txt | cut -c1-500
grep -B2 -A12 "^Traceback" $OUT/r/probe6.txt | grep -v -i warn | grep -v '^\s*\^' | cut -c1-250 | tail -16
(t gpu_zoo_test 300; t gpu_decode_test 120; t static_cache_decode_test 150) &
(t gpu_torch_training_test 300; t gpu_input_writes_test 120) &
(t door_fuzz_test 300; t gpu_torch_backend_test 150; t importer_models_test 100) &
wait
for f in $OUT/r/*_test.txt; do grep -A24 "^FAIL:\|^ERROR:" $f | grep -v '^\s*\^' | cut -c1-250 | tail -26; done
echo "done total=$((SECONDS-start))"
