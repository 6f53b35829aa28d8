#!/usr/bin/env bash
# wt-zoo r3 (optional, only if the lead has GPU time; 80 s). libgrove.so of COMMIT.
#  1. the [K, N] tiled small-M form (Note [Small-M tiled GEMM over a K x N weight], now off by
#     default: GROVE_SMALL_M_TILED_KN=1) on 8 cases against float64, eager == cudagraphs.
#  2. gpt2 b1: RO, grove, grove_kn (GROVE_SMALL_M_TILED_KN=1): the A/B r2 ran out of time for.
#  3. bert b16: RO, grove (wide sibling GEMMs fused by default), grove_nosib.
set -u
HERE=$PWD
export GROVE_LIBRARY=$HERE/lib/libgrove.so
export PYTHONPATH=$HERE/python:$HERE/tests/python:$HERE/tests/python_support
export LD_LIBRARY_PATH=$HERE/lib/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GROVE_CACHE_DIR=$(mktemp -d)
T0=$(date +%s)
nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit $(cat COMMIT)"
(cd tests/python && timeout 20 python3 ../../kn_cases.py) > "$OUT/kn_cases.txt" 2>&1
echo "kn cases rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^(ok|FAIL|PASSED|FAILED)" "$OUT/kn_cases.txt" | cut -c1-160 | head -10
T1=$(date +%s)
timeout 30 python3 benchmarks/torch_zoo.py --cases gpt2:1 \
  --variants torch_reduce_overhead,grove,grove_kn --grove-env kn:GROVE_SMALL_M_TILED_KN=1 \
  --top 80 --repeats 20 --budget-s 6 --lowered "$OUT/lowered" --json "$OUT/zoo_gpt2_b1.json" > "$OUT/zoo_gpt2_b1.txt" 2>&1
echo "zoo gpt2 b1 rc=$? $(( $(date +%s) - T1 )) s"; grep -E "rror|Traceback" "$OUT/zoo_gpt2_b1.txt" | cut -c1-150 | head -3
python3 summary.py "$OUT/zoo_gpt2_b1.json" | cut -c1-96
cp "$GROVE_CACHE_DIR/gemm_tuning.json" "$OUT/gemm_tuning.json" 2>/dev/null
T2=$(date +%s)
L=$(( 78 - (T2 - T0) )); [ "$L" -lt 8 ] && L=8
timeout "$L" python3 benchmarks/torch_zoo.py --cases bert:16 \
  --variants torch_reduce_overhead,grove,grove_nosib --grove-env nosib:GROVE_FUSE_SIBLING_GEMMS=0 \
  --top 80 --repeats 20 --budget-s 4 --json "$OUT/zoo_bert_b16.json" > "$OUT/zoo_bert_b16.txt" 2>&1
echo "zoo bert b16 rc=$? $(( $(date +%s) - T2 )) s"
python3 summary.py "$OUT/zoo_bert_b16.json" | cut -c1-96
echo "total $(( $(date +%s) - T0 )) s"
