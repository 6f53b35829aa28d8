# Session 23 final lease, call 2 (the same 2-GPU host, warm): lane A (GPU 0) torch_zoo --train; lane B (GPU 1)
# the merged tree's GPU tests (not timed) and A/B lines; then both GPUs: the data-parallel tables
# (two_gpu_training.sh) and data_parallel_test.
set -u; start=$SECONDS
L=$OUT/gpu_logs; mkdir -p $L $OUT/ab
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/nvidia_smi.txt; date -u '+%Y-%m-%d %H:%M UTC' > $OUT/started.txt
mkdir -p .gpu/fb; [ -f /tmp/bb/grove/libgrove.so ] && cp /tmp/bb/grove/libgrove.so .gpu/fb/
[ -x /tmp/bb/grove/benchmarks/data_parallel/data_parallel ] || { echo "NO BENCH BUNDLE from call 1 (machine not warm)"; }
B=/tmp/bb/grove; export LD_LIBRARY_PATH=$B/_syslib
T=$OUT/steps.tsv; : > $T
step() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $L/$name.txt 2>&1; local rc=$?; printf 'step\t%s\t%s\t%s\t%s\t%s\n' $name "$([ $rc = 0 ] && echo ok || ([ $rc = 124 ] && echo "timed out" || echo "failed (exit $rc)"))" $rc $((SECONDS-s)) $lim >> $T; echo "== $name rc=$rc s=$((SECONDS-s)) total=$((SECONDS-start))"; grep -v -i "warn\|call_func_at_runtime\|^\[transformers\]\|^W11\|Loading weights" $L/$name.txt | tail -${TAILN:-8} | cut -c1-230; }
ab() { local name=$1 lim=$2; shift 2; local s=$SECONDS; (timeout -k 5 $lim "$@") > $OUT/ab/$name.txt 2>&1; echo "== ab $name rc=$? s=$((SECONDS-s)) total=$((SECONDS-start))"; grep -v -i "warn" $OUT/ab/$name.txt | tail -${TAILN:-6} | cut -c1-230; }
export -f step ab; export L T start OUT
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 GROVE_CACHE_DIR=/tmp/grove_cache_f
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
mkdir -p $OUT/tests
( export CUDA_VISIBLE_DEVICES=0
  TAILN=30 step torch_zoo_train 170 python3 benchmarks/torch_zoo.py --train --no-decode --budget-s 150 --repeats 20 --json $L/torch_zoo_train.json
  [ -f .gpu/ab_laneA2.sh ] && source .gpu/ab_laneA2.sh
) > $OUT/laneA.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  mkdir -p /tmp/tb && tar -C /tmp/tb -xJf gpu_bundle_tests/payload.tar.xz 2>/dev/null
  for t in $(cd /tmp/tb/grove 2>/dev/null && ls tests/*/*_test tests/*/*/*_test 2>/dev/null | grep -v data_parallel_test); do
    (cd /tmp/tb/grove && timeout 45 ./$t > $OUT/tests/$(basename $t).txt 2>&1); echo "$t rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/tests/$(basename $t).txt | tr '\n' ' ')"
  done
  for t in ${PY_GPU_TESTS:-}; do
    [ $((SECONDS - start)) -lt 120 ] || { echo "$t: not run (lane time)"; continue; }
    (cd tests/python && timeout $((190 - (SECONDS - start))) python3 $t.py > $OUT/tests/$t.txt 2>&1); echo "$t rc=$? $(tail -3 $OUT/tests/$t.txt | tr '\n' ' ' | cut -c1-200)"
  done
  [ -f .gpu/ab_laneB2.sh ] && source .gpu/ab_laneB2.sh
) > $OUT/laneB.txt 2>&1 &
wait
cat $OUT/laneA.txt $OUT/laneB.txt | cut -c1-230 | tail -80
TAILN=40 step two_gpu_training 70 env DATA_PARALLEL=$B/benchmarks/data_parallel/data_parallel MODELS=$B/benchmarks/models OUT=$L bash benchmarks/data_parallel/two_gpu_training.sh
(cd /tmp/tb/grove && timeout 40 ./tests/distributed/data_parallel_test > $OUT/tests/data_parallel_test_2gpu.txt 2>&1; echo "data_parallel_test (2 GPUs) rc=$? $(grep -E 'PASSED|FAILED' $OUT/tests/data_parallel_test_2gpu.txt | tail -3 | tr '\n' ' ')")
[ -f .gpu/ab_duo.sh ] && source .gpu/ab_duo.sh
date -u '+%Y-%m-%d %H:%M UTC' > $OUT/finished.txt
tar -C $OUT -czf $OUT/final2.tar.gz gpu_logs steps.tsv started.txt finished.txt nvidia_smi.txt laneA.txt laneB.txt tests ab && rm -rf $L
echo "done total=$((SECONDS-start))"
