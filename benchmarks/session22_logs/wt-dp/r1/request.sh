#!/usr/bin/env bash
# wt-dp r1 (2 GPUs of one host, <= 60 s): where native data parallel's extra step time goes
# (mlp16x512 b32, cudagraphs, overlap on) and the A/B of this branch's two changes, each in one
# process: grouped (one buffer per gradient, the old path) vs flat (bucket buffers back to back,
# one all-reduce per bucket), the last-bucket split (tailN KiB), per-bucket cost (onlyB: only
# bucket B reduced), in line (overlap off) grouped vs flat (the comm time itself); then the cuda
# instances of data_parallel_test (flat vs grouped bitwise on NCCL).
set -u
T0=$SECONDS; left() { echo $(( 57 - (SECONDS - T0) )); }
export LD_LIBRARY_PATH=$PWD/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2; then
  for d in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib /usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib; do
    [ -f $d/libnccl.so.2 ] && export GROVE_NCCL_DIR=$d && break
  done
fi
echo "GROVE_NCCL_DIR=${GROVE_NCCL_DIR:-ld.so}"; nvidia-smi -L | head -2
DP="bin/data_parallel --device cuda --backends cudagraphs --cases mlp16x512 --iters 40 --warmup 5 --models benchmarks/models"
step() { # name limit args...
  local name=$1 limit=$2; shift 2
  local l=$(left); [ $l -lt $limit ] && limit=$l; [ $limit -le 2 ] && { echo "$name: no time left"; return; }
  timeout -k 2 $limit "$@" > $OUT/$name.txt 2>&1; echo "== $name rc=$? t=$((SECONDS-T0))"
  grep -E "^data_parallel: " $OUT/$name.txt | sed 's/^data_parallel: //; s/ cudagraphs / /'
}
step ab 24 $DP --gpus 1,2 --overlap on --json $OUT/ab.json \
  --variants grouped,flat,grouped+tail1024,flat+tail1024,flat+tail2048,flat+kib8192+tail1024,grouped
step buckets 14 $DP --gpus 2 --overlap on --variants grouped+only0,grouped+only1,grouped+only2,grouped+only3,grouped+only4,flat+only3
step inline 8 $DP --gpus 2 --overlap off --variants grouped,flat
step test 10 bin/data_parallel_test --gtest_filter='*BucketBuffers*cuda:*OverlappedAndCaptured*cuda:*TwoRanksMatch*cuda'
grep -E "OK|FAILED|SKIPPED" $OUT/test.txt | head -8
step gpt 14 ${DP/mlp16x512/gpt4x256} --gpus 1,2 --overlap on --variants grouped,flat,flat+tail1024
echo "total t=$((SECONDS-T0))"
