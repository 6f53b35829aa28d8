#!/usr/bin/env bash
# wt-zoo r2 (80 s): issue 33, GPU side (libgrove.so of the commit in COMMIT).
# New defaults since session 22: sibling GEMMs of inference on cuda fused (Note [Wide
# sibling GEMMs of inference on cuda]; GROVE_FUSE_SIBLING_GEMMS=0 = old path) and the
# tiled small-M kernel's [K, N] form timed in the tuning (Note [Small-M tiled GEMM over a
# K x N weight]; GROVE_SMALL_M_TILED_KN=0 = old path); attention reads grouped-query keys
# whole (Note [Grouped-query keys read whole]; GROVE_GROUPED_ATTENTION_KEYS=0 = old path).
#  0. gpu_small_m_gemm_test's [K, N] case (every tile forced vs float64, eager == cudagraphs).
#  1. llama b16, bert b16: RO, grove, grove_nosib, grove_nogqa, grove_search (GROVE_GEMM_SEARCH=1
#     on top of the new defaults).
#  2. gpt2 b1: RO, grove, grove_nokn.
#  3. per-kernel GPU time of the C++ rows' models (mlp16x512 b1, gpt4x256 b1 T=32) through
#     grove.compile's cudagraphs backend under torch.profiler (benchmarks/cxx_models_profile.py).
#  4. bart b16 (if time is left): RO, grove, grove_nosib.
set -u
HERE=$PWD
export GROVE_LIBRARY=$HERE/lib/libgrove.so
export PYTHONPATH=$HERE/python:$HERE/tests/python:$HERE/tests/python_support
export LD_LIBRARY_PATH=$HERE/lib/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GROVE_CACHE_DIR=$(mktemp -d)
T0=$(date +%s)
nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), commit $(cat COMMIT)"
(cd tests/python && timeout 14 python3 -m unittest -v \
  gpu_small_m_gemm_test.GpuSmallMTiledGemmTest.test_k_by_n_weights_match_the_reference_with_partial_tiles) > "$OUT/gpu_kn_test.txt" 2>&1
echo "gpu kn test rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^(OK|FAILED|Ran)|Error|rror:" "$OUT/gpu_kn_test.txt" | cut -c1-200 | head -6
T1=$(date +%s)
timeout 40 python3 benchmarks/torch_zoo.py --cases llama:16,bert:16 \
  --variants torch_reduce_overhead,grove,grove_nosib,grove_nogqa,grove_search \
  --grove-env nosib:GROVE_FUSE_SIBLING_GEMMS=0,nogqa:GROVE_GROUPED_ATTENTION_KEYS=0,search:GROVE_GEMM_SEARCH=1 \
  --top 80 --repeats 20 --budget-s 30 --lowered "$OUT/lowered" --json "$OUT/zoo_b16.json" > "$OUT/zoo_b16.txt" 2>&1
echo "zoo b16 rc=$? $(( $(date +%s) - T1 )) s"; grep -E "rror|Traceback" "$OUT/zoo_b16.txt" | cut -c1-150 | head -3
python3 summary.py "$OUT/zoo_b16.json" | cut -c1-96
T2=$(date +%s)
timeout 18 python3 benchmarks/torch_zoo.py --cases gpt2:1 \
  --variants torch_reduce_overhead,grove,grove_nokn --grove-env nokn:GROVE_SMALL_M_TILED_KN=0 \
  --top 80 --repeats 20 --budget-s 10 --lowered "$OUT/lowered" --json "$OUT/zoo_gpt2_b1.json" > "$OUT/zoo_gpt2_b1.txt" 2>&1
echo "zoo gpt2 b1 rc=$? $(( $(date +%s) - T2 )) s"; grep -E "rror|Traceback" "$OUT/zoo_gpt2_b1.txt" | cut -c1-150 | head -3
python3 summary.py "$OUT/zoo_gpt2_b1.json" | cut -c1-96
cp "$GROVE_CACHE_DIR/gemm_tuning.json" "$OUT/gemm_tuning.json" 2>/dev/null
T4=$(date +%s)
L=$(( 76 - (T4 - T0) )); [ "$L" -gt 12 ] && L=12
if [ "$L" -ge 5 ]; then
  timeout "$L" python3 benchmarks/cxx_models_profile.py > "$OUT/cxx_models_profile.txt" 2>&1
  echo "C++ models profile rc=$? $(( $(date +%s) - T4 )) s"; grep -E "per call" "$OUT/cxx_models_profile.txt" | cut -c1-120
fi
T3=$(date +%s)
L=$(( 77 - (T3 - T0) ))
if [ "$L" -ge 12 ]; then
  timeout "$L" python3 benchmarks/torch_zoo.py --cases bart:16 \
    --variants torch_reduce_overhead,grove,grove_nosib --grove-env nosib:GROVE_FUSE_SIBLING_GEMMS=0 \
    --top 80 --repeats 20 --budget-s $(( L - 6 )) --json "$OUT/zoo_bart_b16.json" > "$OUT/zoo_bart_b16.txt" 2>&1
  echo "zoo bart b16 rc=$? $(( $(date +%s) - T3 )) s"
  python3 summary.py "$OUT/zoo_bart_b16.json" | cut -c1-96
fi
echo "total $(( $(date +%s) - T0 )) s"
