#!/bin/bash
# Runs tree_overhead on sim with few iterations and checks the JSON it writes.
set -euo pipefail
binary="benchmarks/tree_overhead/tree_overhead"
json="${TEST_TMPDIR:-/tmp}/tree_overhead.json"
"$binary" --device sim --iterations 50 --repeats 3 --json "$json"
grep -q '"rows"' "$json"
grep -q '"manager_us_median"' "$json"
grep -q '"inputs": 257' "$json"
