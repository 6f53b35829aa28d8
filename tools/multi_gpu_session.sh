#!/usr/bin/env bash
# The data-parallel tables on a machine of several GPUs, one command: on the
# GPU host (repository root as the working directory; the data_parallel and
# grove binaries and libgrove.so, built here and stripped, carried in
# GROVE_MULTI_BIN, default .gpu/bin, or packed as .gpu/bin.tar.xz, unpacked first),
# with $OUT a folder whose files come back:
#   1. data_parallel   benchmarks/data_parallel on 1, 2 and N GPUs (N = every
#                      GPU of the host), both models, eager and cudagraphs,
#                      overlap on and off -> data_parallel.{json,txt}
#   1b. buckets        data_parallel again on N GPUs for mlp16x512 with
#                      cudagraphs and overlap on at smaller all-reduce buckets
#                      (GROVE_MULTI_BUCKETS_KIB, default "1024 2048") ->
#                      buckets_<kib>.{json,txt}
#   2. ddp_door        torchrun --nproc_per_node N benchmarks/ddp_door.py (and
#                      2 when N > 2): DDP with torch eager, reduce-overhead
#                      and backend="grove", and grove.torch.DistributedDataParallel
#                      (grove_ddp) -> ddp_door_<n>.{json,txt}
#   2b. grove_ddp_test tests/python/grove_ddp_test.py on 2 GPUs (NCCL): grove's
#                      wrapper against torch DDP, losses and .grad
#                      -> grove_ddp_test.txt
#   2c. gpu_ddp_door_test tests/python/gpu_ddp_door_test.py's WorldOfTwo:
#                      torch.compile(DDP, backend=grove) and grove's wrapper
#                      against torch DDP, f32 and bf16 autocast
#                      -> gpu_ddp_door_test.txt
#   3. rank_formation  mlp16x512 training as N processes that meet over TCP
#                      (RANK, WORLD_SIZE, MASTER_ADDR) against the threaded
#                      `grove run --gpus N`: their losses must be bitwise equal
#                      -> rank_formation.txt (says "bitwise equal" or the first
#                      differing step)
# Each step has a time limit (GROVE_MULTI_STEP_LIMIT_S, default 200 s) and the
# session goes on after a failed step; session.txt lists each step's status.
# GROVE_MULTI_STEPS picks steps (default "data_parallel buckets ddp_door
# grove_ddp_test gpu_ddp_door_test rank_formation").
#
#   bash tools/multi_gpu_session.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
bin=${GROVE_MULTI_BIN:-.gpu/bin}
if [ ! -d "$bin" ] && [ -f .gpu/bin.tar.xz ]; then
  mkdir -p .gpu && tar -xJf .gpu/bin.tar.xz -C .gpu || exit 2
fi
limit=${GROVE_MULTI_STEP_LIMIT_S:-200}
OUT=${OUT:-$(mktemp -d)}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$gpus" -ge 2 ] || { echo "multi_gpu_session: needs 2 or more GPUs, found $gpus" >&2; exit 2; }
export GROVE_LIBRARY=${GROVE_LIBRARY:-$PWD/$bin/libgrove.so}
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
export PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
steps=${GROVE_MULTI_STEPS:-data_parallel buckets ddp_door grove_ddp_test gpu_ddp_door_test rank_formation}
wanted() { [[ " $steps " == *" $1 "* ]]; }
: >"$OUT/session.txt"

step() {
  local name=$1
  shift
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local status=$?
  echo "$name exit=$status seconds=$((SECONDS - start))" | tee -a "$OUT/session.txt"
}

counts=1,2
[ "$gpus" -gt 2 ] && counts="1,2,$gpus"
wanted data_parallel && step data_parallel "$bin/data_parallel" --device cuda --gpus "$counts" --iters 50 \
  --json "$OUT/data_parallel.json"

wanted buckets && for kib in ${GROVE_MULTI_BUCKETS_KIB:-1024 2048}; do
  step "buckets_$kib" "$bin/data_parallel" --device cuda --gpus "1,$gpus" --iters 50 \
    --cases mlp16x512 --backends cudagraphs --overlap on --bucket-kib "$kib" \
    --json "$OUT/buckets_$kib.json"
done

wanted ddp_door && for n in $(echo "$gpus 2" | tr ' ' '\n' | sort -un); do
  step "ddp_door_$n" torchrun --standalone --nproc_per_node "$n" benchmarks/ddp_door.py \
    --iters 100 --json "$OUT/ddp_door_$n.json"
done

wanted grove_ddp_test && step grove_ddp_test python3 tests/python/grove_ddp_test.py
wanted gpu_ddp_door_test && step gpu_ddp_door_test bash -c \
  "cd tests/python && python3 -m unittest -v gpu_ddp_door_test.WorldOfTwo"

rank_formation() {
  local model=benchmarks/models/mlp16x512.json
  "$bin/grove" run "$model" --train --device cuda --backend cudagraphs --gpus "$gpus" \
    --batch "$batch" --iters 20 --stats-json "$OUT/threads.json" || return 1
  local port=$((29500 + RANDOM % 1000)) pids=() rank
  for rank in $(seq 0 $((gpus - 1))); do
    RANK=$rank WORLD_SIZE=$gpus LOCAL_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$bin/grove" run "$model" --train --device cuda --backend cudagraphs --iters 20 \
      --batch "$batch" --stats-json "$OUT/processes_$rank.json" &
    pids+=($!)
  done
  local failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ "$failed" -eq 0 ] || return 1
  python3 - "$OUT/threads.json" "$OUT/processes_0.json" <<'PY'
import json, sys
threads, processes = (json.load(open(path))["losses"] for path in sys.argv[1:3])
print("threads:   %s" % threads[:5])
print("processes: %s" % processes[:5])
if threads == processes:
    print("rank formation: %d steps, losses bitwise equal" % len(threads))
else:
    first = next(i for i, (a, b) in enumerate(zip(threads, processes)) if a != b) \
        if len(threads) == len(processes) else -1
    print("rank formation: losses differ (first at step %d)" % first)
    sys.exit(1)
PY
}
batch=${GROVE_RANK_BATCH:-32}  # rows per rank of the rank-formation run
export bin gpus OUT batch
wanted rank_formation && step rank_formation bash -c "$(declare -f rank_formation); rank_formation"
tail -3 "$OUT/rank_formation.txt" 2>/dev/null
tail -4 "$OUT/grove_ddp_test.txt" 2>/dev/null
tail -4 "$OUT/gpu_ddp_door_test.txt" 2>/dev/null
cat "$OUT"/ddp_door_*.txt 2>/dev/null | grep -v Warning | tail -20
