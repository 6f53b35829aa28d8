# Session 33 call A (1 GPU): the runs session 32 owed (its last review commits ran on sim only) and
# what transformers 5.17 writes in a checkpoint's config.json (s33_cfg.py).
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
timeout 120 python3 .gpu/s33_cfg.py > $OUT/r/cfg.txt 2>&1; echo "cfg rc=$?"; grep -v -i warn $OUT/r/cfg.txt | cut -c1-1500
cd tests/python
for t in importer_special_ops_test importer_edge_values_test importer_test warm_up_outputs_test gpu_user_scenarios_test gpu_torch_training_test; do
  GROVE_CACHE_DIR=/tmp/gc_$t timeout 240 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"
  grep -A30 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v '^\s*\^' | cut -c1-300 | tail -40
done
echo "done total=$((SECONDS-start))"
