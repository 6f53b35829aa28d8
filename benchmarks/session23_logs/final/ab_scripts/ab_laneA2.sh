# F2 lane A (GPU 0) A/B: wt-zoo's [K,N] small-M tiled GEMM (off by default) on GPT-2 b1.
TAILN=20 ab zoo_kn 45 python3 benchmarks/torch_zoo.py --cases gpt2:1 --variants torch_reduce_overhead,grove,grove_kn --grove-env kn:GROVE_SMALL_M_TILED_KN=1 --top 40 --repeats 20 --budget-s 25 --json $OUT/ab/torch_zoo_kn_ab.json
