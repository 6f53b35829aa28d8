#!/bin/bash
# The 1B batch-1 decode step with each batch-1 kernel switch both ways, one process per
# setting on one GPU, row 0's greedy tokens compared with the defaults' (GPU host only).
#
#   decode_switches_ab.sh LIBGROVE_DECODE_SO [OUT_DIR] [SECONDS_PER_RUN]
#
# (decode --variants times such settings in one process: Note [Decode switches in one process].)
# Settings: defaults; GROVE_GEMV_A_SHARED=1 (Note [Streamed GEMV holds A in shared memory]);
# GROVE_ATTENTION_WARM=1 (Note [Decode attention runs dry before its wait]);
# GROVE_STREAMED_GEMV_SLOTS=auto (Note [Streamed GEMV slots]); the last two together; and two
# older switches never timed on an H100 since their kernels changed: GROVE_FUSED_LM_HEAD=1 (the
# final norm, LM head and f32 widening as one kernel) and GROVE_PROGRAMMATIC_GENERATED=1
# (generated kernels such as the final norm launched programmatically).
# A plain run takes about 10 s once the checkpoint exists (the first writes it, about 9 s more);
# each is cut at SECONDS_PER_RUN (default 25).
set -u
lib=${1:?usage: decode_switches_ab.sh LIBGROVE_DECODE_SO [OUT_DIR] [SECONDS_PER_RUN]}
out=${2:-/tmp/decode_switches_ab}
cap=${3:-25}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
run() {
  local tag=$1
  shift
  env "$@" timeout "$cap" python3 "$here/profile_decode.py" --lib "$lib" --plain -- \
    --configs 1b --batches 1 --repeats 3 --json "$out/$tag.json" > "$out/$tag.txt" 2>&1
  echo "== $tag ($*) rc $?"
  grep -E "^1b " "$out/$tag.txt"
}
run defaults X=1
run a_shared GROVE_GEMV_A_SHARED=1
run warm GROVE_ATTENTION_WARM=1
run slots_auto GROVE_STREAMED_GEMV_SLOTS=auto
run warm_slots_auto GROVE_ATTENTION_WARM=1 GROVE_STREAMED_GEMV_SLOTS=auto
run fused_lm_head GROVE_FUSED_LM_HEAD=1
run generated_pdl GROVE_PROGRAMMATIC_GENERATED=1
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def result(tag):
    with open(os.path.join(out, tag + ".json")) as handle:
        return json.load(handle)["configs"][0]["results"][0]
try:
    base = result("defaults")
except (OSError, KeyError, ValueError) as error:
    raise SystemExit("no defaults run: %s" % error)
print("%-16s %12s %10s %7s %s" % ("setting", "per-step us", "WHILE us", "MBU", "tokens == defaults"))
for tag in ("defaults", "a_shared", "warm", "slots_auto", "warm_slots_auto", "fused_lm_head",
            "generated_pdl"):
    try:
        r = result(tag)
    except (OSError, KeyError, ValueError) as error:
        print("%-16s missing (%s)" % (tag, error))
        continue
    looped = r["while"].get("step_us", float("nan"))
    print("%-16s %12.1f %10.1f %6.1f%% %s" % (tag, r["per_step"]["step_us"], looped,
                                            100 * r["while"].get("mbu", float("nan")),
                                            r["row0_greedy"] == base["row0_greedy"]))
PY
