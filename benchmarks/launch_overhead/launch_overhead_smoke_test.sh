#!/usr/bin/env bash
# Runs launch_overhead with a tiny repeat count and checks that it printed a row
# per size and wrote JSON with a result per size.
set -euo pipefail
binary="benchmarks/launch_overhead/launch_overhead"
json="${TEST_TMPDIR:-/tmp}/launch_overhead.json"
output=$("$binary" --repeats 3 --warmup 1 --json "$json")
echo "$output"
for n in 1 10 100 1000; do
  grep -Eq "^ *$n \|" <<<"$output" || { echo "missing row for N=$n" >&2; exit 1; }
done
count=$(grep -c '"n":' "$json")
[ "$count" -eq 4 ] || { echo "expected 4 results in $json, found $count" >&2; exit 1; }
