#!/usr/bin/env bash
# wt-serve r2 (session 23, issue 35): A/B in one request, serve_http of wt-serve (xz'd in bin/),
# cudagraphs only, 700 ms runs, max batch 64 at 640,000/s offered (saturated). r1 showed 15%
# between two runs of the same binary, so each pair is alternated three times.
#  new_a/b/c vs old_a/b/c: json,binary with the new defaults against GROVE_SERVING_CONTENDED=1
#    (as before: submissions counted under the stats lock, batches taken a request at a time
#    with regrowth, histograms/counters on shared atomics, a promise made for every request;
#    Notes [Counters per thread], [A batch taken in one move], [No promise without a future]).
#  grpc_new_a/b vs grpc_old_a/b: gRPC with the new defaults against GROVE_GRPC_ANSWER_FUTURES=1
#    GROVE_SERVING_CONTENDED=1 (r1: 162,984 / 145,611 new vs 120,450 futures), 64 clients x 8 calls
#    (serve_http's new default); grpc_c4: new code with 4 calls per client (the old default).
#  jemalloc: json,binary with LD_PRELOAD of Debian's libjemalloc2 (r1: binary 527,601 vs 492,492 /
#    423,297 with glibc), to see what is left to the allocator.
#  inproc_new / inproc_old: benchmarks/serve in process (the 0.8x baseline), both ways.
#  mb16: json,binary,grpc at max batch 16, 480,000/s (the met goals), if time is left.
set -u
mkdir -p /tmp/wt-serve-bin && for b in serve_http serve; do xz -T4 -dc bin/$b.xz > /tmp/wt-serve-bin/$b; done && chmod +x /tmp/wt-serve-bin/*
T0=$SECONDS
echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
nvidia-smi -L > $OUT/DEVICE.txt 2>&1; nvidia-smi --query-gpu=name,driver_version --format=csv >> $OUT/DEVICE.txt 2>&1
ulimit -n 65536 2>/dev/null
JE=$PWD/lib/libjemalloc.so.2
step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "== $name: $*" >> $OUT/runs.txt
  timeout $limit "$@" > $OUT/$name.txt 2>&1; local rc=$?
  cat $OUT/$name.txt >> $OUT/runs.txt
  echo "== $name rc=$rc $((SECONDS - start))s (at $((SECONDS - T0))s)"
  grep -E "^ +(16|64) +cudagraphs +(json|binary|grpc) +[0-9]+ " $OUT/$name.txt | awk '{print "  "$1,$3,"ans",$6,"front",$13}'
  grep -E "^ +64 +cudagraphs +1000000" $OUT/$name.txt | awk '{print "  inproc ans",$5}'
}
left() { [ $((SECONDS - T0)) -lt $1 ]; }
S=/tmp/wt-serve-bin/serve_http
H="--device cuda --models models --backends cudagraphs --duration-ms 700 --held-rates none --max-batches 64 --rates 640000"
OLD="env GROVE_SERVING_CONTENDED=1"
GOLD="env GROVE_GRPC_ANSWER_FUTURES=1 GROVE_SERVING_CONTENDED=1"
I="/tmp/wt-serve-bin/serve --device cuda --models models --backends cudagraphs --max-batches 64 --rates 1000000 --submitters 3 --duration-ms 400"
step new_a 16 $S $H --encodings json,binary --json $OUT/new_a.json
left 60 && step old_a 9 $OLD $S $H --encodings json,binary --json $OUT/old_a.json
left 60 && step grpc_new_a 8 $S $H --encodings grpc --json $OUT/grpc_new_a.json
left 60 && step grpc_old_a 8 $GOLD $S $H --encodings grpc --json $OUT/grpc_old_a.json
left 62 && step inproc_new 5 $I
left 62 && step new_b 9 $S $H --encodings json,binary --json $OUT/new_b.json
left 62 && step old_b 9 $OLD $S $H --encodings json,binary --json $OUT/old_b.json
left 68 && step grpc_new_b 8 $S $H --encodings grpc --json $OUT/grpc_new_b.json
left 68 && step grpc_old_b 8 $GOLD $S $H --encodings grpc --json $OUT/grpc_old_b.json
left 70 && step new_c 9 $S $H --encodings json,binary --json $OUT/new_c.json
left 70 && step old_c 9 $OLD $S $H --encodings json,binary --json $OUT/old_c.json
left 76 && step grpc_c4 8 $S $H --encodings grpc --grpc-connections 4 --json $OUT/grpc_c4.json
left 80 && step inproc_old 5 $OLD $I
left 78 && step jemalloc 8 env LD_PRELOAD=$JE $S $H --encodings json,binary --json $OUT/jemalloc.json
left 76 && step mb16 12 $S --device cuda --models models --backends cudagraphs --duration-ms 700 --held-rates none --max-batches 16 --rates 480000 --encodings json,binary,grpc --json $OUT/mb16.json
echo "total $((SECONDS - T0))s"
