# Session 33 call B (1 GPU): the LLM checkpoint work (f1f776a, 04f84ae) on cuda: decode_loop_test
# (several EOS tokens on the device), decoder_test, rms_norm_linear_test, and against transformers
# 5.17 gpu_transformers_test (checkpoints transformers saved: rope_parameters, llama3 and linear
# scaling, shards, EOS lists, Mistral) and gpu_llm_http_test.
set -u; start=$SECONDS; nvidia-smi --query-gpu=name --format=csv,noheader
mkdir -p $OUT/r
GROVE_TEST_TIMEOUT=300 timeout 560 bash gpu_bundle/run_all.sh > $OUT/r/run_all.txt 2>&1; echo "run_all rc=$?"
grep -v -i "warn" $OUT/r/run_all.txt | grep -E "PASS|FAIL|pass|fail|Error|error|tests:|OK|Ran" | cut -c1-300 | tail -60
echo "done total=$((SECONDS-start))"
