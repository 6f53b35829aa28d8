#!/bin/bash
# wt-decode r1 (issue 38), <= 97 s. Opt builds of the commit in COMMIT (bin/), probes/profile_decode.py.
# 1. Bitwise tests of the new switches: streamed GEMVs allowing the next kernel first / reading C
#    first (both policies), bulk-copy GEMVs (GROVE_GEMV_BULK), the attention's split entry
#    points (G = 2, 4, 8).
# 2. torch.profiler of one decode run, 1b and small at batch 1, defaults: per-kernel durations,
#    increments and gaps, one step in order (profile_base.txt, base_kernels.csv).
# 3. decode --variants, 1b and small, batch 1, one process: the new switches, the older untimed
#    GROVE_PROGRAMMATIC_GENERATED, then (if the tests passed) the bulk-copy GEMVs; tokens
#    checked against the defaults (ab.txt, ab.json).
# 4. If time is left: the profile again with the combined switches (profile_combo.txt).
set -u
export PYTHONUNBUFFERED=1
LIB=$PWD/bin/libgrove_decode.so
TEST=$PWD/bin/cuda_platform_test
PD="python3 probes/profile_decode.py --lib $LIB"
M=/tmp/grove_decode_models
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { local r=$(( 95 - $(el) )); [ $r -lt 2 ] && r=2; [ -n "${1:-}" ] && [ $r -gt $1 ] && r=$1; echo $r; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "commit $(cat COMMIT)"

timeout $(left 20) $TEST --gtest_filter='CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise:CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise:DecodeAttentionKernel.*' \
  > $OUT/tests.txt 2>&1
TRC=$?
echo "== tests rc $TRC (t=$(el))"
grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|differ|exception" $OUT/tests.txt | cut -c1-160 | head -8

timeout $(left 30) $PD --csv $OUT/base_kernels.csv --sequence -- --configs 1b,small --batches 1 \
  --steps 16 --repeats 1 --model-dir $M > $OUT/profile_base.txt 2>&1
echo "== profile rc $? (t=$(el))"
grep -E "^== |step span|sum of incr" $OUT/profile_base.txt | cut -c1-170

C="GROVE_GEMV_ALLOW_NEXT_FIRST=1,GROVE_ATTENTION_SPLIT=4,GROVE_GEMV_RESIDUAL_FIRST=1"
V="GROVE_GEMV_ALLOW_NEXT_FIRST=1;GROVE_ATTENTION_SPLIT=4;GROVE_ATTENTION_SPLIT=2"
V="$V;GROVE_PROGRAMMATIC_GENERATED=1;$C"
# The bulk-copy kernels last (a fault would end the process), and only after their tests passed.
if [ $TRC -eq 0 ]; then V="$V;GROVE_GEMV_BULK=1;GROVE_GEMV_BULK=1,$C"; fi
timeout $(left 45) stdbuf -oL $PD --plain -- --configs 1b,small --batches 1 --steps 64 --repeats 3 \
  --model-dir $M --variants "$V" --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "== ab rc $? (t=$(el))"
grep -E "variant|^1b |^small |what\(\)|rror" $OUT/ab.txt | sed 's/GROVE_//g' | cut -c1-150

if [ $(left) -gt 12 ]; then
  B=""; [ $TRC -eq 0 ] && B="GROVE_GEMV_BULK=1"
  env $B GROVE_GEMV_ALLOW_NEXT_FIRST=1 GROVE_ATTENTION_SPLIT=4 GROVE_GEMV_RESIDUAL_FIRST=1 \
    timeout $(left) $PD --csv $OUT/combo_kernels.csv --sequence -- --configs 1b --batches 1 \
    --steps 16 --repeats 1 --model-dir $M > $OUT/profile_combo.txt 2>&1
  echo "== profile combo rc $? (t=$(el))"
  grep -E "^== |step span" $OUT/profile_combo.txt | cut -c1-170
fi
echo "== done (t=$(el))"
