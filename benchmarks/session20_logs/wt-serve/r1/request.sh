#!/usr/bin/env bash
# wt-serve r1 (issue 35), one lease (about 80 s):
#  latency: host and GPU time per call of mlp16x512 at 16 and 64 rows (eager, cudagraphs, bare replay)
#  inproc: the in-process server saturated at max batch 16 and 64 (session 19 offered 320k/s only)
#  json16: HTTP JSON at max batch 16, both backends, fast float path on (the new default);
#  json16_nofast: cudagraphs with GROVE_JSON_FLOAT_FAST_PATH=0 (the old reader)
#  ncu: the kernels of 64-row batches (cudagraphs, saturated)
#  deep64: mlp64x256 at max batch 64, both backends, binary (where eager's launches bound eager)
#  http64: mlp16x512 at max batch 64, both backends, json and binary
#  latency_smallm_on: latency again with GROVE_SMALL_M_GEMM=on (grove's small-M kernel at 16 and 64 rows)
# Binaries travel xz'd (gpu_bundle/r1). Logs: runs.txt (every step whole), k64.json.
set -u
mkdir -p bin && for b in serve serve_http backend_latency; do xz -T4 -dc gpu_bundle/r1/$b.xz > bin/$b; done && chmod +x bin/*
T0=$SECONDS
echo "host: $(nproc) cores; $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/DEVICE.txt 2>&1
step() {  # step NAME LIMIT_S CMD...: appends its output to runs.txt, prints its table rows
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  echo "== $name: $*" >> $OUT/runs.txt
  timeout $limit "$@" > /tmp/step.txt 2>&1; local rc=$?
  cat /tmp/step.txt >> $OUT/runs.txt
  echo "== $name rc=$rc $((SECONDS - start))s (at $((SECONDS - T0))s)"
  grep -E "^ +(16|64) +|answers identical|^mlp16x512" /tmp/step.txt | head -16
}
left() { [ $((SECONDS - T0)) -lt $1 ]; }  # left AT: true while fewer than AT seconds have passed
M="--device cuda --models benchmarks/models"
H="--rates 320000 --duration-ms 600 --held-rates none"
step latency 12 bin/backend_latency $M --mlp-batches 16,64 --iters 100 --warmup 10 --seq 8
step inproc 20 bin/serve $M --max-batches 16,64 --rates 320000,640000,1000000 --submitters 3 --duration-ms 400
step json16 14 bin/serve_http $M --max-batches 16 --encodings json $H
step json16_nofast 7 env GROVE_JSON_FLOAT_FAST_PATH=0 bin/serve_http $M --max-batches 16 --backends cudagraphs --encodings json $H
if command -v ncu > /dev/null && left 52; then
  start=$SECONDS
  timeout 20 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --log-file $OUT/k64.csv --launch-skip 20000 --launch-count 80 bin/serve $M --max-batches 64 \
    --backends cudagraphs --rates 640000 --submitters 3 --duration-ms 1500 > /tmp/ncu.txt 2>&1
  echo "== ncu rc=$? $((SECONDS - start))s (at $((SECONDS - T0))s)"; grep -E "^ +64 " /tmp/ncu.txt; tail -2 /tmp/ncu.txt
  python3 tools/kernel_profile.py --csv $OUT/k64.csv --name k64 --out $OUT --top 12 2>&1 | head -24
  gzip -f $OUT/k64.csv
fi
left 68 && step deep64 16 bin/serve_http --device cuda --models benchmarks/serve_http/models --model mlp64x256 --max-batches 64 --encodings binary $H
left 74 && step http64 14 bin/serve_http $M --max-batches 64 --encodings json,binary $H
left 78 && step latency_smallm_on 8 env GROVE_SMALL_M_GEMM=on bin/backend_latency $M --mlp-batches 16,64 --iters 100 --warmup 10 --seq 8
echo "total $((SECONDS - T0))s"
