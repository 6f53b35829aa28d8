# Session 20 lead experiment (one H100): why is grove's C call (cudaGraphLaunch, the device idle) 45-72 us on
# BERT/LLaMA/TransformerDecoder at batch 1 but 14 us on GPT-2 (wt-door r1)? door_split on bert and llama, one
# process per setting: defaults; programmatic launch off; grove's small-M GEMMs off (library GEMMs instead);
# eager module loading.
set -u; start=$SECONDS
mkdir -p .gpu/fb && tar -xJf .gpu/flib.tar.xz -C .gpu/fb || echo "flib unpack failed"
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
nvidia-smi --query-gpu=name --format=csv,noheader
for s in X=1 GROVE_PROGRAMMATIC_LAUNCH=0 GROVE_SMALL_M_GEMM=off CUDA_MODULE_LOADING=EAGER; do
  tag=${s%%=*}_${s##*=}; mkdir -p $OUT/$tag
  env $s GROVE_CACHE_DIR=/tmp/gc_$tag timeout 40 python3 benchmarks/door_split.py --zoo bert,llama --turns 5 --no-trace --out $OUT/$tag > $OUT/$tag.txt 2>&1
  echo "== $s rc=$? t=$((SECONDS-start))"
  grep -E "^(bert|llama)_b1 |kernels|cudaGraphLaunch" $OUT/$tag.txt | cut -c1-300 | head -8
done
