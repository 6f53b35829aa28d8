#!/bin/bash
# Runs tree_overhead on sim with few iterations and checks the JSON it writes:
# the three binding modes, all three input counts, and the input copies per call
# that each mode implies (zero-copy: none for an unchanged address; copy: one).
set -euo pipefail
binary="benchmarks/tree_overhead/tree_overhead"
json="${TEST_TMPDIR:-/tmp}/tree_overhead.json"
"$binary" --device sim --iterations 40 --repeats 2 --burst 8 --json "$json"
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
rows = report["rows"]
assert [r["inputs"] for r in rows] == [1, 33, 257] * 3, rows
for r in rows:
    assert r["manager"]["count"] == 80 and r["bare_replay"]["count"] == 80, r
    expected = 0 if r["binding"] == "zero-copy" else 1
    assert r["input_copies_per_call"] == expected, r
assert set(report["goals"]) == {"zero-copy", "copy", "in-graph copy"}, report["goals"]
PY
if "$binary" --iterations 0 2>/dev/null; then echo "--iterations 0 was accepted" >&2; exit 1; fi
