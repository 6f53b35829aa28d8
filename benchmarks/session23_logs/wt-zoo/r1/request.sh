#!/usr/bin/env bash
# wt-zoo r1 (100 s): issue 33, GPU side (libgrove.so of the commit in COMMIT).
# Per-kernel GPU time of grove against reduce-overhead (Inductor) in one process,
# every kernel (--top 80), and A/Bs of switches that are off by default:
#  1. llama b16, bert b16: RO, grove, grove_sib (GROVE_FUSE_SIBLING_GEMMS=1: q/k/v
#     as one GEMM), grove_search (GROVE_GEMM_SEARCH=1: cuBLASLt's algorithms timed).
#  2. gpt2 b1, llama b1, bert b1: RO, grove, grove_margin0 (GROVE_SMALL_M_TILED_MARGIN=0),
#     grove_sib.
set -u
HERE=$PWD
export GROVE_LIBRARY=$HERE/lib/libgrove.so
export PYTHONPATH=$HERE/python:$HERE/tests/python:$HERE/tests/python_support
export LD_LIBRARY_PATH=$HERE/lib/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GROVE_CACHE_DIR=$(mktemp -d)
T0=$(date +%s)
nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit $(cat COMMIT)"
timeout 42 python3 benchmarks/torch_zoo.py --cases llama:16,bert:16 \
  --variants torch_reduce_overhead,grove,grove_sib,grove_search \
  --grove-env sib:GROVE_FUSE_SIBLING_GEMMS=1,search:GROVE_GEMM_SEARCH=1 \
  --top 80 --repeats 20 --budget-s 34 --lowered "$OUT/lowered" --json "$OUT/zoo_b16.json" > "$OUT/zoo_b16.txt" 2>&1
echo "zoo b16 rc=$? $(( $(date +%s) - T0 )) s"; grep -E "rror|Traceback" "$OUT/zoo_b16.txt" | cut -c1-150 | head -3
python3 summary.py "$OUT/zoo_b16.json" | cut -c1-96
T1=$(date +%s)
L=$(( 96 - (T1 - T0) )); [ "$L" -lt 10 ] && L=10
timeout "$L" python3 benchmarks/torch_zoo.py --cases gpt2:1,llama:1,bert:1 \
  --variants torch_reduce_overhead,grove,grove_margin0,grove_sib \
  --grove-env margin0:GROVE_SMALL_M_TILED_MARGIN=0,sib:GROVE_FUSE_SIBLING_GEMMS=1 \
  --top 80 --repeats 20 --budget-s $(( L - 8 )) --lowered "$OUT/lowered" --json "$OUT/zoo_b1.json" > "$OUT/zoo_b1.txt" 2>&1
echo "zoo b1 rc=$? $(( $(date +%s) - T1 )) s"; grep -E "rror|Traceback" "$OUT/zoo_b1.txt" | cut -c1-150 | head -3
python3 summary.py "$OUT/zoo_b1.json" | cut -c1-96
cp "$GROVE_CACHE_DIR/gemm_tuning.json" "$OUT/gemm_tuning.json" 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
