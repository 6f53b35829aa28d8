#!/usr/bin/env bash
# wt-zoo r1 (issue 33, GPU-bound rows). Grove variants of one process take turns
# (reduce-overhead and eager left out: session 19's final call has them):
#  1. MLP-Mixer b1, b16: grove (new defaults: small-M column tiles, Note [Small-M
#     GEMM column tiles]; token-mixing fc2 as the transposed small-M kernel, Note
#     [Small-N GEMMs as their transpose]; token-mixing fc1 as the tiny-K kernel, Note
#     [Tiny-K GEMM kernel], all measured against cuBLAS per shape, and fc1's exact
#     gelu in it, Note [Exact gelu in the tiny-K GEMM], not measured) against
#     grove_notiles (GROVE_SMALL_M_COLUMN_TILES=0), grove_nogelu
#     (GROVE_TINY_K_EXACT_GELU=0) and grove_old (all off: session 19's path).
#     The kernel tables attribute each kernel's time.
#  2. TransformerDecoder b1, LLaMA b1: session 19's untimed defaults apart:
#     grove_noregs (GROVE_ROWS_IN_REGISTERS=0), grove_no64 (GROVE_SMALL_M_PAST_32=0),
#     grove_scalar (GROVE_SEQUENCE_ATTENTION_ASYNC=1: scalar cp.async, not vector).
#  Kernel tables per variant (--top 40) and grove's lowered steps.
#  3. gpu_zoo_test's MLP-Mixer cases (b1, f32 and bf16: grove vs eager, cudagraphs == eager).
#  4. ncu on MLP-Mixer b1's first layer: small-M/N kernels and library GEMMs
#     (the tuning table step 1 wrote is read: no tuning launches come first).
set -u
export GROVE_LIBRARY=$PWD/bazel-out/k8-opt/bin/capi/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python
export GROVE_CACHE_DIR=$(mktemp -d)
T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
SUM='^[a-z_0-9]+ +b=|kernels,|C\+\+ call|grove_[a-z0-9]+ +[0-9.]+ us|rror'
timeout 33 python3 benchmarks/torch_zoo.py --no-decode --models mlp_mixer --batches 1,16 \
  --variants grove,grove_notiles,grove_nogelu,grove_old \
  --grove-env notiles:GROVE_SMALL_M_COLUMN_TILES=0,nogelu:GROVE_TINY_K_EXACT_GELU=0,old:GROVE_SMALL_M_COLUMN_TILES=0+GROVE_SMALL_N_GEMM=off+GROVE_TINY_K_GEMM=off \
  --top 40 --repeats 20 --budget-s 25 --lowered "$OUT/lowered" --json "$OUT/zoo_mixer.json" \
  > "$OUT/zoo_mixer.txt" 2>&1
echo "zoo mixer rc=$? $(( $(date +%s) - T0 )) s"
grep -E "$SUM" "$OUT/zoo_mixer.txt" | cut -c1-230 | head -30
T1=$(date +%s)
timeout 20 python3 benchmarks/torch_zoo.py --no-decode --models transformer_decoder,llama \
  --batches 1 --variants grove,grove_noregs,grove_no64,grove_scalar \
  --grove-env noregs:GROVE_ROWS_IN_REGISTERS=0,no64:GROVE_SMALL_M_PAST_32=0,scalar:GROVE_SEQUENCE_ATTENTION_ASYNC=1 \
  --top 40 --repeats 20 --budget-s 12 --lowered "$OUT/lowered" --json "$OUT/zoo_ab.json" \
  > "$OUT/zoo_ab.txt" 2>&1
echo "zoo ab rc=$? $(( $(date +%s) - T1 )) s"
grep -E "$SUM" "$OUT/zoo_ab.txt" | cut -c1-230 | head -24
cp "$GROVE_CACHE_DIR/gemm_tuning.json" "$OUT/" 2>/dev/null
python3 -c "import json,sys; [print('  tuned %-90s grove %6.2f (%d x %d) lib %6.2f' % (k[-90:], e['grove_us'], e.get('grove_rows',0), e.get('grove_columns',1), e['library_us'])) for k,e in sorted(json.load(open(sys.argv[1]))['entries'].items())]" "$OUT/gemm_tuning.json" 2>&1 | head -40
(cd "$OUT" && tar czf logs.tgz lowered zoo_mixer.json zoo_ab.json gemm_tuning.json && rm -rf lowered zoo_mixer.json zoo_ab.json gemm_tuning.json)
T3=$(date +%s)
(cd tests/python && PYTHONPATH=$PYTHONPATH:$PWD/../python_support timeout 14 python3 -m unittest -v \
  gpu_zoo_test.GpuZooTest.test_mlp_mixer_float32 gpu_zoo_test.GpuZooTest.test_mlp_mixer_bfloat16) \
  > "$OUT/gpu_zoo_mixer.txt" 2>&1
echo "gpu_zoo_test mlp_mixer rc=$? $(( $(date +%s) - T3 )) s"; tail -4 "$OUT/gpu_zoo_mixer.txt"
T2=$(date +%s)
timeout 12 ncu --launch-count 7 \
  --kernel-name regex:"gemm|Kernel2|xmma|splitK" \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --metrics smsp__inst_executed.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum \
  python3 benchmarks/zoo_replay.py --model mlp_mixer --batch 1 --calls 3 > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$? $(( $(date +%s) - T2 )) s"
grep -E "^  [a-zA-Z_].*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occ|Cycles Per Issued|inst_executed|op_ld.sum" "$OUT/ncu.txt" | cut -c1-150 | head -70
echo "total $(( $(date +%s) - T0 )) s"
