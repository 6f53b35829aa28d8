#!/bin/bash
# Runs decode on sim with the small config and checks its JSON: both modes
# timed for each batch, identical tokens, plausible bandwidth numbers.
set -euo pipefail
binary="benchmarks/decode/decode"
dir="${TEST_TMPDIR:-/tmp}/decode_models"
json="${TEST_TMPDIR:-/tmp}/decode.json"
"$binary" --device sim --configs small --batches 1,2 --steps 3 --prompt 4 --max-seq-len 8 \
  --repeats 1 --dtype f32 --model-dir "$dir" --json "$json"
python3 - "$json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
(config,) = report["configs"]
assert config["config"] == "small" and config["hidden_size"] == 256, config
assert [r["batch"] for r in config["results"]] == [1, 2], config
for result in config["results"]:
    assert result["tokens_identical"], result
    for mode in ("server_step", "per_step", "while"):
        assert result[mode]["step_us"] > 0 and result[mode]["tokens_per_s"] > 0, result
    assert result["bytes_read_per_step"] > config["weights_read_per_step_bytes"], result
PY
# The checkpoint is reused on a second run, which times two --variants against the defaults
# (Note [Decode switches in one process]): each with the table's tokens, the defaults last.
"$binary" --device sim --configs small --batches 1 --steps 2 --prompt 4 --max-seq-len 8 \
  --repeats 1 --dtype f32 --model-dir "$dir" --json "$json" \
  --variants 'GROVE_GEMV_A_SHARED=1;GROVE_ATTENTION_WARM=1,GROVE_STREAMED_GEMV=0' > "$json.txt"
grep -q "reused" "$json.txt"
python3 - "$json" <<'PY'
import json, sys
(result,) = json.load(open(sys.argv[1]))["configs"][0]["results"]
names = [v["variant"] for v in result["variants"]]
assert names == ["GROVE_GEMV_A_SHARED=1", "GROVE_ATTENTION_WARM=1,GROVE_STREAMED_GEMV=0",
                 "defaults"], names
for variant in result["variants"]:
    assert variant["tokens_identical"], variant
    assert variant["per_step_us"] > 0 and variant["while_us"] > 0, variant
    assert variant["step_kernels"], variant
PY
if "$binary" --device sim --configs small --batches 1 --variants 'GEMV=1' 2>/dev/null; then
  echo "--variants without GROVE_ names accepted" >&2; exit 1
fi
if "$binary" --configs tiny --device sim 2>/dev/null; then echo "--configs tiny accepted" >&2; exit 1; fi
if "$binary" --prompt 100 --steps 100 --max-seq-len 64 --device sim 2>/dev/null; then
  echo "an oversized run was accepted" >&2; exit 1
fi
