#!/usr/bin/env bash
# Runs eager_latency with two iterations and checks that it printed a row per
# case and wrote JSON with a result per case.
set -euo pipefail
binary="benchmarks/eager_latency/eager_latency"
json="${TEST_TMPDIR:-/tmp}/eager_latency.json"
output=$("$binary" --iters 2 --warmup 1 --json "$json")
echo "$output"
for label in "mlp16x512 b=1" "mlp16x512 b=256" "gpt4x256 b=1 T=32"; do
  grep -q "^$label " <<<"$output" || { echo "missing row for $label" >&2; exit 1; }
done
count=$(grep -c '"case":' "$json")
[ "$count" -eq 3 ] || { echo "expected 3 results in $json, found $count" >&2; exit 1; }
