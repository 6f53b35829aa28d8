# Session 32 call E (1 GPU): the inference survey, core and wide sets, after this session's importer
# changes (float64 and narrow integers to PyTorch, empty values, new converters): no model may now
# leave more ops to PyTorch or differ. Eight lanes sharing the GPU and 16 cores.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/lib.xz > .gpu/fb/libgrove.so
export GROVE_LIBRARY=$PWD/.gpu/fb/libgrove.so PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/python
python3 - > $OUT/r/lanes.txt <<'PY'
import sys; sys.path.insert(0, "benchmarks")
from zoo_survey_models import MODELS
from zoo_survey_wide import WIDE_MODELS
core = [n for n, _ in MODELS]; wide = [n for n, _ in WIDE_MODELS]
for lane in range(3): print("core", ",".join(core[lane::3]))
for lane in range(5): print("wide", ",".join(wide[lane::5]))
PY
(GROVE_CACHE_DIR=/tmp/gc_enc timeout 120 python3 .gpu/s32_enc.py > $OUT/r/enc.txt 2>&1; echo "enc rc=$?") &
i=0
while read set names; do
  (GROVE_CACHE_DIR=/tmp/gc_s$i timeout 300 python3 benchmarks/zoo_survey.py --set $set --models $names --budget-s 250 > $OUT/r/survey_$i.txt 2>&1; echo "lane $i ($set) rc=$?") &
  i=$((i+1))
done < $OUT/r/lanes.txt
wait
cat $OUT/r/survey_*.txt | grep -E '^(hf|timm|tv)_' | grep -v -E ' ok .*PyTorch ops: none' | cut -c1-260
echo "rows: $(cat $OUT/r/survey_*.txt | grep -c -E '^(hf|timm|tv)_'), ok and whole: $(cat $OUT/r/survey_*.txt | grep -E '^(hf|timm|tv)_' | grep -c -E ' ok .*PyTorch ops: none')"

grep -v -i warn $OUT/r/enc.txt | tail -12
echo "done total=$((SECONDS-start))"
