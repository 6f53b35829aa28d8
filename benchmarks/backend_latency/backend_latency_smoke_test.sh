#!/usr/bin/env bash
# Runs backend_latency on sim with tiny models and two timed calls; checks a
# row per (case, backend), that cudagraphs either matched eager bit for bit
# (then a bare-replay row follows) or is reported as not registered, and a
# JSON result per row.
set -euo pipefail
binary="benchmarks/backend_latency/backend_latency"
json="${TEST_TMPDIR:-/tmp}/backend_latency.json"
output=$("$binary" --device sim --iters 2 --warmup 3 --mlp-batches 2 --gpt-batch 1 --seq 4 \
  --json "$json")
echo "$output"
for label in "mlp16x512 b=2" "gpt4x256 b=1 T=4"; do
  for backend in eager cudagraphs; do
    grep -Eq "^$label +$backend " <<<"$output" ||
      { echo "missing row for $label / $backend" >&2; exit 1; }
  done
done
if grep -q "cudagraphs backend not registered" <<<"$output"; then
  echo "cudagraphs not registered in this build: only eager was measured"
else
  rows=$(grep -Ec "^[a-z0-9]+ b=.* cudagraphs .* yes " <<<"$output")
  [ "$rows" -eq 2 ] || { echo "expected 2 cudagraphs rows identical to eager, found $rows" >&2; exit 1; }
  bare=$(grep -Ec "^[a-z0-9]+ b=.* bare replay " <<<"$output")
  body=$(grep -Ec "^[a-z0-9]+ b=.* bare replay, body only " <<<"$output")
  [ "$bare" -eq 2 ] || { echo "expected 2 bare replay rows, found $bare" >&2; exit 1; }
  [ "$body" -eq 2 ] || { echo "expected 2 bare replay, body only rows, found $body" >&2; exit 1; }
  count=$(grep -c '"backend":' "$json")
  [ "$count" -eq 8 ] || { echo "expected 8 results in $json, found $count" >&2; exit 1; }
  grep -q '"gpu": {' "$json" || { echo "rows lack their GPU time" >&2; exit 1; }
  grep -q '"graphs_per_call": 1' "$json" || { echo "bare replay rows lack graphs_per_call" >&2; exit 1; }
  # The node count RESULTS.md's node floor multiplies: on the cudagraphs and both bare rows.
  nodes=$(grep -Ec '"graph_nodes_per_call": [1-9][0-9]*,?$' "$json")
  [ "$nodes" -eq 6 ] || { echo "expected 6 rows with graph_nodes_per_call, found $nodes" >&2; exit 1; }
fi
# Bad flags fail with a usage message, not a crash.
if "$binary" --iters zero >/dev/null 2>&1; then echo "--iters zero was accepted" >&2; exit 1; fi
echo "ok"
