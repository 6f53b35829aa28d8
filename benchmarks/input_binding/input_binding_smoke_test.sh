#!/bin/bash
# Runs input_binding on sim with a small input and checks its JSON: every
# timed call of the copy mode copied and every one of the zero-copy mode
# patched (the benchmark itself checks both modes' results).
set -euo pipefail
binary="benchmarks/input_binding/input_binding"
json="${TEST_TMPDIR:-/tmp}/input_binding.json"
"$binary" --device sim --mib 1 --iters 6 --warmup 2 --json "$json"
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
(row,) = report["results"]
assert row["input_mib"] == 1 and row["copies"] == 6 and row["patches"] == 6, row
for mode in ("bare_replay", "copy", "zero_copy"):
    assert row[mode]["count"] == 6, row
PY
if "$binary" --mib 0 2>/dev/null; then echo "--mib 0 was accepted" >&2; exit 1; fi
