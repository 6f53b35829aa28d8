#!/usr/bin/env bash
# wt-door r1 (<= 100 s, one H100): where a training step through the door spends its host time
# (issue 34). benchmarks/door_stages.py per model and variant in parallel processes: the stages'
# host time (zero_grad, model, loss, backward, optimizer), grove's C calls, step wall time,
# gradients stolen or copied by AccumulateGrad, and per variant a cProfile listing plus
# torch.profiler's host-event table (counts of ATen calls and autograd nodes per step).
set -u
PY=${PYTHON:-python3}
export GROVE_LIBRARY=$PWD/lib/libgrove.so
export PYTHONPATH=$PWD/python:$PWD/tests/python:$PWD/tests/python_support
export GROVE_CACHE_DIR=$(mktemp -d) PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
mkdir -p "$OUT/prof"
run() { # label, timeout, env/args...
  local label=$1 limit=$2; shift 2
  ( timeout $limit env "$@" > "$OUT/$label.txt" 2>&1; echo "== $label rc=$? t=$(el)" >> "$OUT/$label.txt" ) &
}
DS="$PY benchmarks/door_stages.py --steps 100 --profile $OUT/prof --cpu-table"
run mlp 88 $DS --models mlp16x512_b32 --variants grove,floor,torch_reduce_overhead --json $OUT/mlp.json
run gpt 88 $DS --models gpt4x256_b8_t32 --variants grove,floor,torch_reduce_overhead --json $OUT/gpt.json
run vit_grove 88 $DS --models vit_tiny --optimizer sgd --variants grove,floor --json $OUT/vit_grove.json
run vit_ro 88 $DS --models vit_tiny --optimizer sgd --variants torch_reduce_overhead --json $OUT/vit_ro.json
run tl_mlp 88 $PY benchmarks/door_timeline.py --model mlp16x512_b32 --variants grove,torch_reduce_overhead,grove+direct,grove+GROVE_DOOR_APPLY=python --rounds 5 --steps 5 --profile all --out $OUT/tl_mlp --compile-deadline-s 60 --deadline-s 84
run vit_adamw 88 $DS --models vit_tiny --optimizer adamw --variants grove --json $OUT/vit_adamw.json
wait
echo "all done t=$(el)"
grep -v -E "UserWarning|warnings.warn" "$OUT/tl_mlp.txt" | grep -E "us per step|median|/ grove|^== |rc=" | head -12
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in ("mlp", "gpt", "vit_grove", "vit_ro", "vit_adamw"):
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
            print(name, row.get("variant"), row["error"][:150])
            continue
        print("%s %s %s zg %.0f model %.0f loss %.0f bw %.0f opt %.0f sum %.0f C %.0f step %.0f"
              " grads stolen/copied %s/%s" % (
                  row["model"][:8], row["variant"], row["optimizer"], row["host_zero_grad_us"],
                  row["host_model_us"], row["host_loss_us"], row["host_backward_us"],
                  row["host_optimizer_us"], row["host_sum_us"], row["grove_c_calls_us"],
                  row["step_us"], row.get("grads_uncopied"), row.get("grads_copied")))
PY
