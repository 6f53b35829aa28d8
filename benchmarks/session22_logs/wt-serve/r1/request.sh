#!/usr/bin/env bash
# wt-serve r1 (issue 35): where the serving front's time goes at max batch 64 and what the
# existing knobs do, serve_http of wt-serve (xz'd in bin/), cudagraphs only, 700 ms runs.
#  prof64: json,binary,grpc at 480,000/s offered (saturated): the new per-thread-name CPU and
#    server-queue probe (Note [Where the front's time went]) -- the profile.
#  clients16: json,binary with 16 HTTP clients x 64 connections (1024 in flight, default 512):
#    is the front's limit its capacity or requests in flight x round trip?
#  threads16: --http-threads 16 (default 32 = the cores).
#  norelay: --no-answer-relay (the reaper posts answers to the loops itself).
#  relays4: GROVE_HTTP_ANSWER_RELAYS=4 (new: 4 relay threads, each for 8 loops; default 1).
#  spin30 / spin30_t16: GROVE_HTTP_LOOP_SPIN_US=30 (new: loops poll 30 us before sleeping), with
#    32 and 16 loops.
#  grpc_cq8 / grpc_cq16: gRPC ModelInfer on 8 / 16 completion queues (default 4).
#  prof16: the profile at max batch 16.
#  inproc: benchmarks/serve (in process) at max batch 16 and 64, the 0.8x baseline.
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
  grep -E "^ +(16|64) +cudagraphs +(json|binary|grpc) +[0-9]+ " $OUT/$name.txt | awk '{print "  "$1,$3,$4,"sent",$5,"ans",$6,"p99",$10,"front",$13,"cli",$15}'
  grep -E "^  (16|64) cudagraphs" $OUT/$name.txt | cut -c1-330
}
left() { [ $((SECONDS - T0)) -lt $1 ]; }
H="--device cuda --models benchmarks/models --backends cudagraphs --duration-ms 700 --held-rates none --rates 480000"
S=/tmp/wt-serve-bin/serve_http
step prof64 24 $S $H --max-batches 64 --encodings json,binary,grpc --json $OUT/prof64.json
left 60 && step relays4 8 env GROVE_HTTP_ANSWER_RELAYS=4 $S $H --max-batches 64 --encodings json,binary --json $OUT/relays4.json
left 62 && step spin30 8 env GROVE_HTTP_LOOP_SPIN_US=30 $S $H --max-batches 64 --encodings json,binary --json $OUT/spin30.json
left 64 && step threads16 8 $S $H --max-batches 64 --encodings json,binary --http-threads 16 --json $OUT/threads16.json
left 66 && step clients16 8 $S $H --max-batches 64 --encodings json,binary --clients 16 --json $OUT/clients16.json
left 68 && step norelay 8 $S $H --max-batches 64 --encodings json,binary --no-answer-relay --json $OUT/norelay.json
left 70 && step spin30_t16 8 env GROVE_HTTP_LOOP_SPIN_US=30 $S $H --max-batches 64 --encodings json,binary --http-threads 16 --json $OUT/spin30_t16.json
left 74 && step grpc_cq8 7 $S $H --max-batches 64 --encodings grpc --grpc-completion-queues 8 --json $OUT/grpc_cq8.json
left 76 && step prof16 9 $S $H --max-batches 16 --encodings json,binary,grpc --json $OUT/prof16.json
left 83 && step inproc 6 /tmp/wt-serve-bin/serve --device cuda --models benchmarks/models --backends cudagraphs --max-batches 16,64 --rates 1000000 --submitters 3 --duration-ms 400
echo "total $((SECONDS - T0))s"
