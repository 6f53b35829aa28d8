# Session 20 lead diagnosis (one H100 host, 16 cores): (1) held connections on a 16-core host (the final lease's
# 2-GPU host, 32 cores, gave JSON/binary p99 7-22x held vs alone; session 18's 16-core H100 met <= 2x);
# (2) HF static-cache decode through the door with nothing beside it (the final lease ran it beside lane A: 1.67x eager).
set -u; start=$SECONDS
mkdir -p /tmp/dl && tar -C /tmp/dl -xJf .gpu/diag_lite.tar.xz && mkdir -p .gpu/fb && tar -xJf .gpu/flib.tar.xz -C .gpu/fb
nvidia-smi --query-gpu=name --format=csv,noheader; nproc
(cd /tmp/dl/grove && LD_LIBRARY_PATH=$PWD/_syslib timeout 60 ./benchmarks/serve_http/serve_http --device cuda --max-batches 16 --encodings json,binary --backends cudagraphs --rates 32000 --held-rates 32000 --duration-ms 700 > $OUT/held.txt 2>&1; echo "held rc=$? t=$((SECONDS-start))"); sed -n '/p99 with/,$p' $OUT/held.txt
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
timeout 75 python3 benchmarks/torch_zoo.py --decode --no-zoo --decode-models hf_llama_static_cache --variants torch_eager,grove --decode-child-s 35 --budget-s 70 --json $OUT/hf_decode.json > $OUT/hf_decode.txt 2>&1; echo "hf rc=$? t=$((SECONDS-start))"
grep -E "tok/s|recordings" $OUT/hf_decode.txt | cut -c1-200
