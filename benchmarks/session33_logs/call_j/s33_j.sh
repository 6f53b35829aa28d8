# Session 33 call J (1 GPU): against transformers 5.17, grove generate (cli/grove built at b949c41: --dtype, the device guard)
# on checkpoints transformers saved: v5 config layout, llama3/linear scaling, shards, EOS lists,
# Mistral, Qwen2, Qwen3 (gpu_transformers_test); and the LLM HTTP front (gpu_llm_http_test).
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p .gpu/fb $OUT/r && xz -dc .gpu/grove.xz > .gpu/fb/grove && chmod +x .gpu/fb/grove
export GROVE_BINARY=$PWD/.gpu/fb/grove PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/python:$PWD/tests/python_support:$PWD/tests/serving:$PWD/tests/serving/llm
cd tests/serving/llm
for t in gpu_transformers_test gpu_llm_http_test; do
  timeout 280 python3 $t.py -v > $OUT/r/$t.txt 2>&1; echo "$t rc=$? $(grep -E '^(Ran|OK|FAILED)' $OUT/r/$t.txt | tr '\n' ' ') s=$((SECONDS-start))"
  grep -E " \.\.\. " $OUT/r/$t.txt | cut -c1-200
  grep -A30 "^FAIL:\|^ERROR:" $OUT/r/$t.txt | grep -v '^\s*\^' | cut -c1-300 | tail -50
done
echo "done total=$((SECONDS-start))"
