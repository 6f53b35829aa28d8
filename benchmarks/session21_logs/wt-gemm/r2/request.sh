#!/usr/bin/env bash
# wt-gemm r2 (40 s): the post-r1 change. New since r1: the tiled small-M kernel's
# warps are a tuned tile parameter (4 or 8, "|tiled v2" keys), and small-N GEMMs
# (MLP-Mixer's token-mixing fc2) can run it as their transpose.
#  1. MLP-Mixer b1: grove (new default) vs grove_notiled (GROVE_SMALL_M_TILED=0,
#     session 20's kernels) in one process; then the tuning table of its shapes.
#  2. gpu_small_m_gemm_test's two cases r1 did not pass/run (dynamo's recompile
#     limit, fixed by a reset per case) and the transposed form.
set -u
export GROVE_LIBRARY=$PWD/bazel-out/k8-opt/bin/capi/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
export GROVE_CACHE_DIR=$(mktemp -d)
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
SUM='^[a-z_0-9]+ +b=|kernels,|C\+\+ call|grove_[a-z0-9]+ +[0-9.]+ us|rror'
timeout 26 python3 benchmarks/torch_zoo.py --no-decode --models mlp_mixer --batches 1 \
  --variants grove,grove_notiled --grove-env notiled:GROVE_SMALL_M_TILED=0 \
  --top 8 --repeats 20 --budget-s 10 --json "$OUT/zoo_mixer.json" > "$OUT/zoo_mixer.txt" 2>&1
echo "zoo mixer rc=$? $(( $(date +%s) - T0 )) s"; grep -E "$SUM" "$OUT/zoo_mixer.txt" | cut -c1-200 | head -30
python3 -c "import json,sys; [print('  tuned %-70s grove %6.2f (%dx%d) tiled %6.2f (%dx%dx%d) lib %6.2f' % (k.split('|',1)[1][:70], e['grove_us'], e.get('grove_rows',0), e.get('grove_columns',1), e.get('tiled_us',0), e.get('tiled_rows',0), e.get('tiled_columns',0), e.get('tiled_warps',0), e['library_us'])) for k,e in sorted(json.load(open(sys.argv[1]))['entries'].items())]" "$GROVE_CACHE_DIR/gemm_tuning.json" 2>&1 | head -20
T1=$(date +%s)
L=$(( 39 - (T1 - T0) )); [ "$L" -lt 5 ] && L=5
(cd tests/python && timeout "$L" python3 -m unittest -v \
  gpu_small_m_gemm_test.GpuSmallMTiledGemmTest.test_small_n_gemms_run_as_their_transpose \
  gpu_small_m_gemm_test.GpuSmallMTiledGemmTest.test_every_epilogue_in_every_dtype) > "$OUT/gpu_test.txt" 2>&1
echo "gpu_small_m_gemm_test rc=$? $(( $(date +%s) - T1 )) s"; grep -E "ok$|FAIL|ERROR|Error:|Ran|OK|skipped" "$OUT/gpu_test.txt" | cut -c1-300 | head -12
echo "total $(( $(date +%s) - T0 )) s"
