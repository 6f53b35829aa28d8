#!/usr/bin/env bash
# wt-serve r2 (issue 35), <= 40 s, serve_http of wt-serve (xz'd in gpu_bundle/r2), checks the post-r1 changes:
#  grpc16_default: gRPC front, mb16 cudagraphs, 320,000/s offered: ModelInfer on completion queues,
#    now the default (an eighth of the cores: 4 here), against grpc16_callback
#    (GROVE_GRPC_COMPLETION_QUEUES=0, the callback API as before) and grpc16_cq2 (2 queues).
#  held_warm: json mb16 at 32,000/s, alone/held 3 times each, with the new unmeasured 200 ms
#    warm-up per server and encoding (r1: the first measured run of a process had p99 1.9-3.6 ms,
#    its whole tail in its first 7-10 ms).
#  grpc64_default / grpc64_callback: the same gRPC pair at max batch 64.
#  inproc: the in-process server (benchmarks/serve), cudagraphs, 3 submitters, max batch 16 and 64,
#    the baseline of "gRPC / in process" in this lease.
set -u
mkdir -p bin && for b in serve_http serve; do xz -T4 -dc gpu_bundle/r2/$b.xz > bin/$b; done && chmod +x bin/*
T0=$SECONDS
echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/DEVICE.txt 2>&1
ulimit -n 65536 2>/dev/null
step() {  # step NAME LIMIT_S CMD...: appends its output to runs.txt, prints its summary rows
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "== $name: $*" >> $OUT/runs.txt
  timeout $limit "$@" > /tmp/step.txt 2>&1; local rc=$?
  cat /tmp/step.txt >> $OUT/runs.txt
  echo "== $name rc=$rc $((SECONDS - start))s (at $((SECONDS - T0))s)"
  grep -E "^ +(16|64) +cudagraphs +(640000|1000000) |^ +(16|64) +cudagraphs +json +[0-9]+ +[0-9]+ +[0-9]+ +[0-9.]+x|^  16 cudagraphs|^ +(16|64) +cudagraphs +grpc +320000|rror" /tmp/step.txt | cut -c1-200 | head -12
}
left() { [ $((SECONDS - T0)) -lt $1 ]; }
H="--device cuda --models benchmarks/models --backends cudagraphs --duration-ms 700"
G="$H --encodings grpc --rates 320000 --held-rates none --warmup-ms 0"
step grpc16_default 8 bin/serve_http $G --max-batches 16
left 32 && step grpc16_callback 8 env GROVE_GRPC_COMPLETION_QUEUES=0 bin/serve_http $G --max-batches 16
left 30 && step inproc 7 bin/serve --device cuda --models benchmarks/models --backends cudagraphs --max-batches 16,64 --rates 640000,1000000 --submitters 3 --duration-ms 400
left 28 && step held_warm 12 bin/serve_http $H --max-batches 16 --encodings json --rates 32000 --held-rates 32000 --held-repeats 3 --json $OUT/held_warm.json
left 34 && step grpc16_cq2 6 bin/serve_http $G --max-batches 16 --grpc-completion-queues 2
left 34 && step grpc64_default 6 bin/serve_http $G --max-batches 64
left 34 && step grpc64_callback 6 env GROVE_GRPC_COMPLETION_QUEUES=0 bin/serve_http $G --max-batches 64
echo "total $((SECONDS - T0))s"
