# Session 21 r1 (2 GPUs of one host): helper requests (.gpu/r1/NAME.tar.xz); SOLO runs alone first, then lanes on GPU 0 and GPU 1;
# then the native data-parallel NCCL sweep (mlp16x512, 2 GPUs). Usage: SOLO="a" LANE0="b c" LANE1="d e" bash .gpu/r1_run.sh
set -u; start=$SECONDS
R=/tmp/results; mkdir -p $R; nvidia-smi -L; nproc
mkdir -p /tmp/rq && tar -C /tmp/rq -xJf .gpu/r1all.tar.xz || echo "unpack failed"
one() { local name=$1; [ -d /tmp/rq/$name ] || { echo "$name: missing"; return; }
  if [ -f /tmp/rq/$name/MAINLIB ]; then mkdir -p /tmp/rq/$name/flib && tar -C /tmp/rq/$name/flib -xJf .gpu/flib.tar.xz; fi
  mkdir -p $R/$name; local s=$SECONDS
  (cd /tmp/rq/$name && OUT=$R/$name timeout ${REQ_LIMIT:-100} bash request.sh) > $R/$name/stdout.txt 2>&1
  echo "== $name rc=$? s=$((SECONDS-s)) at=$((SECONDS-start))"; tail -c 1500 $R/$name/stdout.txt; }
for n in ${SOLO:-}; do one $n; done
( export CUDA_VISIBLE_DEVICES=0; for n in ${LANE0:-}; do one $n; done ) > /tmp/lane0.txt 2>&1 &
( export CUDA_VISIBLE_DEVICES=1; for n in ${LANE1:-}; do one $n; done ) > /tmp/lane1.txt 2>&1 &
wait; cat /tmp/lane0.txt /tmp/lane1.txt
if [ -d /tmp/rq/dp ]; then
  D=/tmp/rq/dp; mkdir -p $R/dp
  for s in base NCCL_MAX_CTAS=2 NCCL_MAX_CTAS=4 NCCL_MAX_CTAS=8 NCCL_PROTO=Simple NCCL_PROTO=LL128 NCCL_PROTO=LL NCCL_ALGO=Tree kib=16384 kib=32768 kib=8192,NCCL_MAX_CTAS=4 base; do
    [ $((SECONDS - start)) -lt ${DP_UNTIL:-400} ] || break
    kib=4096; envs=(); for kv in ${s//,/ }; do case $kv in base) ;; kib=*) kib=${kv#kib=} ;; *) envs+=($kv) ;; esac; done
    env LD_LIBRARY_PATH=$D/_syslib "${envs[@]}" timeout 25 $D/data_parallel --device cuda --gpus $([ $s = base ] && echo 1,2 || echo 2) --backends cudagraphs --overlap on --cases mlp16x512 --iters 40 --warmup 5 --bucket-kib $kib --models benchmarks/models > $R/dp/$s.txt 2>&1
    echo "dp $s rc=$? $(grep -E '^mlp16x512' $R/dp/$s.txt | tr -s ' ' | cut -d' ' -f1-7 | tr '\n' '|')"
  done
fi
tar -C $R -czf $OUT/results.tar.gz .
echo "done total=$((SECONDS-start))"
