#!/bin/bash
# wt-decode r1 (issue 38), <= 90 s (maybe the only round). Files: libgrove_decode.so (55 MB),
# cuda_platform_test (9.7 MB), benchmarks/decode/probes.
# 1. Bitwise tests of the new entry points (attention late/early/warm; streamed GEMVs with
#    A loaded ahead, 24 and 32 slots).
# 2. Where the 1B batch-1 step goes (torch.profiler, probes/profile_decode.py), one process per
#    setting, same checkpoint, row 0's tokens compared:
#    base: defaults;  ahead: GROVE_GEMV_X_AHEAD=1;  warm: GROVE_ATTENTION_WARM=1;
#    auto: GROVE_STREAMED_GEMV_SLOTS=auto;  all: the three together.
# 3. ncu on one layer's attention and streamed GEMVs (isolated durations, stall reasons).
set -u
LIB=$PWD/bazel-out/k8-opt/bin/benchmarks/decode/libgrove_decode.so
PD="python3 benchmarks/decode/probes/profile_decode.py --lib $LIB"
M=/tmp/grove_decode_models
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { local r=$(( 87 - $(el) )); [ $r -lt 2 ] && r=2; [ -n "${1:-}" ] && [ $r -gt $1 ] && r=$1; echo $r; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
timeout 15 bazel-out/k8-opt/bin/tests/runtime/cuda_platform_test \
  --gtest_filter='DecodeAttentionKernel.*:CudaPlatformTest.Streamed*' > $OUT/tests.txt 2>&1
echo "== tests rc $? (t=$(el))"
grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) " $OUT/tests.txt | head -12
ARGS="--configs 1b --batches 1 --steps 32 --repeats 1 --model-dir $M"
prof() { local tag=$1 cap=$2; shift 2
  env "$@" timeout $(left $cap) $PD --csv /tmp/k_$tag.csv -- $ARGS --json /tmp/j_$tag.json > /tmp/p_$tag.txt 2>&1
  echo "== profile $tag ($*) rc $? (t=$(el))"
  { echo "== profile $tag ($*)"; cat /tmp/p_$tag.txt; } >> $OUT/profiles.txt
  grep -E "^step span|^grove|^rms_norm|^cast|^embedding|^sum of" /tmp/p_$tag.txt | \
    awk '{printf "  %-52s", substr($1,1,52); for (i=2;i<=NF;i++) printf " %s", $i; printf "\n"}'; }
prof base 32 X=1
prof ahead 12 GROVE_GEMV_X_AHEAD=1
prof warm 12 GROVE_ATTENTION_WARM=1
prof auto 12 GROVE_STREAMED_GEMV_SLOTS=auto
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout $(left 14) $NCU --kernel-name regex:"grove_decode_attention|grove_small_m_gemv_streamed|grove_rms_norm" \
  --launch-skip 300 --launch-count 6 --cache-control none \
  --section SpeedOfLight --section WarpStateStats --section LaunchStats \
  --metrics regex:"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
  python3 benchmarks/decode/probes/profile_decode.py --lib $LIB --plain -- \
  --configs 1b --batches 1 --steps 8 --repeats 1 --model-dir $M > $OUT/ncu.txt 2>&1
echo "== ncu rc $? (t=$(el))"
grep -E "^  grove|Duration|Warp Cycles Per Issued|stalled_(no_instruction|long_scoreboard|barrier|wait|short_scoreboard)_per" $OUT/ncu.txt | head -50
prof all 12 GROVE_GEMV_X_AHEAD=1 GROVE_ATTENTION_WARM=1 GROVE_STREAMED_GEMV_SLOTS=auto
python3 - <<'PY'
import json
def res(tag):
    c = json.load(open("/tmp/j_%s.json" % tag))["configs"][0]["results"][0]
    return c["row0_greedy"], c["per_step"]["step_us"], c["while"]["step_us"]
try:
    base = res("base")
    print("base: per-step %.1f us, while %.1f us (profiled run)" % base[1:])
    for tag in ("ahead", "warm", "auto", "all"):
        try:
            r = res(tag)
            print("%-5s tokens == base: %s  per-step %.1f us  while %.1f us (profiled run)" % (
                tag, r[0] == base[0], r[1], r[2]))
        except Exception as e:
            print(tag, "missing:", e)
except Exception as e:
    print("compare failed:", e)
PY
echo "== done (t=$(el))"
