#!/bin/bash
# wt-decode r2 (issue 38), <= 78 s. Stripped opt builds of the commit in COMMIT (bin/):
# libgrove_decode.so (the decode benchmark, through probes/profile_decode.py --plain) and
# cuda_platform_test. Since r1: the decode attention's _many entry points (the late kernel
# under __launch_bounds__(256, 4): 64 registers, four blocks an SM) where kv_heads x rows
# exceeds the SMs (new default; GROVE_ATTENTION_MANY=0 the old kernel); the bulk-copy GEMVs
# and the L2 column prefetch removed (PTX regenerated); slot compaction off by default.
# 1. Bitwise tests: streamed GEMVs under every remaining setting, the RMSNorm GEMVs, the
#    attention's entry points incl. "many" (tests.txt).
# 2. decode load, the goal's command, on one warmed decoder: GROVE_ATTENTION_MANY=0 (old) and
#    =auto (new default), alternating, twice each (load.txt, load.json).
# 3. decode 1b at batch 1 and 64, 32 steps, defaults vs GROVE_ATTENTION_MANY=0 in one process
#    (decode.txt, decode.json).
set -u
export PYTHONUNBUFFERED=1
LIB=$PWD/bin/libgrove_decode.so
PD="python3 probes/profile_decode.py --lib $LIB"
M=/tmp/grove_decode_models
export GROVE_CACHE_DIR=$PWD/cache
mkdir -p $GROVE_CACHE_DIR
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { local r=$(( 77 - $(el) )); [ $r -lt 2 ] && r=2; [ -n "${1:-}" ] && [ $r -gt $1 ] && r=$1; echo $r; }
nvidia-smi -L | tee $OUT/nvidia_smi.txt
echo "commit $(cat COMMIT)"

timeout $(left 16) bin/cuda_platform_test --gtest_filter='CudaPlatformTest.StreamedGemvMatchesWarpPerColumnBitwise:CudaPlatformTest.StreamedRmsNormGemvMatchesWarpPerColumnBitwise:DecodeAttentionKernel.*' \
  > $OUT/tests.txt 2>&1
echo "== tests rc $? (t=$(el))"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|differ|exception" $OUT/tests.txt | cut -c1-150 | head -6

LOAD="load --config 1b --requests 256 --rate 400 --buckets 16,32,64 --prefills-per-step 2 --prefill-chunk 32 --model-dir $M"
V="GROVE_ATTENTION_MANY=0;GROVE_ATTENTION_MANY=auto;GROVE_ATTENTION_MANY=0;GROVE_ATTENTION_MANY=auto"
timeout $(left 50) stdbuf -oL $PD --plain -- $LOAD --variants "$V" --json $OUT/load.json > $OUT/load.txt 2>&1
echo "== load rc $? (t=$(el))"
grep -E "^GROVE_ATTENTION_MANY=[0a-z]+ +2 |host time|^  decode 64|what\(\)|rror" $OUT/load.txt | cut -c1-150 | tail -14

if [ $(left) -gt 8 ]; then
  timeout $(left) stdbuf -oL $PD --plain -- --configs 1b --batches 1,64 --steps 32 --repeats 1 \
    --model-dir $M --variants "GROVE_ATTENTION_MANY=0" --json $OUT/decode.json > $OUT/decode.txt 2>&1
  echo "== decode rc $? (t=$(el))"
  grep -E "^1b |variant|what\(\)|rror" $OUT/decode.txt | cut -c1-150
fi
echo "== done (t=$(el))"
