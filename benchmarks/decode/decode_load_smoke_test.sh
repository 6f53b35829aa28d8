#!/bin/bash
# Runs `decode load` on sim with the small config and a few requests, and checks
# its JSON: every token answered, latencies measured, steps batched.
set -euo pipefail
binary="benchmarks/decode/decode"
dir="${TEST_TMPDIR:-/tmp}/decode_models"
json="${TEST_TMPDIR:-/tmp}/decode_load.json"
"$binary" load --device sim --config small --dtype f32 --requests 6 --rate 40 \
  --prompt-lengths 4,8 --output-lengths 3,6 --buckets 1,2,4 --max-seq-len 16 --loop-steps 4 \
  --model-dir "$dir" --json "$json"
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["requests"] == 6 and report["config"] == "small", report
assert 6 * 3 <= report["tokens"] <= 6 * 6, report
for key in ("ttft_ms", "itl_ms"):
    assert 0 < report[key]["p50"] <= report[key]["p99"], report
assert report["tokens_per_s"] > 0 and report["decode_steps"] > 0, report
assert report["prefills"] == 6, report
PY
# Chunked prefill (Note [Chunked prefill]): 8-token prompts in chunks of 4, one call per step.
"$binary" load --device sim --config small --dtype f32 --requests 6 --rate 40 \
  --prompt-lengths 4,8 --output-lengths 3,6 --buckets 1,2,4 --max-seq-len 16 --loop-steps 4 \
  --prefills-per-step 1 --prefill-chunk 4 --model-dir "$dir" --json "$json"
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["prefill_chunk"] == 4 and report["prefills"] == 6, report
assert 6 * 3 <= report["tokens"] <= 6 * 6, report
PY
if "$binary" load --device sim --prompt-lengths 200 --output-lengths 100 --max-seq-len 64 2>/dev/null; then
  echo "an oversized run was accepted" >&2; exit 1
fi
