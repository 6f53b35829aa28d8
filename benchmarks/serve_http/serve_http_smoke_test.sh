#!/usr/bin/env bash
# Runs serve_http on sim with a small max batch, one low rate and short runs;
# checks a row per backend, no errors, the comparison table and the JSON.
set -euo pipefail
binary="benchmarks/serve_http/serve_http"
json="${TEST_TMPDIR:-/tmp}/serve_http.json"
output=$("$binary" --device sim --rates 40 --max-batches 4 --clients 4 --duration-ms 500 \
  --max-wait-us 2000 --json "$json")
echo "$output"
for backend in eager cudagraphs; do
  grep -Eq "^ +4 +$backend +40 " <<<"$output" || { echo "missing row for $backend" >&2; exit 1; }
done
grep -q "best answered/s, cudagraphs over eager" <<<"$output" ||
  { echo "missing comparison table" >&2; exit 1; }
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
runs = report["results"]
assert len(runs) == 2, f"expected 2 runs, found {len(runs)}"
for run in runs:
    assert run["errors"] == 0, run
    assert run["answered"] + run["rejected"] == run["sent"], run
    assert run["answered"] > 0 and "latency" in run, run
graphs = [s for s in report["servers"] if s["backend"] == "cudagraphs"][0]
assert graphs["backend_snapshots"][0]["tree"]["replays"] > 0, graphs
PY
if "$binary" --clients 0 >/dev/null 2>&1; then echo "--clients 0 was accepted" >&2; exit 1; fi
echo "ok"
