# Session 33 call D (2 GPUs of one host): Note [The caller's current device stays as it was]:
# gpu_multi_device_test with session 32's library (before the guard) and with this session's
# (the guard); then DDP through the door (ddp_door.py under torchrun, mlp16x512 b32), the row
# session 30's lease could not measure.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
mkdir -p .gpu/fb $OUT/r
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
for lib in lib_s32 lib; do
  xz -dc .gpu/$lib.xz > .gpu/fb/$lib.so
  (cd tests/python && GROVE_LIBRARY=$PWD/../../.gpu/fb/$lib.so GROVE_CACHE_DIR=/tmp/gc_$lib timeout 150 python3 gpu_multi_device_test.py -v > $OUT/r/multi_device_$lib.txt 2>&1; echo "multi_device $lib rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/multi_device_$lib.txt | tr '\n' ' ') s=$((SECONDS-start))")
  grep -E " \.\.\. |Error:|moved the caller" $OUT/r/multi_device_$lib.txt | cut -c1-250 | head -20
done
export GROVE_LIBRARY=$PWD/.gpu/fb/lib.so GROVE_CACHE_DIR=/tmp/gc_ddp
timeout 200 python3 -m torch.distributed.run --nproc_per_node 2 benchmarks/ddp_door.py \
  --cases mlp16x512_b32 --iters 40 --deadline-s 160 \
  --variants torch_eager,torch_reduce_overhead,grove_ddp,grove_step,grove \
  --json $OUT/r/ddp_door_2gpu.json > $OUT/r/ddp_door_2gpu.txt 2>&1; echo "ddp_door rc=$? s=$((SECONDS-start))"
grep -v "Warning\|warnings.warn\|return func\|^W1\|\*\*\*\*\|OMP_NUM_THREADS\|record function" $OUT/r/ddp_door_2gpu.txt | tail -25 | cut -c1-250
echo "done total=$((SECONDS-start))"
