#!/usr/bin/env bash
# wt-door r2 (80 s): issue 33's host side, batch 1, A/B in one process.
# New since r1: bound nn.Parameters are checked by dynamo's DATA_PTR_MATCH guards
# instead of grove's per-call Python check (Note [Parameters checked by dynamo's
# guards]; default GROVE_DOOR_STATIC_CHECK=guards). r1 timed that check at 9-17 us
# of a door call (door_no_static_check).
#  1. torch_zoo BERT, LLaMA, GPT-2 at b1: reduce-overhead, grove (guards), grove_map
#     (GROVE_DOOR_STATIC_CHECK=map: the old default), grove_torch (PyTorch's check),
#     in turns; host_us per variant.
#  2. In the background (nice, sim + dynamo on CPU): door_call_test (the new guard test).
#  3. Then, as time allows: gpu_torch_backend_test, gpu_zoo_test for gpt2/bert/llama f32.
set -u
HERE=$PWD
export GROVE_LIBRARY=$HERE/lib/libgrove.so
export PYTHONPATH=$HERE/python:$HERE/tests/python:$HERE/tests/python_support
export LD_LIBRARY_PATH=$HERE/lib/_syslib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GROVE_CACHE_DIR=$(mktemp -d) PYTHONUNBUFFERED=1
T0=$(date +%s)
nvidia-smi -L | tee "$OUT/DEVICE.txt"; echo "commit $(cat COMMIT)" | tee -a "$OUT/DEVICE.txt"
(cd tests/python && GROVE_CACHE_DIR=$(mktemp -d) timeout -k 3 40 nice -n 15 python3 door_call_test.py -v \
   > "$OUT/door_call_test.txt" 2>&1; echo "door_call_test rc=$? $(( $(date +%s) - T0 )) s" >> "$OUT/door_call_test.txt") &
TESTS=$!
timeout -k 3 52 python3 benchmarks/torch_zoo.py --cases bert:1,llama:1,gpt2:1 \
  --variants torch_reduce_overhead,grove,grove_map,grove_torch \
  --grove-env map:GROVE_DOOR_STATIC_CHECK=map,torch:GROVE_DOOR_STATIC_CHECK=torch \
  --no-kernels --repeats 160 --budget-s 40 --json "$OUT/zoo_b1.json" > "$OUT/zoo_b1.txt" 2>&1
echo "zoo b1 rc=$? $(( $(date +%s) - T0 )) s"
grep -v -E "^\[transformers\]|UserWarning|warnings.warn|_warn_once" "$OUT/zoo_b1.txt" | cut -c1-150 | tail -n 24
python3 - "$OUT/zoo_b1.json" <<'EOF'
import json, sys
for row in json.load(open(sys.argv[1])):
    cells = []
    for v in ("torch_reduce_overhead", "grove", "grove_map", "grove_torch"):
        e = row.get(v, {})
        if "median_us" in e:
            cells.append("%s %.1f (host %.1f)" % (v, e["median_us"], e.get("host_us") or 0))
        elif e:
            cells.append("%s %s" % (v, str(e.get("error", ""))[:60]))
    print(row["model"], row["batch"], "; ".join(cells))
EOF
wait $TESTS
grep -E "^(Ran|OK|FAILED)|door_call_test rc|^(FAIL|ERROR):" "$OUT/door_call_test.txt" | head -6
L=$(( 78 - ($(date +%s) - T0) ))
if [ $L -ge 8 ]; then
  (cd tests/python && timeout -k 2 $L python3 -m unittest gpu_torch_backend_test gpu_zoo_test.GpuZooTest.test_gpt2_float32 \
     gpu_zoo_test.GpuZooTest.test_bert_float32 gpu_zoo_test.GpuZooTest.test_llama_float32 > "$OUT/gpu_tests.txt" 2>&1
   echo "gpu tests rc=$? $(( $(date +%s) - T0 )) s"; grep -E "^(Ran|OK|FAILED)|^(FAIL|ERROR):" "$OUT/gpu_tests.txt" | head -6)
fi
echo "total $(( $(date +%s) - T0 )) s"
