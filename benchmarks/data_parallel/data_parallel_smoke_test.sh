#!/usr/bin/env bash
# Runs data_parallel on sim ranks with a tiny gpt4x256 (the larger of the two
# cases: next-token loss, layer norms, embeddings), two untimed steps and one
# timed step; checks a row per (backend, devices, overlap), that the graph
# backend captured the collectives, that overlap on ran overlapped, and a JSON
# result per row. Kept small for CI on 2 cores (mlp16x512 goes through the
# same code; tests/distributed covers overlap on both).
set -euo pipefail
binary="benchmarks/data_parallel/data_parallel"
json="${TEST_TMPDIR:-/tmp}/data_parallel.json"
output=$("$binary" --device sim --iters 1 --warmup 2 --gpt-batch 1 --seq 4 \
  --cases gpt4x256 --overlap on,off --json "$json")
echo "$output"
label="gpt4x256 b=1 T=4"
for backend in eager cudagraphs; do
  for devices in 1 2; do
    for overlap in on off; do
      grep -Eq "^$label +$backend +$devices .* $overlap +([0-9.]+x|-) " <<<"$output" ||
        { echo "missing row for $label / $backend / $devices / overlap $overlap" >&2; exit 1; }
    done
  done
done
captured=$(echo "$output" | grep -Ec " cudagraphs .* yes$")
[ "$captured" -eq 4 ] || { echo "expected 4 captured cudagraphs rows, found $captured" >&2; exit 1; }
if grep -Eq " on\* " <<<"$output"; then
  echo "a row asked for overlap but ran in line" >&2; exit 1
fi
count=$(grep -c '"backend":' "$json")
[ "$count" -eq 8 ] || { echo "expected 8 results in $json, found $count" >&2; exit 1; }
if "$binary" --gpus 0 >/dev/null 2>&1; then
  echo "--gpus 0 was accepted" >&2; exit 1
fi
if "$binary" --overlap sometimes >/dev/null 2>&1; then
  echo "--overlap sometimes was accepted" >&2; exit 1
fi
echo "ok"
