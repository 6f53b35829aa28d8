# Session 23 final lease, call 1a (2 GPUs of one host): serving alone (all cores, GPU 0): serve_http then serve.
set -u; start=$SECONDS
L=$OUT/gpu_logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/nvidia_smi.txt; date -u '+%Y-%m-%d %H:%M UTC' > $OUT/started.txt
mkdir -p /tmp/bs && tar -C /tmp/bs -xJf gpu_bundle_serve/payload.tar.xz || echo "serve unpack failed"
B=/tmp/bs/grove; export LD_LIBRARY_PATH=$B/_syslib
T=$OUT/steps.tsv; : > $T
step() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $L/$name.txt 2>&1; local rc=$?; printf 'step\t%s\t%s\t%s\t%s\t%s\n' $name "$([ $rc = 0 ] && echo ok || ([ $rc = 124 ] && echo "timed out" || echo "failed (exit $rc)"))" $rc $((SECONDS-s)) $lim >> $T; echo "== $name rc=$rc s=$((SECONDS-s)) total=$((SECONDS-start))"; grep -v -i "warn" $L/$name.txt | tail -${TAILN:-8} | cut -c1-230; }
(cd $B && TAILN=26 step serve_http 150 ./benchmarks/serve_http/serve_http --device cuda --max-batches 16,64 --encodings json,binary,grpc --rates 320000,640000 --duration-ms 700 --json $L/serve_http.json)
(cd $B && TAILN=8 step serve 45 ./benchmarks/serve/serve --device cuda --models benchmarks/models --max-batches 16,64 --rates 320000,640000,1000000 --submitters 3 --duration-ms 400 --json $L/serve.json)
date -u '+%Y-%m-%d %H:%M UTC' > $OUT/finished.txt
tar -C $OUT -czf $OUT/final1a.tar.gz gpu_logs steps.tsv started.txt finished.txt nvidia_smi.txt && rm -rf $L
echo "done total=$((SECONDS-start))"
