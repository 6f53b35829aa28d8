# Session 21 call 1 (one GPU): the GPU tests session 20 did not run, and the GEMV X-ahead fault under compute-sanitizer.
set -u; start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
mkdir -p /tmp/s21 && tar -C /tmp/s21 -xJf .gpu/s21bin.tar.xz; B=/tmp/s21/grove
export GROVE_LIBRARY=$B/libgrove.so GROVE_BINARY=$B/grove PYTHONUNBUFFERED=1 GROVE_CACHE_DIR=/tmp/grove_cache_t
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
mkdir -p $OUT/t
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1); echo "sanitizer: $CS"
( cd $B; export LD_LIBRARY_PATH=$B/_syslib
  GROVE_GEMV_X_AHEAD=1 timeout 40 ./decode --configs 1b --batches 1 --steps 8 --repeats 1 > $OUT/t/xahead_plain.txt 2>&1; echo "xahead plain rc=$?"
  GROVE_GEMV_X_AHEAD=1 timeout 110 $CS --tool memcheck --show-backtrace device --print-limit 20 ./decode --configs 1b --batches 1 --steps 4 --repeats 1 > $OUT/t/xahead_memcheck.txt 2>&1; echo "xahead memcheck rc=$?"
  GROVE_GEMV_X_AHEAD=0 timeout 40 ./decode --configs 1b --batches 1 --steps 8 --repeats 1 > $OUT/t/xahead_off.txt 2>&1; echo "xahead off rc=$?"
) > $OUT/laneS.txt 2>&1 &
( cd tests/python; timeout 280 python3 gpu_zoo_test.py > $OUT/t/gpu_zoo_test.txt 2>&1; echo "gpu_zoo_test rc=$? s=$((SECONDS-start))" ) > $OUT/laneZ.txt 2>&1 &
( cd tests/python; for t in door_call_test cached_outputs_test model_threads_test gpu_step_test gpu_decode_test; do
    s=$SECONDS; timeout 120 python3 $t.py > $OUT/t/$t.txt 2>&1; echo "$t rc=$? s=$((SECONDS-s)) $(tail -3 $OUT/t/$t.txt | tr '\n' ' ' | cut -c1-200)"; done ) > $OUT/laneP.txt 2>&1 &
( cd tests/python; for t in gpu_torch_training_test gpu_input_writes_test gpu_torch_backend_test; do
    s=$SECONDS; timeout 150 python3 $t.py > $OUT/t/$t.txt 2>&1; echo "$t rc=$? s=$((SECONDS-s)) $(tail -3 $OUT/t/$t.txt | tr '\n' ' ' | cut -c1-200)"; done
  cd ../serving/llm; s=$SECONDS; timeout 100 python3 gpu_transformers_test.py > $OUT/t/gpu_transformers_test.txt 2>&1; echo "gpu_transformers_test rc=$? s=$((SECONDS-s)) $(tail -3 $OUT/t/gpu_transformers_test.txt | tr '\n' ' ' | cut -c1-200)" ) > $OUT/laneQ.txt 2>&1 &
wait
cat $OUT/laneS.txt $OUT/laneP.txt $OUT/laneQ.txt $OUT/laneZ.txt
grep -E "^(ERROR|FAIL|Ran|OK|FAILED)|Error|error" $OUT/t/gpu_zoo_test.txt | head -20
grep -m12 -E "=========|Illegal|Invalid|kernel|at 0x" $OUT/t/xahead_memcheck.txt | cut -c1-250
tail -4 $OUT/t/xahead_plain.txt
echo "done total=$((SECONDS-start))"
