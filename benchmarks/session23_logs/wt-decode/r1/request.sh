#!/bin/bash
# wt-decode r1 (issue 38), <= 97 s. Opt build (stripped) of the commit in COMMIT: bin/libgrove_decode.so
# (the decode benchmark, run through probes/profile_decode.py: --plain = the decode binary).
# 1. decode load, the goal's command (1b, 256 requests at 400/s, buckets 16,32,64, 2 prefills a
#    step, chunk 32), with the new host-time breakdown per kind of call (prefill / chunk by
#    prompt bucket, decode runs by batch bucket): load_default.txt/json. Twice on the same warmed
#    decoder: without (0) and with (1, the new default) requests moving to low slots. It also measures the
#    small-M GEMM tuning table (GROVE_CACHE_DIR=cache, copied to $OUT/gemm_tuning.json).
# 2. torch.profiler of the 1b batch-64 step (decode, 8 steps): per-kernel table, one step in order,
#    and the whole kernel trace (prefills included) in b64_kernels.csv.
# 3. torch.profiler of the 1b batch-1 step (8 steps).
# 4. With the time left: decode load again with every small-M GEMM on cuBLAS
#    (GROVE_SMALL_M_GEMM=off), then with 33-64-row GEMMs on cuBLAS (GROVE_SMALL_M_PAST_32=0).
set -u
export PYTHONUNBUFFERED=1
LIB=$PWD/bin/libgrove_decode.so
PD="python3 probes/profile_decode.py --lib $LIB"
M=/tmp/grove_decode_models
export GROVE_CACHE_DIR=$PWD/cache
mkdir -p $GROVE_CACHE_DIR
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
left() { local r=$(( 96 - $(el) )); [ $r -lt 2 ] && r=2; [ -n "${1:-}" ] && [ $r -gt $1 ] && r=$1; echo $r; }
nvidia-smi -L | tee $OUT/nvidia_smi.txt
echo "commit $(cat COMMIT)"
LOAD="load --config 1b --requests 256 --rate 400 --buckets 16,32,64 --prefills-per-step 2 --prefill-chunk 32 --model-dir $M"
summary() {  # the load's table row and its call-time breakdown
  grep -E "^ +2 |compact slots|host time|^  (prefill|chunk|decode) |what\(\)|rror" $1 | cut -c1-150
}

timeout $(left 57) stdbuf -oL $PD --plain -- $LOAD --compact-slots 0,1 --json $OUT/load_default.json > $OUT/load_default.txt 2>&1
echo "== load default rc $? (t=$(el))"
summary $OUT/load_default.txt
cp $GROVE_CACHE_DIR/gemm_tuning.json $OUT/ 2>/dev/null

timeout $(left 25) $PD --csv $OUT/b64_kernels.csv --sequence -- --configs 1b --batches 64 --steps 8 \
  --repeats 1 --model-dir $M > $OUT/profile_b64.txt 2>&1
echo "== profile b64 rc $? (t=$(el))"
grep -E "step span|sum of incr" $OUT/profile_b64.txt | cut -c1-150
awk '/^role/{p=1} p&&/us\/step|^[a-z]/{print}' $OUT/profile_b64.txt | grep -v "^one step" | sort -k7 -n -r | head -10 | cut -c1-110

if [ $(left) -gt 12 ]; then
  timeout $(left 16) $PD --csv $OUT/b1_kernels.csv --sequence -- --configs 1b --batches 1 --steps 8 \
    --repeats 1 --model-dir $M > $OUT/profile_b1.txt 2>&1
  echo "== profile b1 rc $? (t=$(el))"
  grep -E "step span" $OUT/profile_b1.txt | cut -c1-150
fi

for V in GROVE_SMALL_M_GEMM=off GROVE_SMALL_M_PAST_32=0; do
  [ $(left) -lt 14 ] && break
  env $V timeout $(left) stdbuf -oL $PD --plain -- $LOAD --json $OUT/load_$V.json > $OUT/load_$V.txt 2>&1
  echo "== load $V rc $? (t=$(el))"
  summary $OUT/load_$V.txt
done
cp $GROVE_CACHE_DIR/gemm_tuning.json $OUT/gemm_tuning_after.json 2>/dev/null
echo "== done (t=$(el))"
