# Session 30 call D (1 GPU): random draws first (ad53454): the GPU tests, HF BERT and GPT-2 at their
# default dropout trained through the door against eager (draws first on, then off), the training
# survey's core set again (no dropout: nothing may change).
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
( cd tests/python
  for t in gpu_random_draws_test gpu_torch_training_test; do
    GROVE_CACHE_DIR=/tmp/gc_t timeout 150 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"; grep -A25 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v -i warn | tail -25
  done ) &
( GROVE_CACHE_DIR=/tmp/gc_d timeout 150 python3 .gpu/s30_dropout_models.py > $OUT/r/dropout_on.txt 2>&1; echo "dropout_on rc=$? s=$((SECONDS-start))"
  GROVE_DRAWS_FIRST=0 GROVE_CACHE_DIR=/tmp/gc_d0 timeout 150 python3 .gpu/s30_dropout_models.py > $OUT/r/dropout_off.txt 2>&1; echo "dropout_off rc=$? s=$((SECONDS-start))" ) &
( GROVE_CACHE_DIR=/tmp/gc_w timeout 250 python3 benchmarks/zoo_survey.py --train --budget-s 220 --models hf_roberta,hf_opt,timm_deit_tiny,hf_mistral,timm_swin_tiny,tv_googlenet --json $OUT/r/train.json > $OUT/r/train.txt 2>&1; echo "train rc=$? s=$((SECONDS-start))" ) &
wait
for f in dropout_on dropout_off; do echo "== $f"; grep -v -i "warn" $OUT/r/$f.txt | grep -E "step|graph|largest|Error|error" | cut -c1-250 | tail -40; done
grep -E "^(hf|timm|tv)_|^models" $OUT/r/train.txt | cut -c1-250
tar -C $OUT -czf $OUT/d.tar.gz r && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
