# wt-jit r1: the cold compile's breakdown on the GPU and the A/B of the two new loading paths.
# Every eager_latency run is its own process with an empty driver JIT cache (CUDA_CACHE_PATH = a
# new empty directory) and an empty GEMM tuning table (GROVE_CACHE_DIR = a new empty directory),
# unless its label says "warm".
set -u; start=$SECONDS
export LD_LIBRARY_PATH=$PWD/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi -L | tee $OUT/nvidia_smi.txt; nproc | tee $OUT/nproc.txt
left() { echo $((94 - (SECONDS - start))); }
printf 'label\tcase\trep\tcold_ms\tcodegen_ms\tcached_ms\tfirst_call_ms\n' > $OUT/summary.tsv
run() {  # label case rep [ENV=V ...]
  local label=$1 case=$2 rep=$3; shift 3
  [ $(left) -lt 6 ] && { echo "skip $label $case $rep (time)"; return; }
  local dir=${KEEP_DIR:-$(mktemp -d)}
  mkdir -p $dir/nv $dir/grove
  local name=${label}_c${case}_r${rep}
  env CUDA_CACHE_PATH=$dir/nv GROVE_CACHE_DIR=$dir/grove "$@" timeout $(( $(left) < 12 ? $(left) : 12 )) \
    ./eager_latency --in-process --cases $case --iters 20 --warmup 5 --profile-top 12 --json $OUT/$name.json > $OUT/$name.txt 2>&1
  local rc=$?
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
OLD="GROVE_KERNEL_LOAD_THREADS=0 GROVE_PTX_ONE_ENTRY=0"
for c in 0 2 1; do run new $c 1; run old $c 1 $OLD; done
timeout 20 ./cuda_platform_test > $OUT/cuda_platform_test.txt 2>&1; echo "cuda_platform_test rc=$? s=$((SECONDS-start))"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/cuda_platform_test.txt | head -8
timeout 20 ./small_m_gemm_test > $OUT/small_m_gemm_test.txt 2>&1; echo "small_m_gemm_test rc=$? s=$((SECONDS-start))"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/small_m_gemm_test.txt | head -8
for c in 0 2; do run one_entry_only $c 1 GROVE_KERNEL_LOAD_THREADS=0; run threads_only $c 1 GROVE_PTX_ONE_ENTRY=0; done
for c in 2 0; do run old $c 2 $OLD; run new $c 2; done
# The tuning table kept from the run before, the driver's cache emptied (table_warm), then both
# kept (all_warm).
run new 2 3; dn=$LAST_DIR; rm -rf $dn/nv; KEEP_DIR=$dn run new_table_warm 2 3; KEEP_DIR=$dn run new_all_warm 2 4
run old 2 3 $OLD; dold=$LAST_DIR; rm -rf $dold/nv; KEEP_DIR=$dold run old_table_warm 2 3 $OLD; KEEP_DIR=$dold run old_all_warm 2 4 $OLD
# The benchmark's own default (each case in a process of its own, empty caches), if time is left.
[ $(left) -gt 14 ] && timeout $(( $(left) - 2 )) ./eager_latency --iters 20 --warmup 5 --json $OUT/default.json > $OUT/default.txt 2>&1; echo "default rc=$?"
column -t $OUT/summary.tsv
for f in $OUT/new_c2_r1.txt $OUT/old_c2_r1.txt $OUT/new_c0_r1.txt $OUT/old_c0_r1.txt; do [ -f $f ] && { echo "== $(basename $f)"; grep -A3 "cold compile of" $f | cut -c1-200 | head -6; }; done
echo "total s=$((SECONDS-start))"
