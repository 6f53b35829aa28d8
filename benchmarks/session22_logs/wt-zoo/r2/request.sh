#!/usr/bin/env bash
# wt-zoo r2 (80 s): issue 33, GPU side (libgrove.so of the commit in COMMIT).
# New since r1: warp-held rows only up to 32 elements (r1: longer ones lost);
# erf as one expr with cuda's approximate reciprocal and exp2 (GROVE_FAST_ERF)
# and block reductions at one barrier (GROVE_ONE_BARRIER_REDUCE), both on by
# default: this is their A/B.
#  1. codegen_test on cuda: kErf and the chunked elementwise kernel among the
#     representative kernels against the host; the short-row reductions, and one
#     barrier against two (bitwise).
#  2. torch_zoo TD b1: grove against grove_notiled (GROVE_SMALL_M_TILED=0; r1
#     timed the tiled picks slower inside this model), grove_margin
#     (GROVE_SMALL_M_TILED_MARGIN=0.2) and grove_twobar (GROVE_ONE_BARRIER_REDUCE=0);
#     the GEMM tuning table kept.
#  3. torch_zoo ViT b16 then MLP-Mixer b16 (if time is left): reduce-overhead, grove,
#     grove_slowerf (GROVE_FAST_ERF=0) and grove_twobar in turns; every kernel per call.
set -u
HERE=$PWD
export GROVE_LIBRARY=$HERE/lib/libgrove.so
export PYTHONPATH=$HERE/python:$HERE/tests/python:$HERE/tests/python_support
export LD_LIBRARY_PATH=$HERE/lib/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GROVE_CACHE_DIR=$(mktemp -d)
T0=$(date +%s)
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit $(cat COMMIT)"
timeout 10 ./bin/codegen_test --gtest_filter='Reduction.ShortRows*:CudaExecution.*' > "$OUT/codegen_test.txt" 2>&1
echo "codegen_test rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^\[  (PASSED|FAILED) |FAILED \]" "$OUT/codegen_test.txt" | cut -c1-160 | head -4
T1=$(date +%s)
timeout 24 python3 benchmarks/torch_zoo.py --cases transformer_decoder:1 \
  --variants grove,grove_notiled,grove_margin,grove_twobar \
  --grove-env notiled:GROVE_SMALL_M_TILED=0,margin:GROVE_SMALL_M_TILED_MARGIN=0.2,twobar:GROVE_ONE_BARRIER_REDUCE=0 \
  --top 60 --repeats 20 --budget-s 5 --json "$OUT/zoo_td_b1.json" > "$OUT/zoo_td_b1.txt" 2>&1
echo "zoo TD b1 rc=$? $(( $(date +%s) - T1 )) s"; grep -E "rror|Traceback" "$OUT/zoo_td_b1.txt" | cut -c1-150 | head -3
python3 summary.py "$OUT/zoo_td_b1.json" | cut -c1-96
cp "$GROVE_CACHE_DIR/gemm_tuning.json" "$OUT/gemm_tuning_td_b1.json" 2>/dev/null
T2=$(date +%s)
L=$(( 77 - (T2 - T0) )); [ "$L" -lt 10 ] && L=10
timeout "$L" python3 benchmarks/torch_zoo.py --cases vit:16,mlp_mixer:16 \
  --variants torch_reduce_overhead,grove,grove_slowerf,grove_twobar \
  --grove-env slowerf:GROVE_FAST_ERF=0,twobar:GROVE_ONE_BARRIER_REDUCE=0 \
  --top 60 --repeats 20 --budget-s 32 --lowered "$OUT/lowered" --json "$OUT/zoo_b16.json" > "$OUT/zoo_b16.txt" 2>&1
echo "zoo b16 rc=$? $(( $(date +%s) - T2 )) s"; grep -E "rror|Traceback" "$OUT/zoo_b16.txt" | cut -c1-150 | head -3
python3 summary.py "$OUT/zoo_b16.json" | cut -c1-96
echo "total $(( $(date +%s) - T0 )) s"
