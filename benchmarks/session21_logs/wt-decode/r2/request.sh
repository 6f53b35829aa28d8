#!/bin/bash
# wt-decode r2 (issue 38), <= 40 s: the post-r1 changes (commit in r2_extra/COMMIT).
# Files: r2_extra/bin (opt libgrove_decode.so, cuda_platform_test), r2_extra/*.sm90.cubin (ptxas
# 13.0 of the committed GEMV PTX), benchmarks/decode/probes.
# 0. (CPU) SASS of the streamed GEMV and RMSNorm GEMV kernels: cache-policy descriptor registers
#    used before any write (the removed _x8 kernels' fault, r1) -- which kernels have them?
# 1. Bitwise tests after removing the _x8 kernels: every streamed kernel under both L2
#    policies (the deep-slot kernels now read under the default one), A-in-shared auto.
# 2. decode 1b b1, one process: defaults vs GROVE_STREAMED_GEMV_SLOTS=auto (faulted in r1 under
#    evict-first; now default policy) vs GROVE_GEMV_A_SHARED=auto; then two never-timed older
#    switches if time is left (FUSED_LM_HEAD, PROGRAMMATIC_GENERATED); tokens checked.
set -u
export PYTHONUNBUFFERED=1
LIB=$PWD/r2_extra/bin/libgrove_decode.so
TEST=$PWD/r2_extra/bin/cuda_platform_test
PD="python3 benchmarks/decode/probes/profile_decode.py --lib $LIB"
M=/tmp/grove_decode_models
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { local r=$(( 38 - $(el) )); [ $r -lt 2 ] && r=2; [ -n "${1:-}" ] && [ $r -gt $1 ] && r=$1; echo $r; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cat r2_extra/COMMIT
OBJ=$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)
if [ -n "$OBJ" ]; then
  for c in r2_extra/*.sm90.cubin; do
    echo "== $c"
    timeout 10 $OBJ -sass $c | python3 benchmarks/decode/probes/sass_descriptor_check.py
  done > $OUT/sass_check.txt 2>&1
  cat $OUT/sass_check.txt | cut -c1-160 | head -30
else
  echo "== no cuobjdump on this host"
fi
timeout $(left 20) $TEST --gtest_filter='CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise:CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise:CudaPlatformTest.SmallMGemvIsOneKernelInACapturedGraph' \
  > $OUT/tests.txt 2>&1
echo "== tests rc $? (t=$(el))"
grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED) |Failure|differ|exception" $OUT/tests.txt | cut -c1-200 | head -12
timeout $(left) stdbuf -oL $PD --plain -- --configs 1b --batches 1 --steps 64 --repeats 3 \
  --model-dir $M --variants "GROVE_STREAMED_GEMV_SLOTS=auto;GROVE_GEMV_A_SHARED=auto;GROVE_FUSED_LM_HEAD=1;GROVE_PROGRAMMATIC_GENERATED=1" \
  --json $OUT/decode.json > $OUT/decode.txt 2>&1
echo "== decode rc $? (t=$(el))"
grep -E "variant|^1b |^small |^config|what\(\)" $OUT/decode.txt | cut -c1-200
echo "== done (t=$(el))"
