#!/usr/bin/env bash
# wt-door r2 (<= 80 s, one GPU): the door's training step against its floor and reduce-overhead,
# interleaved in one process per model (door_timeline.py: blocks of 20 steps, round by round), the
# C apply A/B (GROVE_DOOR_APPLY=python is the old path), GROVE_DOOR_GRADIENTS=direct for context;
# the host cost of grove's graph launches with programmatic launch off vs on (ViT-tiny SGD, one
# process each); torch_backend.py --train's headline rows; door_function_test on PyTorch 2.x.
set -u
PY=${PYTHON:-python3}
export GROVE_LIBRARY=$PWD/lib/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
export PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
mkdir -p "$OUT/prof_on" "$OUT/prof_off"
run() { # label, timeout, env/args...
  local label=$1 limit=$2; shift 2
  ( timeout $limit env GROVE_CACHE_DIR=$(mktemp -d) "$@" > "$OUT/$label.txt" 2>&1; echo "== $label rc=$? t=$(el)" >> "$OUT/$label.txt" ) &
}
TL="$PY benchmarks/door_timeline.py --profile none --deadline-s 70 --compile-deadline-s 45"
V="grove,floor,torch_reduce_overhead,grove+GROVE_DOOR_APPLY=python"
run tl_mlp 76 $TL --model mlp16x512_b32 --variants $V,grove+direct --rounds 12
run tl_gpt 76 $TL --model gpt4x256_b8_t32 --variants $V,grove+direct --rounds 12
run tl_vit 76 $TL --model vit_tiny --optimizer sgd --variants $V --rounds 8
DS="$PY benchmarks/door_stages.py --steps 100 --cpu-table --models vit_tiny --optimizer sgd --variants grove"
run vit_pdl_on 70 $DS --profile $OUT/prof_on --json $OUT/vit_pdl_on.json
run vit_pdl_off 70 GROVE_PROGRAMMATIC_LAUNCH=0 $DS --profile $OUT/prof_off --json $OUT/vit_pdl_off.json
run train 76 $PY benchmarks/torch_backend.py --train --models mlp16x512_b32,gpt4x256_b8_t32 --variants torch_reduce_overhead,floor,grove,grove_optim_in_backward,grove_step --repeats 100 --json $OUT/torch_backend_train.json
( cd tests/python && timeout 60 $PY door_function_test.py > "$OUT/door_function_test.txt" 2>&1; echo "== door_function_test rc=$?" >> "$OUT/door_function_test.txt" ) &
wait
echo "all done t=$(el)"
for f in tl_mlp tl_gpt tl_vit; do
  grep -E "us per step|x of grove|not compiled|failed|losses of|^== " "$OUT/$f.txt" | cut -c1-150
done
grep -E "^(mlp|gpt)[^ ]* [a-z_]+: |r-o|^== " "$OUT/train.txt" | cut -c1-200
tail -3 "$OUT/door_function_test.txt"
$PY - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in ("vit_pdl_on", "vit_pdl_off"):
    path = os.path.join(out, name + ".txt")
    if not os.path.exists(path):
        continue
    for line in open(path):
        if line.startswith("== "):
            print(line.strip())
        if not line.startswith("{"):
            continue
        row = json.loads(line)
        if "error" in row:
            print(name, row["error"][:150])
            continue
        print("%s zg %.0f model %.0f loss %.0f bw %.0f opt %.0f sum %.0f C %.0f step %.0f" % (
            name, row["host_zero_grad_us"], row["host_model_us"], row["host_loss_us"],
            row["host_backward_us"], row["host_optimizer_us"], row["host_sum_us"],
            row["grove_c_calls_us"], row["step_us"]))
PY
grep "cudaGraphLaunch " "$OUT"/prof_*/*.txt | head -4 | cut -c1-140
