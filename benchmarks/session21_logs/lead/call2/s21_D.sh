# Session 21 call 2 (2 GPUs): native DP bucket-size probe (mlp16x512), data_parallel_test and gpu_ddp_door_test on 2 GPUs,
# and the exit abort with the grove-free torch_aot_eager variant.
set -u; start=$SECONDS
nvidia-smi -L; nproc
mkdir -p /tmp/s21 && tar -C /tmp/s21 -xJf .gpu/s21bin.tar.xz && tar -C /tmp/s21 -xJf .gpu/s21dp.tar.xz; B=/tmp/s21/grove; D=/tmp/s21/dp
export LD_LIBRARY_PATH=$D/_syslib
export GROVE_LIBRARY=$B/libgrove.so PYTHONUNBUFFERED=1 GROVE_CACHE_DIR=/tmp/grove_cache_d
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python:$PWD/benchmarks
mkdir -p $OUT/d
for kib in 4096 1024 2048 512 8192 4096; do
  timeout 25 $D/data_parallel --device cuda --gpus 1,2 --backends cudagraphs --overlap on --cases mlp16x512 --iters 40 --warmup 5 --bucket-kib $kib --models benchmarks/models > $OUT/d/dp_$kib.txt 2>&1
  echo "kib=$kib rc=$? $(grep -E 'mlp16x512' $OUT/d/dp_$kib.txt | tr -s ' ' | tr '\n' '|' | cut -c1-300)"
done
(cd $D && timeout 60 ./data_parallel_test > $OUT/d/data_parallel_test.txt 2>&1; echo "data_parallel_test rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/d/data_parallel_test.txt | tr '\n' ' ')")
timeout 70 python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29621 benchmarks/ddp_door.py --cases mlp16x512_b32 --iters 20 --variants torch_eager,torch_aot_eager --json $OUT/d/aot.json > $OUT/d/aot_eager_exit.txt 2>&1; echo "ddp_door torch_aot_eager rc=$?"; grep -E "INTERNAL ASSERT|THPVariable|Abort|us/step|mlp16" $OUT/d/aot_eager_exit.txt | head -8 | cut -c1-200
(cd tests/python && timeout 150 python3 gpu_ddp_door_test.py > $OUT/d/gpu_ddp_door_test.txt 2>&1; echo "gpu_ddp_door_test rc=$? $(tail -4 $OUT/d/gpu_ddp_door_test.txt | tr '\n' ' ' | cut -c1-300)")
tar -C $OUT -czf $OUT/d.tar.gz d && rm -rf $OUT/d
echo "done total=$((SECONDS-start))"
