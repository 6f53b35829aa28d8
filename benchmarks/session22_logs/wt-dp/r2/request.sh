#!/usr/bin/env bash
# wt-dp r2 (2 GPUs of one host, <= 60 s): native data parallel, the A/B that picks the defaults,
# each process comparing variants in one run (baseline repeated first and last): mlp16x512 b32
# and gpt4x256 b8 T32, cudagraphs, overlap on, 4 MiB buckets. grouped = the old path (one buffer
# per gradient); flat = bucket buffers back to back (this branch's default); firstN = first bucket
# closes at N KiB; tailN = last N KiB their own bucket; kibN = bucket size. Then the same under
# NCCL_PROTO=LL and NCCL_MIN_CTAS=32 (process-wide NCCL settings, so separate processes).
set -u
T0=$SECONDS; left() { echo $(( 57 - (SECONDS - T0) )); }
export LD_LIBRARY_PATH=$PWD/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi -L | head -2
DP="bin/data_parallel --device cuda --backends cudagraphs --overlap on --iters 150 --warmup 10 --models benchmarks/models"
step() { # name limit args...
  local name=$1 limit=$2; shift 2
  local l=$(left); [ $l -lt $limit ] && limit=$l; [ $limit -le 2 ] && { echo "$name: no time left"; return; }
  timeout -k 2 $limit "$@" > $OUT/$name.txt 2>&1; echo "== $name rc=$? t=$((SECONDS-T0))"
  grep -E "^data_parallel: " $OUT/$name.txt | sed 's/^data_parallel: //; s/ cudagraphs / /; s/ (KiB.*//; s/ overlap / /'
}
step mlp 19 $DP --cases mlp16x512 --gpus 1,2 --json $OUT/mlp.json --variants \
grouped,flat,first1024,first2048,first512,first1024+kib8192,first2048+kib8192,first1024+tail1024,kib8192,kib2048,first1024+kib2048,kib16384,kib25600,first1024+kib25600,grouped+first1024,first1024,flat,grouped
step gpt 14 $DP --cases gpt4x256 --gpus 1,2 --json $OUT/gpt.json --variants \
grouped,flat,first1024,tail1024,first1024+tail1024,kib8192,first1024+kib8192,first2048,flat,grouped
step mlp_ll 7 env NCCL_PROTO=LL $DP --cases mlp16x512 --gpus 2 --variants grouped,flat,first1024,first1024+kib8192,flat
step mlp_ctas 7 env NCCL_MIN_CTAS=32 $DP --cases mlp16x512 --gpus 2 --variants grouped,flat,first1024,first1024+kib8192,flat
step gpt_ll 7 env NCCL_PROTO=LL $DP --cases gpt4x256 --gpus 2 --variants flat,first1024,flat
echo "total t=$((SECONDS-T0))"
