# Session 30 lease, call 1 (2 GPUs of one host): serving alone (GPU 0), then two lanes, one per GPU:
# lane A (GPU 0) the C++ benchmarks, host copies, decode, decode load, torch_backend --train;
# lane B (GPU 1) torch_zoo. Binaries and libgrove.so from gpu_bundle_bench (built at its commit.txt).
set -u; start=$SECONDS
L=$OUT/gpu_logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/nvidia_smi.txt; date -u '+%Y-%m-%d %H:%M UTC' > $OUT/started.txt
mkdir -p /tmp/bb && tar -C /tmp/bb -xJf gpu_bundle_bench/payload.tar.xz || echo "bench unpack failed"
B=/tmp/bb/grove; export LD_LIBRARY_PATH=$B/_syslib
mkdir -p .gpu/fb && cp $B/libgrove.so .gpu/fb/libgrove.so
T=$OUT/steps.tsv; : > $T
step() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $L/$name.txt 2>&1; local rc=$?; printf 'step\t%s\t%s\t%s\t%s\t%s\n' $name "$([ $rc = 0 ] && echo ok || ([ $rc = 124 ] && echo "timed out" || echo "failed (exit $rc)"))" $rc $((SECONDS-s)) $lim >> $T; echo "== $name rc=$rc s=$((SECONDS-s)) total=$((SECONDS-start))"; grep -v -i "warn\|call_func_at_runtime\|^\[transformers\]\|^W11\|Loading weights" $L/$name.txt | tail -${TAILN:-8} | cut -c1-230; }
export -f step; export L T start OUT
echo "serving alone from $((SECONDS-start)) s"
(cd $B && CUDA_VISIBLE_DEVICES=0 TAILN=26 step serve_http 150 ./benchmarks/serve_http/serve_http --device cuda --max-batches 16,64 --encodings json,binary,grpc --rates 320000,640000 --duration-ms 700 --json $L/serve_http.json)
(cd $B && CUDA_VISIBLE_DEVICES=0 TAILN=8 step serve 45 ./benchmarks/serve/serve --device cuda --models benchmarks/models --max-batches 16,64 --rates 320000,640000,1000000 --submitters 3 --duration-ms 400 --json $L/serve.json)
sed -i '/serve_http\/serve_http$\|serve\/serve$\|decode\/decode$/d' gpu_bundle_bench/benchmarks.txt
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 GROVE_CACHE_DIR=/tmp/grove_cache_f
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
export GROVE_TEST_TIMEOUT=60 GROVE_PYTHON_BENCHMARKS=0
( export CUDA_VISIBLE_DEVICES=0
  TAILN=4 step benchmarks 190 bash gpu_bundle_bench/run_all.sh --filter // --benchmarks
  TAILN=2 step host_copies 15 env GROVE_CUDAGRAPHS_GRAPH_INPUT_COPIES=0 GROVE_BENCHMARK_SUFFIX=_host_copies bash gpu_bundle_bench/run_all.sh --filter // --benchmarks=benchmarks/backend_latency/
  TAILN=14 step decode 60 $B/benchmarks/decode/decode --configs 1b,small --batches 1,64 --repeats 3 --json $L/decode.json
  TAILN=6 step decode_load 50 $B/benchmarks/decode/decode load --config 1b --requests 256 --rate 400 --buckets 16,32,64 --prefills-per-step 2 --prefill-chunk 32 --json $L/decode_load.json
  TAILN=30 step torch_backend_train 130 python3 benchmarks/torch_backend.py --train --repeats 40 --models mlp16x512_b32,gpt4x256_b8_t32 --variants torch_reduce_overhead,cuda_graph,grove,grove_optim,grove_optim_in_backward,grove_step,grove_step_sgd --json $L/torch_backend_train.json
) > $OUT/laneA.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1
  TAILN=40 step torch_zoo 245 python3 benchmarks/torch_zoo.py --no-decode --budget-s 225 --repeats 40 --top 3 --json $L/torch_zoo.json
) > $OUT/laneB.txt 2>&1 &
wait
cat $OUT/laneA.txt $OUT/laneB.txt | cut -c1-230 | tail -100
date -u '+%Y-%m-%d %H:%M UTC' > $OUT/finished.txt
tar -C $OUT -czf $OUT/L1.tar.gz gpu_logs steps.tsv started.txt finished.txt nvidia_smi.txt laneA.txt laneB.txt && rm -rf $L
echo "done total=$((SECONDS-start))"
