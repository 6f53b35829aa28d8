#!/usr/bin/env bash
# Runs bucket_plan on sim with a short trace and checks, from its JSON, that
# the planned buckets pad less than the powers of two, use no more buckets,
# end at the max batch, and hold no more graph pool memory.
set -euo pipefail
binary="benchmarks/bucket_plan/bucket_plan"
json="${TEST_TMPDIR:-/tmp}/bucket_plan.json"
"$binary" --device sim --max-batch 8 --mix 3:60,6:40 --batches 24 --json "$json"
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
pow2, planned = report["results"]
assert pow2["set"] == "powers of two" and planned["set"] == "planned", report
assert planned["buckets"] == [3, 6, 8], planned["buckets"]
assert planned["padded_rows"] < pow2["padded_rows"], (planned, pow2)
assert len(planned["buckets"]) <= len(pow2["buckets"])
assert planned["buckets"][-1] == pow2["buckets"][-1] == 8
assert planned["pool_reserved_bytes"] <= pow2["pool_reserved_bytes"], (planned, pow2)
assert planned["batches"] == pow2["batches"] == 24
PY
if "$binary" --mix 3 >/dev/null 2>&1; then echo "--mix 3 was accepted" >&2; exit 1; fi
echo "ok"
