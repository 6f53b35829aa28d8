#!/usr/bin/env bash
# wt-serve r2 (last round): same-call A/Bs of this branch's changes, max batch 64, cudagraphs,
# each with the thread CPU sampler; then eager at max batch 64 (gRPC too if time is left) for the ratios.
#  http_epoll / http_ppoll: load clients waiting in epoll (new default) vs ppoll (old, env)
#  http_c8x64: 8 clients x 64 connections instead of 16 x 32 (epoll)
#  grpc_turns / grpc_pool: gRPC answers dealt to hand-off threads (new default) vs the thread pool (old, env);
#  grpc_turns_a8: 8 answer threads (r1: the pool with 8 answered 102,379/s against 97,946/s with 4)
set -u
B=./bazel-r2/serve_http
chmod +x "$B" 2>/dev/null
T0=$(date +%s)
echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
run() {  # name, args...
  local name=$1; shift
  timeout 50 "$B" --duration-ms 800 --held-rates none "$@" > /tmp/wt-serve-run.txt 2>&1 &
  local pid=$!
  python3 benchmarks/serve_http/thread_cpu_sampler.py $pid > /tmp/wt-serve-threads.txt 2>&1
  wait $pid; local rc=$?
  local title="== $name rc=$rc at $(( $(date +%s) - T0 ))s: $*"
  echo "$title"; echo "$title" >> "$OUT/runs.txt"; echo "$title" >> "$OUT/threads.txt"
  cat /tmp/wt-serve-run.txt >> "$OUT/runs.txt"
  cat /tmp/wt-serve-threads.txt >> "$OUT/threads.txt"
  grep -E "^ +(16|64) +(eager|cudagraphs) " /tmp/wt-serve-run.txt
  head -7 /tmp/wt-serve-threads.txt | tail -6
}
H="--max-batches 64 --backends cudagraphs --rates 320000 --encodings json,binary"
G="--max-batches 64 --backends cudagraphs --rates 256000 --encodings grpc"
run http_epoll $H
GROVE_LOAD_CLIENT_PPOLL=1 run http_ppoll $H
run http_c8x64 $H --clients 8 --connections 64
run grpc_turns $G
GROVE_GRPC_ANSWER_POOL=1 run grpc_pool $G
run http_epoll2 $H
GROVE_LOAD_CLIENT_PPOLL=1 run http_ppoll2 $H
run grpc_turns2 $G
GROVE_GRPC_ANSWER_POOL=1 run grpc_pool2 $G
run grpc_turns_a8 $G --grpc-answer-threads 8
if [ $(( $(date +%s) - T0 )) -lt 38 ]; then  # 8 calls in flight per gRPC client (512 in all)
  run grpc_turns_c8 $G --grpc-connections 8
fi
run eager64 --max-batches 64 --backends eager --rates 320000 --encodings json,binary
if [ $(( $(date +%s) - T0 )) -lt 44 ]; then
  run eager64_grpc --max-batches 64 --backends eager --rates 256000 --encodings grpc
fi
echo "total $(( $(date +%s) - T0 ))s"
