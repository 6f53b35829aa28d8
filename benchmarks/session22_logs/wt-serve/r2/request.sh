#!/usr/bin/env bash
# wt-serve r2 (issue 35): A/B in one request of what r1 pointed at, serve_http of wt-serve
# (xz'd in bin/), cudagraphs only, 700 ms runs, max batch 64 at 640,000/s offered (saturated).
#  fut_new_a/b vs fut_old_a/b: HTTP answers handed over without a future (new default, Note
#    [Answers without a future]) against GROVE_HTTP_ANSWER_FUTURES=1 (through a promise/future
#    as before), json+binary, alternated twice.
#  grpc64_cq4/8/16, grpc16_cq4/8: gRPC ModelInfer on 4 (the default here: an eighth of 32
#    cores), 8, 16 completion queues (r1: 8 queues +26% at max batch 64).
#  held16_binary: the held-connections goal's one miss in session 21 (binary, max batch 16,
#    32,000/s, 10,000 idle + 500 slowloris, 3 repeats each), with the tail diagnostics.
#  t24: --http-threads 24 (default 32; r1: 16 lost 12% JSON).
#  inproc: benchmarks/serve in process, the 0.8x baseline.
set -u
mkdir -p /tmp/wt-serve-bin && for b in serve_http serve; do xz -T4 -dc bin/$b.xz > /tmp/wt-serve-bin/$b; done && chmod +x /tmp/wt-serve-bin/*
T0=$SECONDS
echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/DEVICE.txt 2>&1
ulimit -n 65536 2>/dev/null
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "== $name: $*" >> $OUT/runs.txt
  timeout $limit "$@" > $OUT/$name.txt 2>&1; local rc=$?
  cat $OUT/$name.txt >> $OUT/runs.txt
  echo "== $name rc=$rc $((SECONDS - start))s (at $((SECONDS - T0))s)"
  grep -E "^ +(16|64) +cudagraphs +(json|binary|grpc) +[0-9]+ " $OUT/$name.txt | awk '{print "  "$1,$3,$4,"answered",$7}'
}
left() { [ $((SECONDS - T0)) -lt $1 ]; }
S=/tmp/wt-serve-bin/serve_http
H="--device cuda --models benchmarks/models --backends cudagraphs --duration-ms 700 --held-rates none --rates 640000"
step fut_new_a 22 $S $H --max-batches 64 --encodings json,binary --json $OUT/fut_new_a.json
left 60 && step fut_old_a 8 env GROVE_HTTP_ANSWER_FUTURES=1 $S $H --max-batches 64 --encodings json,binary --json $OUT/fut_old_a.json
left 60 && step fut_new_b 8 $S $H --max-batches 64 --encodings json,binary --json $OUT/fut_new_b.json
left 60 && step fut_old_b 8 env GROVE_HTTP_ANSWER_FUTURES=1 $S $H --max-batches 64 --encodings json,binary --json $OUT/fut_old_b.json
left 64 && step grpc64_cq4 6 $S $H --max-batches 64 --encodings grpc --grpc-completion-queues 4 --json $OUT/grpc64_cq4.json
left 64 && step grpc64_cq8 6 $S $H --max-batches 64 --encodings grpc --grpc-completion-queues 8 --json $OUT/grpc64_cq8.json
left 66 && step grpc64_cq16 6 $S $H --max-batches 64 --encodings grpc --grpc-completion-queues 16 --json $OUT/grpc64_cq16.json
left 56 && step held16_binary 20 $S --device cuda --models benchmarks/models --backends cudagraphs --duration-ms 700 --max-batches 16 --encodings binary --rates 32000 --held-rates 32000 --held-repeats 3 --json $OUT/held16_binary.json
left 70 && step t24 8 $S $H --max-batches 64 --encodings json,binary --http-threads 24 --json $OUT/t24.json
left 72 && step grpc16_cq4 6 $S $H --max-batches 16 --encodings grpc --grpc-completion-queues 4 --json $OUT/grpc16_cq4.json
left 72 && step grpc16_cq8 6 $S $H --max-batches 16 --encodings grpc --grpc-completion-queues 8 --json $OUT/grpc16_cq8.json
left 74 && step inproc 5 /tmp/wt-serve-bin/serve --device cuda --models benchmarks/models --backends cudagraphs --max-batches 64 --rates 1000000 --submitters 3 --duration-ms 400
echo "total $((SECONDS - T0))s"
