# Session 30 call B (1 GPU): the DDP door tests after the fake-tensor fix (b2f1ee1, world of one:
# dynamo's DDP optimizer); ViT-B/16 trained through the door after the multi-head attention fix
# (b0aacb4); where HF static-cache generate's time goes through grove (cProfile), and eager's.
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
( GROVE_CACHE_DIR=/tmp/gc_d timeout 150 python3 .gpu/s30_decode_prof.py grove > $OUT/r/decode_prof.txt 2>&1; echo "decode_prof rc=$? s=$((SECONDS-start))"
  GROVE_CACHE_DIR=/tmp/gc_d timeout 100 python3 .gpu/s30_decode_prof.py torch_eager > $OUT/r/decode_prof_eager.txt 2>&1; echo "decode_prof_eager rc=$? s=$((SECONDS-start))" ) &
( cd tests/python && GROVE_CACHE_DIR=/tmp/gc_t timeout 300 python3 gpu_ddp_door_test.py > $OUT/r/gpu_ddp_door_test.txt 2>&1; echo "gpu_ddp_door_test rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/gpu_ddp_door_test.txt | tr '\n' ' ') s=$((SECONDS-start))"; grep -A12 "^FAIL:\|^ERROR:" $OUT/r/gpu_ddp_door_test.txt | grep -v -i warn | tail -30 ) &
( GROVE_CACHE_DIR=/tmp/gc_v timeout 280 python3 benchmarks/zoo_survey.py --train --budget-s 250 --models tv_vit_b_16 --json $OUT/r/vit_train.json > $OUT/r/vit_train.txt 2>&1; echo "vit_train rc=$? s=$((SECONDS-start))"; grep -E "^tv_|^    in PyTorch" $OUT/r/vit_train.txt | cut -c1-300 ) &
wait
grep -E "tokens/s" $OUT/r/decode_prof*.txt
grep -v -i warn $OUT/r/decode_prof.txt | grep -A75 "tokens/s" | cut -c1-160 | head -100
tar -C $OUT -czf $OUT/b.tar.gz r && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
