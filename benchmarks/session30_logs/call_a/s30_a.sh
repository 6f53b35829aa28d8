# Session 30 call A (1 GPU), prepared in session 29: what ran on sim only after session 29's call
# E (as_strided gathers, the door fuzzer's split seeds, TrainingGraphs' fallback search, the
# runner's bound bases, the refactored GPU training tests); Longformer training under verify mode
# with its backward verified too; ViT-B/16's attention graph. Rebuild .gpu/lib.xz first.
set -u; start=$SECONDS
mkdir -p $OUT/r; nvidia-smi --query-gpu=name --format=csv,noheader; date -u
mkdir -p .gpu/fb && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
lim=${LIM:-420}
lane() { local tag=$1; local l=$2; shift 2; GROVE_CACHE_DIR=/tmp/gc_$tag timeout $l python3 benchmarks/zoo_survey.py --budget-s $((l - 60)) --json $OUT/r/$tag.json "$@" > $OUT/r/$tag.txt 2>&1; echo "$tag rc=$? s=$((SECONDS-start))"; }
lane w0 $lim --train --models hf_longformer,timm_sequencer2d_s,hf_deepseek_v3,tv_vit_b_16 &
( GROVE_VERIFY=1 GROVE_CACHE_DIR=/tmp/gc_v timeout 200 python3 benchmarks/zoo_survey.py --train --models hf_longformer,hf_roberta,hf_mistral,timm_deit_tiny --json $OUT/r/verify.json > $OUT/r/verify.txt 2>&1; echo "verify rc=$? s=$((SECONDS-start))" ) &
( GROVE_CACHE_DIR=/tmp/gc_c timeout 150 python3 benchmarks/converters_on_gpu.py > $OUT/r/converters.txt 2>&1; echo "converters rc=$? s=$((SECONDS-start))"
  timeout 120 python3 .gpu/s30_vit_attention.py > $OUT/r/vit_attention.txt 2>&1; echo "vit rc=$?" ) &
( cd tests/python
  for t in door_fuzz_test gpu_torch_training_test gpu_torch_backend_test gpu_zoo_test; do
    GROVE_CACHE_DIR=/tmp/gc_t timeout 150 python3 $t.py > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)|door fuzz on' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"; grep -A30 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v -i warn | tail -14
  done ) &
wait
grep -E " FAIL |^torch " $OUT/r/converters.txt | cut -c1-300
grep -E "^NODE|^targets" $OUT/r/vit_attention.txt | cut -c1-400 | head -10
for f in w0 verify; do echo "== $f"; grep -E "^(hf|timm|tv)_|^    in PyTorch|^models|VerifyError" $OUT/r/$f.txt | cut -c1-400; done
tar -C $OUT -czf $OUT/a.tar.gz r && rm -rf $OUT/r
echo "done total=$((SECONDS-start))"
