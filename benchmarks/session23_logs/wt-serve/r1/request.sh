#!/usr/bin/env bash
# wt-serve r1 (session 23, issue 35): serve_http of wt-serve (xz'd in bin/), cudagraphs only,
# 700 ms runs, max batch 64 at 640,000/s offered (saturated) unless said.
#  base_a/base_b: json,binary, defaults (24 loops): the 0.8x rows at a rate that saturates binary
#    (the final lease of session 22 offered 480,000/s and binary answered all of it).
#  jemalloc / mimalloc: the same with LD_PRELOAD of Debian's libjemalloc2 5.3 / libmimalloc 2.0.9
#    (lib/): is glibc malloc (answers allocated on the worker, freed on 24 loops) a limit?
#  grpc_new_a/b vs grpc_old_a/b: gRPC ModelInfer answered without a future (new, Note [gRPC
#    answers without a future]) against GROVE_GRPC_ANSWER_FUTURES=1 (through a future), alternated.
#  grpc_inflight8: gRPC with 64 clients x 8 calls (default 4): latency- or capacity-bound?
#  grpc_jemalloc: gRPC with jemalloc.
#  bin800: binary at 800,000/s offered.
#  inproc: benchmarks/serve in process, the 0.8x baseline.
set -u
mkdir -p /tmp/wt-serve-bin && for b in serve_http serve; do xz -T4 -dc bin/$b.xz > /tmp/wt-serve-bin/$b; done && chmod +x /tmp/wt-serve-bin/*
T0=$SECONDS
echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
nvidia-smi -L > $OUT/DEVICE.txt 2>&1; nvidia-smi --query-gpu=name,driver_version --format=csv >> $OUT/DEVICE.txt 2>&1
ulimit -n 65536 2>/dev/null
JE=$PWD/lib/libjemalloc.so.2; MI=$PWD/lib/libmimalloc.so.2.0
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "== $name: $*" >> $OUT/runs.txt
  timeout $limit "$@" > $OUT/$name.txt 2>&1; local rc=$?
  cat $OUT/$name.txt >> $OUT/runs.txt
  echo "== $name rc=$rc $((SECONDS - start))s (at $((SECONDS - T0))s)"
  grep -E "^ +(16|64) +cudagraphs +(json|binary|grpc) +[0-9]+ " $OUT/$name.txt | awk '{print "  "$3,"ans",$6,"p99",$10,"sat",$12,"front",$13}'
}
left() { [ $((SECONDS - T0)) -lt $1 ]; }
S=/tmp/wt-serve-bin/serve_http
H="--device cuda --models models --backends cudagraphs --duration-ms 700 --held-rates none --max-batches 64"
step base_a 22 $S $H --rates 640000 --encodings json,binary --json $OUT/base_a.json
left 60 && step grpc_new_a 7 $S $H --rates 640000 --encodings grpc --json $OUT/grpc_new_a.json
left 60 && step grpc_old_a 7 env GROVE_GRPC_ANSWER_FUTURES=1 $S $H --rates 640000 --encodings grpc --json $OUT/grpc_old_a.json
left 60 && step jemalloc 9 env LD_PRELOAD=$JE $S $H --rates 640000 --encodings json,binary --json $OUT/jemalloc.json
left 60 && step mimalloc 9 env LD_PRELOAD=$MI $S $H --rates 640000 --encodings json,binary --json $OUT/mimalloc.json
left 66 && step grpc_new_b 7 $S $H --rates 640000 --encodings grpc --json $OUT/grpc_new_b.json
left 66 && step grpc_old_b 7 env GROVE_GRPC_ANSWER_FUTURES=1 $S $H --rates 640000 --encodings grpc --json $OUT/grpc_old_b.json
left 70 && step base_b 9 $S $H --rates 640000 --encodings json,binary --json $OUT/base_b.json
left 74 && step grpc_jemalloc 7 env LD_PRELOAD=$JE $S $H --rates 640000 --encodings grpc --json $OUT/grpc_jemalloc.json
left 78 && step grpc_inflight8 7 $S $H --rates 640000 --encodings grpc --grpc-connections 8 --json $OUT/grpc_inflight8.json
left 80 && step bin800 6 $S $H --rates 800000 --encodings binary --json $OUT/bin800.json
left 84 && step inproc 5 /tmp/wt-serve-bin/serve --device cuda --models models --backends cudagraphs --max-batches 64 --rates 1000000 --submitters 3 --duration-ms 400
echo "total $((SECONDS - T0))s"
