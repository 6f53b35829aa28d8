#!/usr/bin/env bash
# Runs train_step on sim with small batches and two timed steps; checks a row
# per (case, backend), that the loss fell under eager, that cudagraphs either
# matched eager's losses bit for bit or is reported as not registered, and a
# JSON result per row.
set -euo pipefail
binary="benchmarks/train_step/train_step"
json="${TEST_TMPDIR:-/tmp}/train_step.json"
output=$("$binary" --device sim --iters 2 --warmup 4 --mlp-batch 4 --gpt-batch 1 --seq 8 \
  --json "$json")
echo "$output"
for label in "mlp16x512 b=4" "gpt4x256 b=1 T=8"; do
  for backend in eager cudagraphs; do
    grep -Eq "^$label +$backend " <<<"$output" ||
      { echo "missing row for $label / $backend" >&2; exit 1; }
  done
  # Columns after the label: backend, median, p90, spread, speedup, first loss, last loss.
  echo "$output" | grep -E "^$label +eager " |
    sed -E "s/^$label +//" | awk '{ if (!($7 < $6)) { print "loss did not fall: " $0; exit 1 } }' >&2
done
if grep -q "cudagraphs backend not registered" <<<"$output"; then
  echo "cudagraphs not registered in this build: only eager was measured"
else
  rows=$(echo "$output" | grep -Ec "^[a-z0-9]+ b=.* cudagraphs .* yes ")
  [ "$rows" -eq 2 ] || { echo "expected 2 cudagraphs rows matching eager, found $rows" >&2; exit 1; }
  # The node count RESULTS.md's node floor multiplies, on each cudagraphs row.
  nodes=$(grep -Ec '"graph_nodes_per_step": [1-9][0-9]*,?$' "$json")
  [ "$nodes" -eq 2 ] || { echo "expected 2 rows with graph_nodes_per_step, found $nodes" >&2; exit 1; }
fi
count=$(grep -c '"backend":' "$json")
[ "$count" -eq 4 ] || { echo "expected 4 results in $json, found $count" >&2; exit 1; }
if "$binary" --backends eager,nonesuch >/dev/null 2>&1; then
  echo "an unknown backend was accepted" >&2; exit 1
fi
echo "ok"
