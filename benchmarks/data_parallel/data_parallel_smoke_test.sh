#!/usr/bin/env bash
# Runs data_parallel on sim ranks with tiny batches and two timed steps; checks
# a row per (case, backend, devices), that the graph backend captured the
# collectives, and a JSON result per row.
set -euo pipefail
binary="benchmarks/data_parallel/data_parallel"
json="${TEST_TMPDIR:-/tmp}/data_parallel.json"
output=$("$binary" --device sim --iters 2 --warmup 3 --mlp-batch 2 --gpt-batch 1 --seq 4 \
  --json "$json")
echo "$output"
for label in "mlp16x512 b=2" "gpt4x256 b=1 T=4"; do
  for backend in eager cudagraphs; do
    for devices in 1 2; do
      echo "$output" | grep -Eq "^$label +$backend +$devices " ||
        { echo "missing row for $label / $backend / $devices" >&2; exit 1; }
    done
  done
done
captured=$(echo "$output" | grep -Ec " cudagraphs .* yes$")
[ "$captured" -eq 4 ] || { echo "expected 4 captured cudagraphs rows, found $captured" >&2; exit 1; }
count=$(grep -c '"backend":' "$json")
[ "$count" -eq 8 ] || { echo "expected 8 results in $json, found $count" >&2; exit 1; }
if "$binary" --gpus 0 >/dev/null 2>&1; then
  echo "--gpus 0 was accepted" >&2; exit 1
fi
echo "ok"
