# Session 30 lease, call 1b (the same 2-GPU host): call 1's PyTorch steps again, with libgrove.so
# from .gpu/lib.xz (the benchmarks-only bundle carries none): lane A (GPU 0) torch_backend --train;
# lane B (GPU 1) torch_zoo.
set -u; start=$SECONDS
L=$OUT/gpu_logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/nvidia_smi.txt; date -u '+%Y-%m-%d %H:%M UTC' > $OUT/started.txt
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
T=$OUT/steps.tsv; : > $T
step() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $L/$name.txt 2>&1; local rc=$?; printf 'step\t%s\t%s\t%s\t%s\t%s\n' $name "$([ $rc = 0 ] && echo ok || ([ $rc = 124 ] && echo "timed out" || echo "failed (exit $rc)"))" $rc $((SECONDS-s)) $lim >> $T; echo "== $name rc=$rc s=$((SECONDS-s)) total=$((SECONDS-start))"; grep -v -i "warn\|call_func_at_runtime\|^\[transformers\]\|^W11\|Loading weights" $L/$name.txt | tail -${TAILN:-8} | cut -c1-230; }
export -f step; export L T start OUT
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 GROVE_CACHE_DIR=/tmp/grove_cache_f
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
( export CUDA_VISIBLE_DEVICES=0
  TAILN=30 step torch_backend_train 130 python3 benchmarks/torch_backend.py --train --repeats 40 --models mlp16x512_b32,gpt4x256_b8_t32 --variants torch_reduce_overhead,cuda_graph,grove,grove_optim,grove_optim_in_backward,grove_step,grove_step_sgd --json $L/torch_backend_train.json
) > $OUT/laneA.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAILN=40 step torch_zoo 245 python3 benchmarks/torch_zoo.py --no-decode --budget-s 225 --repeats 40 --top 3 --json $L/torch_zoo.json
) > $OUT/laneB.txt 2>&1 &
wait
cat $OUT/laneA.txt $OUT/laneB.txt | cut -c1-230 | tail -100
date -u '+%Y-%m-%d %H:%M UTC' > $OUT/finished.txt
tar -C $OUT -czf $OUT/L1b.tar.gz gpu_logs steps.tsv started.txt finished.txt nvidia_smi.txt laneA.txt laneB.txt && rm -rf $L
echo "done total=$((SECONDS-start))"
