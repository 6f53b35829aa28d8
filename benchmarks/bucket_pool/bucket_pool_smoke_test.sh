#!/bin/bash
# Runs bucket_pool on sim with narrow rows and checks its JSON: one recording
# per bucket (checked by the benchmark) and a shared pool within the goal.
set -euo pipefail
binary="benchmarks/bucket_pool/bucket_pool"
json="${TEST_TMPDIR:-/tmp}/bucket_pool.json"
"$binary" --device sim --width 256 --kernels 4 --json "$json"
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["buckets"] == [1, 2, 4, 8, 16, 32, 64], report
alone = report["alone_reserved_bytes"]
assert len(alone) == 7 and report["sum_of_separate_bytes"] == sum(alone), report
assert report["shared_pool_bytes"] <= 1.25 * alone[-1], report
PY
if "$binary" --width 0 2>/dev/null; then echo "--width 0 was accepted" >&2; exit 1; fi
