# Session 30 lease, call 2 (the same 2-GPU host, warm): lane A (GPU 0) torch_zoo --train, then
# compare_torch; lane B (GPU 1) torch_zoo's decode rows, then (not timed) ViT-B/16 trained through
# the door; then both GPUs: the data-parallel tables (two_gpu_training.sh).
set -u; start=$SECONDS
L=$OUT/gpu_logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/nvidia_smi.txt; date -u '+%Y-%m-%d %H:%M UTC' > $OUT/started.txt
[ -x /tmp/bb/grove/benchmarks/data_parallel/data_parallel ] || { echo "machine not warm: unpacking again"; mkdir -p /tmp/bb && tar -C /tmp/bb -xJf gpu_bundle_bench/payload.tar.xz; }
B=/tmp/bb/grove; export LD_LIBRARY_PATH=$B/_syslib
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
T=$OUT/steps.tsv; : > $T
step() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $L/$name.txt 2>&1; local rc=$?; printf 'step\t%s\t%s\t%s\t%s\t%s\n' $name "$([ $rc = 0 ] && echo ok || ([ $rc = 124 ] && echo "timed out" || echo "failed (exit $rc)"))" $rc $((SECONDS-s)) $lim >> $T; echo "== $name rc=$rc s=$((SECONDS-s)) total=$((SECONDS-start))"; grep -v -i "warn\|call_func_at_runtime\|^\[transformers\]\|^W11\|Loading weights" $L/$name.txt | tail -${TAILN:-8} | cut -c1-230; }
export -f step; export L T start OUT
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 GROVE_CACHE_DIR=/tmp/grove_cache_f
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
( export CUDA_VISIBLE_DEVICES=0
  TAILN=30 step torch_zoo_train 170 python3 benchmarks/torch_zoo.py --train --no-decode --budget-s 150 --repeats 20 --json $L/torch_zoo_train.json
  TAILN=24 step torch 150 python3 benchmarks/compare_torch.py --json $L/torch.json --iters 100 --warmup 10 --budget-s 140
) > $OUT/laneA.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAILN=14 step torch_zoo_decode 235 python3 benchmarks/torch_zoo.py --decode --no-zoo --decode-child-s 70 --budget-s 220 --json $L/torch_zoo_decode.json
  GROVE_CACHE_DIR=/tmp/gc_vit timeout 90 python3 benchmarks/zoo_survey.py --train --models tv_vit_b_16 --json $OUT/vit_train.json > $OUT/vit_train.txt 2>&1; echo "vit_train rc=$?"
  grep -E "^tv_|^    in PyTorch" $OUT/vit_train.txt | cut -c1-300
) > $OUT/laneB.txt 2>&1 &
wait
cat $OUT/laneA.txt $OUT/laneB.txt | cut -c1-230 | tail -80
TAILN=40 step two_gpu_training 70 env DATA_PARALLEL=$B/benchmarks/data_parallel/data_parallel MODELS=$B/benchmarks/models OUT=$L bash benchmarks/data_parallel/two_gpu_training.sh
date -u '+%Y-%m-%d %H:%M UTC' > $OUT/finished.txt
tar -C $OUT -czf $OUT/L2.tar.gz gpu_logs steps.tsv started.txt finished.txt nvidia_smi.txt laneA.txt laneB.txt vit_train.txt vit_train.json && rm -rf $L
echo "done total=$((SECONDS-start))"
