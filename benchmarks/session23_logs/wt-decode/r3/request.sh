#!/bin/bash
# wt-decode r3 (issue 38), <= 58 s. Stripped opt builds of the commit in COMMIT (bin/):
# libgrove_decode.so (through probes/profile_decode.py --plain) and cuda_platform_test.
# r2's removal of the bulk-copy GEMVs is reverted (it broke the RMSNorm GEMVs); what remains
# new: the decode attention's _many entry points (the late kernel under
# __launch_bounds__(256, 4)) where kv_heads x rows exceeds the SMs; GROVE_ATTENTION_MANY=0 the old kernel.
# The GEMM tuning table r1 measured on this host type is preloaded (cache/), so the load does not
# measure it again.
# 1. DecodeAttentionKernel.* (the entry points' bits, "many" included): tests.txt.
# 2. decode load, the goal's command, one warmed decoder: GROVE_ATTENTION_MANY=0 (old) and =auto
#    (the new default), alternating, twice each: load.txt, load.json.
set -u
export PYTHONUNBUFFERED=1
LIB=$PWD/bin/libgrove_decode.so
PD="python3 probes/profile_decode.py --lib $LIB"
M=/tmp/grove_decode_models
export GROVE_CACHE_DIR=$PWD/cache
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { local r=$(( 57 - $(el) )); [ $r -lt 2 ] && r=2; [ -n "${1:-}" ] && [ $r -gt $1 ] && r=$1; echo $r; }
nvidia-smi -L | tee $OUT/nvidia_smi.txt
echo "commit $(cat COMMIT)"

timeout $(left 10) bin/cuda_platform_test --gtest_filter='DecodeAttentionKernel.*' > $OUT/tests.txt 2>&1
echo "== tests rc $? (t=$(el))"
grep -E "^\[ +(OK|FAILED|PASSED) |Failure|differ|exception" $OUT/tests.txt | cut -c1-150 | head -4

LOAD="load --config 1b --requests 256 --rate 400 --buckets 16,32,64 --prefills-per-step 2 --prefill-chunk 32 --model-dir $M"
V="GROVE_ATTENTION_MANY=0;GROVE_ATTENTION_MANY=auto;GROVE_ATTENTION_MANY=0;GROVE_ATTENTION_MANY=auto"
timeout $(left) stdbuf -oL $PD --plain -- $LOAD --variants "$V" --json $OUT/load.json > $OUT/load.txt 2>&1
echo "== load rc $? (t=$(el))"
grep -E "warm-up|^  decode 64|what\(\)|rror" $OUT/load.txt | cut -c1-150 | tail -6
grep -A6 "^variant  " $OUT/load.txt | tail -6 | cut -c1-150
echo "== done (t=$(el))"
