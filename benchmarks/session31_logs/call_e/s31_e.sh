# Session 31 call E (1 GPU): after a4a87f8 + host tensors: the door's GPU tests, the door fuzzer, the
# input-writes/warm-up/decode tests on 2.11, the new user's probe again, the core inference survey.
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $OUT/r/$name.txt 2>&1; echo "$name rc=$? $(grep -E '^(Ran|OK|FAILED)|door fuzz: ' $OUT/r/$name.txt | tr '\n' ' ' | cut -c1-200) s=$((SECONDS-s)) at=$((SECONDS-start))"; grep -A18 "^FAIL:\|^ERROR:\|FuzzFailure" $OUT/r/$name.txt | grep -v -i warn | tail -20 | cut -c1-300; }
( cd tests/python
  for x in gpu_torch_backend_test gpu_torch_training_test door_fuzz_test door_call_test; do GROVE_CACHE_DIR=/tmp/gc_1 t $x 170 python3 $x.py; done ) > $OUT/lane1.txt 2>&1 &
( cd tests/python
  for x in gpu_zoo_test input_writes_test warm_up_outputs_test gpu_input_writes_test gpu_decode_test static_cache_decode_test handout_test; do GROVE_CACHE_DIR=/tmp/gc_2 t $x 170 python3 $x.py; done
) > $OUT/lane2.txt 2>&1 &
( GROVE_CACHE_DIR=/tmp/gc_p t probe 200 python3 .gpu/s31_probe.py; sed -n '/==== summary/,$p' $OUT/r/probe.txt | cut -c1-300
  GROVE_CACHE_DIR=/tmp/gc_z t survey 250 python3 benchmarks/zoo_survey.py --budget-s 220 --json $OUT/r/survey.json
  grep -E "^(hf|timm|tv)_|^models" $OUT/r/survey.txt | grep -v " ok .*PyTorch ops: none" | cut -c1-300; grep -c " ok " $OUT/r/survey.txt
) > $OUT/lane3.txt 2>&1 &
wait
cat $OUT/lane1.txt $OUT/lane2.txt $OUT/lane3.txt
tar -C $OUT -czf $OUT/e.tar.gz r lane1.txt lane2.txt lane3.txt && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
