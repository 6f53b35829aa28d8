#!/usr/bin/env bash
# wt-dp r1 (session 23; both GPUs of one host, <= 60 s): native data parallel, mlp16x512 b32 and
# gpt4x256 b8 T32, cudagraphs, overlap on, 4 MiB buckets, 150 timed steps after 10. Each process
# compares variants, EACH on 1 and then 2 GPUs back to back (efficiency against its own 1-GPU step;
# session 22's A/B used the grouped 1-GPU step for every variant, ~20 us slower than flat's):
# flat (default), none (no collective: the plain 1-GPU step), merge64 (a last bucket under 64 KiB
# joins the one before: Note [Small last bucket]), prio (communication stream at the device's
# greatest priority, graphs instantiated with node priorities: Note [Communication stream
# priority]), first1024, grouped. Then NCCL settings (process-wide env, so separate processes),
# and overlap off (the collectives' own time, in line).
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
  grep -E "^data_parallel: " $OUT/$name.txt | sed 's/^data_parallel: //; s/ cudagraphs / /; s/ (KiB.*//; s/ overlap / /; s/ us median, / /; s/ buckets//'
}
step mlp 18 $DP --cases mlp16x512 --gpus 1,2 --json $OUT/mlp.json --variants \
flat,none,merge64,prio,prio+merge64,first1024,first1024+prio,grouped,flat,prio+merge64,prio,merge64
step gpt 13 $DP --cases gpt4x256 --gpus 1,2 --json $OUT/gpt.json --variants flat,prio,none,flat,prio
step mlp_ll128 5 env NCCL_PROTO=LL128 $DP --cases mlp16x512 --gpus 1,2 --variants flat,prio+merge64
step mlp_ll 5 env NCCL_PROTO=LL $DP --cases mlp16x512 --gpus 1,2 --variants flat,prio+merge64
step mlp_cta8 5 env NCCL_MAX_CTAS=8 $DP --cases mlp16x512 --gpus 1,2 --variants flat,prio+merge64
step mlp_cta16 5 env NCCL_MIN_CTAS=16 NCCL_MAX_CTAS=16 $DP --cases mlp16x512 --gpus 1,2 --variants flat,prio+merge64
step mlp_inline 5 ${DP/--overlap on/--overlap off} --cases mlp16x512 --gpus 1,2 --variants flat,merge64
# DDP through the door (what torch DDP under backend="grove" spends vs grove's own DDP): whatever
# time is left; the table prints as variants finish (deadline), then torch.profiler of "grove".
l=$(left)
if [ $l -ge 12 ]; then
  export GROVE_LIBRARY=$PWD/libgrove.so PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python PYTHONUNBUFFERED=1
  export GROVE_CACHE_DIR=/tmp/grove_cache_wtdp_r1
  timeout -k 2 $l python3 -m torch.distributed.run --nproc_per_node 2 benchmarks/ddp_door.py \
    --cases mlp16x512_b32 --iters 40 --deadline-s $((l - 8)) \
    --variants grove,grove_bucketview,grove_ddp --torch-profile grove \
    --json $OUT/ddp_door.json > $OUT/ddp_door.txt 2>&1
  echo "== ddp_door rc=$? t=$((SECONDS-T0))"
  grep -E "^mlp16x512_b32 " $OUT/ddp_door.txt | head -8
fi
echo "total t=$((SECONDS-T0))"
