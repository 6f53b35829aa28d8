#!/bin/bash
# wt-decode r2 (issue 38), <= 78 s. Opt builds (stripped) of the commit in COMMIT (bin/),
# probes/profile_decode.py. New defaults since r1: streamed GEMVs allow the next kernel first
# and read C first (both won in r1), the RMSNorm GEMVs keep their row in registers, the
# attention's one key array (95 registers for bf16_g4, was 157).
# 1. Bitwise tests: streamed GEMVs under every setting (old paths, bulk copies with the shared
#    memory opt-in fixed, L2 column prefetch), the attention's entry points.
# 2. decode --variants, 1b and small at batch 1, one process: the old defaults together and each
#    new default alone off, the L2 prefetch, PROGRAMMATIC_GENERATED, multi-block greedy token,
#    then (only if the tests passed) the bulk-copy GEMVs; tokens checked (ab.txt, ab.json).
# 3. decode_loop_test on cuda (WHILE vs per-step tokens, device sampling with 1/4/33 parts).
# 4. torch.profiler of the 1b step under the new defaults if time is left (profile.txt).
set -u
export PYTHONUNBUFFERED=1
LIB=$PWD/bin/libgrove_decode.so
PD="python3 probes/profile_decode.py --lib $LIB"
M=/tmp/grove_decode_models
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { local r=$(( 77 - $(el) )); [ $r -lt 2 ] && r=2; [ -n "${1:-}" ] && [ $r -gt $1 ] && r=$1; echo $r; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "commit $(cat COMMIT)"

timeout $(left 16) bin/cuda_platform_test --gtest_filter='CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise:CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise:DecodeAttentionKernel.*' \
  > $OUT/tests.txt 2>&1
TRC=$?
echo "== tests rc $TRC (t=$(el))"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|differ|exception" $OUT/tests.txt | cut -c1-150 | head -6

OLD="GROVE_GEMV_ALLOW_NEXT_FIRST=0,GROVE_GEMV_RESIDUAL_FIRST=0,GROVE_GEMV_ROW_IN_REGISTERS=0,GROVE_ATTENTION_KEY_ARRAYS=2"
V="$OLD;GROVE_GEMV_ALLOW_NEXT_FIRST=0;GROVE_GEMV_RESIDUAL_FIRST=0;GROVE_GEMV_ROW_IN_REGISTERS=0"
V="$V;GROVE_ATTENTION_KEY_ARRAYS=2;GROVE_GEMV_PREFETCH_COLUMNS=2;GROVE_GEMV_PREFETCH_COLUMNS=4"
V="$V;GROVE_PROGRAMMATIC_GENERATED=1;GROVE_SAMPLE_PARTS=16"
# The bulk-copy kernels last (a fault would end the process), and only after their tests passed.
if [ $TRC -eq 0 ]; then V="$V;GROVE_GEMV_BULK=1;GROVE_GEMV_BULK=1,GROVE_GEMV_PREFETCH_COLUMNS=2"; fi
timeout $(left 34) stdbuf -oL $PD --plain -- --configs 1b,small --batches 1 --steps 64 --repeats 3 \
  --model-dir $M --variants "$V" --json $OUT/ab.json > $OUT/ab.txt 2>&1
echo "== ab rc $? (t=$(el))"
grep -E "variant|^1b |^small |what\(\)|rror" $OUT/ab.txt | sed -e 's/GROVE_//g' -e 's/ATTENTION_/A_/g' \
  -e 's/batch 1 //' -e 's/, tokens identical/ =/' | cut -c1-140

timeout $(left 14) bin/decode_loop_test --gtest_filter='*cuda*' > $OUT/decode_loop_test.txt 2>&1
echo "== decode_loop_test (cuda) rc $? (t=$(el))"
grep -E "^\[ +(FAILED|PASSED) |Failure" $OUT/decode_loop_test.txt | cut -c1-150 | head -6

if [ $(left) -gt 10 ]; then
  timeout $(left) $PD --csv $OUT/kernels.csv --sequence -- --configs 1b --batches 1 --steps 8 \
    --repeats 1 --model-dir $M > $OUT/profile.txt 2>&1
  echo "== profile rc $? (t=$(el))"
  grep -E "step span|^grove_decode_att|^grove_rms|^grove_small" $OUT/profile.txt | cut -c1-120 | head -8
fi
echo "== done (t=$(el))"
