#!/usr/bin/env bash
# Issue 34's two data-parallel goals on 2 GPUs of one host, in one call of
# at most 150 s (each part under its own time limit, the C++ one first):
#   1. grove's native data parallel (benchmarks/data_parallel, C++): the
#      cudagraphs step of mlp16x512 b32 and gpt4x256 b8 per rank on 1 and 2
#      GPUs, all-reduces overlapped; weak-scaling efficiency = step(1)/step(2)
#      (goal >= 90%).
#   2. DDP through the door (benchmarks/ddp_door.py under torchrun, NCCL):
#      torch DDP eager (the losses' reference) and reduce-overhead against
#      backend="grove" on the DDP model, grove.torch.DistributedDataParallel
#      and grove's whole step, then grove_ddp_direct (grove's DDP with
#      GROVE_DOOR_GRADIENTS=direct; the second grove DDP of the process, which
#      hung before Note [Communicators captured by graphs are never
#      destroyed]; last, so that a hang costs only its row) (goal: the door
#      <= 0.5x torch DDP reduce-overhead).
#
#   DATA_PARALLEL=path/to/data_parallel OUT=results bash benchmarks/data_parallel/two_gpu_training.sh
#
# DATA_PARALLEL defaults to bazel-bin/benchmarks/data_parallel/data_parallel;
# GROVE_LIBRARY and PYTHONPATH (python/) must be set for part 2. DEVICE=sim
# runs part 1 on sim ranks and skips part 2 (what CI can run; no GPU).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"  # benchmarks/
out="${OUT:-.}"
device="${DEVICE:-cuda}"
binary="${DATA_PARALLEL:-bazel-bin/benchmarks/data_parallel/data_parallel}"
models="${MODELS:-$here/models}"
mkdir -p "$out"

echo "== 1. native data parallel ($device, 1 and 2 ranks, cudagraphs, overlap on)"
if [ "$device" = sim ]; then
  dp_flags=(--iters 1 --warmup 2 --gpt-batch 1 --seq 4 --mlp-batch 2 --cases gpt4x256)
else
  # As many steps as the A/B runs (data_parallel --variants): the medians of
  # 40 steps moved by ~5 us between sessions.
  dp_flags=(--iters 150 --warmup 10)
fi
timeout 35 "$binary" --device "$device" --gpus 1,2 --backends cudagraphs --overlap on \
  --models "$models" --json "$out/data_parallel_2gpu.json" "${dp_flags[@]}" \
  > "$out/data_parallel_2gpu.txt" 2>&1
echo "rc=$?"
cat "$out/data_parallel_2gpu.txt"

echo "== 2. DDP through the door (torchrun, 2 ranks, NCCL)"
if [ "$device" = sim ]; then
  echo "skipped: DEVICE=sim (ddp_door.py needs 2 CUDA devices)"
  exit 0
fi
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "$gpus" -lt 2 ]; then
  echo "skipped: $gpus CUDA device(s); ddp_door.py needs 2"
  exit 0
fi
# mlp16x512 only (the goal's case; each variant's compilation, ~25 s on an
# H100 in session 18, is most of the part's time), the goal's rows first and
# backend="grove" on torch's DDP last; no variant begins in the part's last
# 30 s, so the table prints within its limit even on a slower machine (a
# variant left out says so). Each row prints its seconds, compilation included.
left=$((150 - SECONDS - 5))
[ "$left" -gt 110 ] || left=110
timeout "$left" python3 -m torch.distributed.run --nproc_per_node 2 "$here/ddp_door.py" \
  --cases mlp16x512_b32 --iters 40 --deadline-s $((left - 30)) \
  --variants torch_eager,torch_reduce_overhead,grove_ddp,grove_step,grove,grove_ddp_direct \
  --json "$out/ddp_door_2gpu.json" > "$out/ddp_door_2gpu.txt" 2>&1
echo "rc=$?"
grep -v "Warning\|warnings.warn\|return func\|^W1\|\*\*\*\*\|OMP_NUM_THREADS\|record function" \
  "$out/ddp_door_2gpu.txt" | tail -40
