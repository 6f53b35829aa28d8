#!/usr/bin/env bash
# wt-dp r2 (session 23; both GPUs of one host, <= 60 s): native data parallel with this branch's new
# defaults (data_parallel_all_reduce(): merge64 = a last bucket under 64 KiB joins the one before,
# Note [Small last bucket]; defer1 = the last bucket is reduced by the optimizer step, overlapping
# the other params' updates, Note [Last buckets reduced in the optimizer step]) against the old
# plan (merge0+defer0), each variant on 1 and then 2 GPUs back to back in ONE process (cudagraphs,
# overlap on, 4 MiB buckets, 150 timed steps after 10); "flat" = the defaults. Then the goal row's
# command (two_gpu_training.sh part 1: no --variants) and the cuda instances of data_parallel_test
# (deferred vs plain bitwise on NCCL; flat vs grouped; overlapped vs in line).
set -u
T0=$SECONDS; left() { echo $(( 58 - (SECONDS - T0) )); }
export LD_LIBRARY_PATH=$PWD/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib; do
    [ -f $d/libnccl.so.2 ] && export GROVE_NCCL_DIR=$d && break
  done
fi
echo "GROVE_NCCL_DIR=${GROVE_NCCL_DIR:-ld.so}"; nvidia-smi -L | head -2 | tee $OUT/nvidia_smi.txt
DP="bin/data_parallel --device cuda --backends cudagraphs --overlap on --iters 150 --warmup 10 --models benchmarks/models"
step() { # name limit args...
  local name=$1 limit=$2; shift 2
  local l=$(left); [ $l -lt $limit ] && limit=$l; [ $limit -le 2 ] && { echo "$name: no time left"; return; }
  timeout -k 2 $limit "$@" > $OUT/$name.txt 2>&1; echo "== $name rc=$? t=$((SECONDS-T0))"
  grep -E "^data_parallel: " $OUT/$name.txt | sed 's/^data_parallel: //; s/ cudagraphs / /; s/ (KiB[^)]*)//; s/ overlap / /; s/ us median, / /; s/ buckets//; s/in the optimizer step/deferred/'
}
step mlp 16 $DP --cases mlp16x512 --gpus 1,2 --json $OUT/mlp.json --variants \
merge0+defer0,flat,merge64+defer0,merge0+defer2,defer2,first1024,flat,merge0+defer0,defer2,flat,merge64+defer0
step gpt 12 $DP --cases gpt4x256 --gpus 1,2 --json $OUT/gpt.json --variants merge0+defer0,flat,defer2,flat,merge0+defer0
step goal 8 $DP --gpus 1,2 --json $OUT/data_parallel_2gpu.json
sed -n '/^case/,$p' $OUT/goal.txt
step test 14 bin/data_parallel_test --gtest_filter='*Deferred*cuda:*BucketBuffers*cuda:*OverlappedAndCaptured*cuda:*TwoRanksMatch*cuda'
grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]" $OUT/test.txt | head -8
step mlp_inline 5 ${DP/--overlap on/--overlap off} --cases mlp16x512 --gpus 1,2 --variants flat
echo "total t=$((SECONDS-T0))"
