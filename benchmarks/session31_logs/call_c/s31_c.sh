# Session 31 call C (1 GPU): after 8e8a723 (functionalized draws checked, warm-up copies): the door
# fuzzer's test and a sim run from seed 40145 on PyTorch 2.11, the input-writes and decode tests, the
# new warm-up test, and the core inference survey (every graph's first call now copies its outputs).
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
t() { local name=$1 lim=$2; shift 2; local s=$SECONDS; timeout -k 5 $lim "$@" > $OUT/r/$name.txt 2>&1; echo "$name rc=$? $(grep -E '^(Ran|OK|FAILED)|door fuzz on|programs' $OUT/r/$name.txt | tr '\n' ' ' | cut -c1-200) s=$((SECONDS-s)) at=$((SECONDS-start))"; grep -A18 "^FAIL:\|^ERROR:\|FuzzFailure" $OUT/r/$name.txt | grep -v -i warn | tail -20 | cut -c1-300; }
( cd tests/python
  for x in door_fuzz_test input_writes_test gpu_input_writes_test; do GROVE_CACHE_DIR=/tmp/gc_1 t $x 170 python3 $x.py; done ) > $OUT/lane1.txt 2>&1 &
( cd tests/python
  for x in warm_up_outputs_test static_cache_decode_test gpu_decode_test importer_test training_test; do GROVE_CACHE_DIR=/tmp/gc_2 t $x 150 python3 $x.py; done
  cd ../..; GROVE_CACHE_DIR=/tmp/gc_f t door_fuzz_sim 100 python3 -m grove.door_fuzz --seconds 75 --device sim --seed 40145
) > $OUT/lane2.txt 2>&1 &
( GROVE_CACHE_DIR=/tmp/gc_z t survey 260 python3 benchmarks/zoo_survey.py --budget-s 230 --json $OUT/r/survey.json
  grep -E "^(hf|timm|tv)_|^models" $OUT/r/survey.txt | grep -v " ok .*PyTorch ops: none" | cut -c1-300; grep -c " ok " $OUT/r/survey.txt
) > $OUT/lane3.txt 2>&1 &
wait
cat $OUT/lane1.txt $OUT/lane2.txt $OUT/lane3.txt
tar -C $OUT -czf $OUT/c.tar.gz r lane1.txt lane2.txt lane3.txt && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
