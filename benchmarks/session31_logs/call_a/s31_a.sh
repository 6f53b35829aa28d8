# Session 31 call A (1 GPU): the owed cuda runs at the final commit of session 30 plus the warm-up
# copies (Note [Warm-up outputs leave the pool]); the new test before (.gpu/oldpy = HEAD's python)
# and after; Wav2Vec2-Conformer training; BERT's attention-dropout diagnosis; the door fuzzer on sim
# from seed 40145.
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
OLD=$PWD/.gpu/oldpy/python:$PWD/tests/python_support:$PWD/tests/python
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $OUT/r/$name.txt 2>&1; echo "$name rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$name.txt | tr '\n' ' ') s=$((SECONDS-s)) at=$((SECONDS-start))"; grep -A18 "^FAIL:\|^ERROR:" $OUT/r/$name.txt | grep -v -i warn | tail -20 | cut -c1-300; }
( cd tests/python
  for x in door_fuzz_test gpu_zoo_test gpu_random_draws_test gpu_torch_training_test; do GROVE_CACHE_DIR=/tmp/gc_1 t $x 170 python3 $x.py; done ) > $OUT/lane1.txt 2>&1 &
( cd tests/python
  GROVE_CACHE_DIR=/tmp/gc_2 t warm_up_new 100 python3 warm_up_outputs_test.py -v
  PYTHONPATH=$OLD GROVE_CACHE_DIR=/tmp/gc_2o t warm_up_old 100 python3 warm_up_outputs_test.py -v
  cd ../..
  GROVE_CACHE_DIR=/tmp/gc_w t wav2vec2 200 python3 benchmarks/zoo_survey.py --budget-s 170 --json $OUT/r/w.json --train --models hf_wav2vec2_conformer
  grep -E "^(hf|timm|tv)_|^models" $OUT/r/wav2vec2.txt | cut -c1-400
  GROVE_CACHE_DIR=/tmp/gc_t t training_fuzz_test 150 python3 tests/python/training_fuzz_test.py
) > $OUT/lane2.txt 2>&1 &
( GROVE_CACHE_DIR=/tmp/gc_b t bert_attn 300 python3 .gpu/s31_bert_attn.py
  grep -v -i "warn" $OUT/r/bert_attn.txt | grep -E "choice|graph ops|largest|Error" | cut -c1-300 | head -40
  GROVE_CACHE_DIR=/tmp/gc_f t door_fuzz_sim 120 python3 -m grove.door_fuzz --seconds 90 --device sim --seed 40145
  tail -5 $OUT/r/door_fuzz_sim.txt | cut -c1-300
) > $OUT/lane3.txt 2>&1 &
wait
cat $OUT/lane1.txt $OUT/lane2.txt $OUT/lane3.txt
tar -C $OUT -czf $OUT/a.tar.gz r lane1.txt lane2.txt lane3.txt && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
