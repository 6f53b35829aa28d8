#!/usr/bin/env bash
# wt-serve r1: where the JSON front's CPU goes (per thread user/sys, context
# switches, perf if present), this lease's baseline, and client shape trials.
set -u
B=./bazel-out/k8-opt/bin/benchmarks/serve_http/serve_http
chmod +x "$B" 2>/dev/null
T0=$(date +%s)
echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
run() {  # name, args...
  local name=$1; shift
  timeout 60 "$B" --duration-ms 800 --held-rates none "$@" > "$OUT/$name.txt" 2>&1 &
  local pid=$!
  python3 benchmarks/serve_http/thread_cpu_sampler.py $pid > "$OUT/$name.threads" 2>&1
  wait $pid; local rc=$?
  echo "== $name rc=$rc at $(( $(date +%s) - T0 ))s: $*"
  grep -E "^ +(16|64) +(eager|cudagraphs) " "$OUT/$name.txt"
  cat "$OUT/$name.threads"
}
# 1. baseline of this lease: JSON and binary, both backends, both max batches
run base --max-batches 16,64 --encodings json,binary --rates 320000
# 2. JSON, cudagraphs mb64: client shapes (are the clients the limit?)
run c8x64 --max-batches 64 --backends cudagraphs --encodings json --rates 320000 --clients 8 --connections 64
run c8x64_t8 --max-batches 64 --backends cudagraphs --encodings json --rates 320000 --clients 8 --connections 64 --http-threads 8
# 3. gRPC, both backends, mb64; then the answer threads (default: cores/4 = 4)
run grpc --max-batches 64 --encodings grpc --rates 256000
run grpc_a8 --max-batches 64 --backends cudagraphs --encodings grpc --rates 256000 --grpc-answer-threads 8
# 4. perf, if this host has it: JSON cudagraphs mb64
if command -v perf >/dev/null 2>&1; then
  timeout 40 perf record -F 999 -g -o "$OUT/perf.data" -- "$B" --duration-ms 800 --held-rates none \
    --max-batches 64 --backends cudagraphs --encodings json --rates 320000 > /dev/null 2>&1
  perf report -i "$OUT/perf.data" --no-children --sort comm,dso,sym --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' | head -70 > "$OUT/perf_top.txt"
  rm -f "$OUT/perf.data"
  echo "== perf"; head -40 "$OUT/perf_top.txt"
else
  echo "== no perf on this host"
fi
echo "total $(( $(date +%s) - T0 ))s"
