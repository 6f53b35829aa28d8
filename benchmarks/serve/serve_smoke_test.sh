#!/usr/bin/env bash
# Runs serve on sim with a small max batch, two low rates and short runs;
# checks a row per (max batch, backend, rate), the comparison table, that the
# backends answered the same request with the same bits, and the JSON.
set -euo pipefail
binary="benchmarks/serve/serve"
json="${TEST_TMPDIR:-/tmp}/serve.json"
output=$("$binary" --device sim --rates 20,60 --max-batches 4 --rows 1-2 --duration-ms 300 \
  --max-wait-us 2000 --json "$json")
echo "$output"
for backend in eager cudagraphs; do
  for rate in 20 60; do
    grep -Eq "^ +4 +$backend +$rate " <<<"$output" ||
      { echo "missing row for $backend at $rate/s" >&2; exit 1; }
  done
done
grep -q "cudagraphs vs eager" <<<"$output" || { echo "missing comparison table" >&2; exit 1; }
grep -q "answers identical across backends: yes" <<<"$output" ||
  { echo "backends disagree" >&2; exit 1; }
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
runs = report["results"]
assert len(runs) == 4, f"expected 4 runs, found {len(runs)}"
for run in runs:
    assert run["answered"] + run["rejected"] + run["failed"] == run["sent"], run
    assert run["failed"] == 0, run
    assert run["answered_per_s"] > 0 and "latency" in run, run
    assert 1 <= run["mean_batch_rows"] <= 4, run
assert report["answers_identical_across_backends"] is True
graph_workers = [w for s in report["servers"] if s["backend"] == "cudagraphs" for w in s["workers"]]
assert graph_workers and graph_workers[0]["tree_at_exit"]["replays"] > 0, graph_workers
PY
# Bad flags fail with a usage message, not a crash.
if "$binary" --rows 0 >/dev/null 2>&1; then echo "--rows 0 was accepted" >&2; exit 1; fi
if "$binary" --rows 1-9 --max-batches 4 >/dev/null 2>&1; then
  echo "--rows beyond --max-batches was accepted" >&2; exit 1
fi
echo "ok"
