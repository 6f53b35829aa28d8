# wt-jit r2: (1) does the driver JIT PTX modules side by side? (--jit-probe: the f32 tiled GEMM's 12
# entries on 8 loader threads vs 1, and the module whole); (2) the cold compile A/B: new defaults vs
# the old path and each new piece switched back alone; (3) GPU tests. Every eager_latency run is a
# process of its own with an empty driver JIT cache (CUDA_CACHE_PATH) and an empty GEMM tuning table
# (GROVE_CACHE_DIR), except the *_table_warm runs (the tuning table of the run before).
set -u; start=$SECONDS
export LD_LIBRARY_PATH=$PWD/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi -L | tee $OUT/nvidia_smi.txt; nproc | tee $OUT/nproc.txt
LIMIT=${LIMIT:-78}
left() { echo $((LIMIT - (SECONDS - start))); }
fresh() { local d; d=$(mktemp -d); mkdir -p $d/nv $d/grove; echo $d; }
for p in "entries8 GROVE_TILE_PRELOAD=entries GROVE_KERNEL_LOAD_THREADS=8" "entries1 GROVE_TILE_PRELOAD=entries GROVE_KERNEL_LOAD_THREADS=1" "module GROVE_TILE_PRELOAD=module"; do
  set -- $p; label=$1; shift; d=$(fresh)
  echo "$label: $(env CUDA_CACHE_PATH=$d/nv "$@" timeout 10 ./eager_latency --jit-probe 2>&1 | tail -1)" | tee -a $OUT/jit_probe.txt
done
printf 'label\tcase\trep\tcold_ms\tcodegen_ms\tcached_ms\tfirst_call_ms\n' > $OUT/summary.tsv
run() {  # label case rep [ENV=V ...]
  local label=$1 case=$2 rep=$3; shift 3
  [ $(left) -lt 8 ] && { echo "skip $label $case $rep (time)"; return; }
  local dir=${KEEP_DIR:-$(fresh)}
  local name=${label}_c${case}_r${rep}
  env CUDA_CACHE_PATH=$dir/nv GROVE_CACHE_DIR=$dir/grove "$@" timeout $(( $(left) < 12 ? $(left) : 12 )) \
    ./eager_latency --in-process --cases $case --iters 20 --warmup 5 --profile-top 12 --json $OUT/$name.json > $OUT/$name.txt 2>&1
  local rc=$?
  cp $dir/grove/gemm_tuning.json $OUT/$name.tuning.json 2>/dev/null
  python3 - "$OUT/$name.json" "$label" "$case" "$rep" "$rc" >> $OUT/summary.tsv <<'PY'
import json, sys
path, label, case, rep, rc = sys.argv[1:]
try:
    r = json.load(open(path))["results"][0]
    print(f"{label}\t{case}\t{rep}\t{r['compile_cold_ms']:.1f}\t{r['codegen_cold_ms']:.1f}\t{r['compile_cached_ms']:.2f}\t{r['first_call_ms']:.1f}")
except Exception as e:
    print(f"{label}\t{case}\t{rep}\tfailed rc={rc}")
PY
  LAST_DIR=$dir
}
OLD="GROVE_KERNEL_LOAD_THREADS=0 GROVE_PTX_ONE_ENTRY=0 GROVE_PARALLEL_CODEGEN=0 GROVE_TILE_PRELOAD=none"
run new 0 1; run old 0 1 $OLD
run new 2 1; DNEW=$LAST_DIR; run old 2 1 $OLD; DOLD=$LAST_DIR
timeout 15 ./small_m_gemm_test --gtest_filter='*cuda*:*Cuda*' > $OUT/small_m_gemm_test.txt 2>&1; echo "small_m_gemm_test rc=$? s=$((SECONDS-start))"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/small_m_gemm_test.txt | head -6
timeout 12 ./cuda_platform_test --gtest_filter='KernelLoading*:*Gemv*:*Loading*:*Gemm*' > $OUT/cuda_platform_test.txt 2>&1; echo "cuda_platform_test rc=$? s=$((SECONDS-start))"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/cuda_platform_test.txt | head -6
run entries 0 1 GROVE_TILE_PRELOAD=entries
run serial_codegen 2 1 GROVE_PARALLEL_CODEGEN=0
rm -rf $DNEW/nv; mkdir -p $DNEW/nv; KEEP_DIR=$DNEW run new_table_warm 2 1
rm -rf $DOLD/nv; mkdir -p $DOLD/nv; KEEP_DIR=$DOLD run old_table_warm 2 1 $OLD
run entries 2 1 GROVE_TILE_PRELOAD=entries
run none 0 1 GROVE_TILE_PRELOAD=none
for c in 0 2; do run old $c 2 $OLD; run new $c 2; done
run serial_codegen 0 1 GROVE_PARALLEL_CODEGEN=0
cat $OUT/summary.tsv
for f in new_c2_r1 old_c2_r1 new_c0_r1 old_c0_r1; do [ -f $OUT/$f.txt ] && { echo "== $f"; grep "cold compile of" $OUT/$f.txt | cut -c1-260; }; done
echo "total s=$((SECONDS-start))"
